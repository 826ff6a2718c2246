"""How long one step takes on the simulated GPU: a roofline, a pure function of the batch shape.

    compute   = 2 x parameters x scheduled tokens / (TP x peak FLOP/s x compute efficiency)
    memory    = (weight bytes read + KV bytes per token x context tokens read) / (TP x bandwidth x memory efficiency)
    all-reduce = 2 x layers x (latency + 2 (TP - 1) / TP x scheduled tokens x hidden size x 2 B / link bandwidth)
    duration  = max(compute, memory) + all-reduce + step overhead + per-sequence overhead x scheduled sequences

"Context tokens read" by one scheduled sequence is its length after the step,
``num_computed_tokens + num_scheduled_tokens``: a prefill chunk attends to the tokens already
computed plus the chunk itself (and writes the chunk's KV), a decode step to its full context
including the token being computed. Attention FLOPs are left out: at the context lengths served
they are small next to the 2 x parameters per token of the matrix multiplies. For a mixture of
experts "parameters" are the active ones (what one token multiplies by), and a step reads the
shared weights (attention, router, embeddings) and the routed experts its tokens go to: with
``E`` experts a layer and ``k`` a token, each of a step's ``T`` tokens picks ``k`` distinct ones,
so an expert is left unread with probability ``(1 - k/E)^T`` (routing taken as uniform; a real
router's skew leaves a few more unread). One decode token of Mixtral (8 experts, 2 a token)
reads a quarter of them; eight tokens nine tenths; a prefill chunk all of them::

    weights read = shared bytes + expert bytes x (1 - (1 - k/E)^T)

Tensor parallelism (Megatron-style, as vLLM shards a model over ``TP`` GPUs): each rank holds
1/TP of the weights and of the KV heads (see ``SchedulerParams.kv_bytes_per_token_per_gpu``) and
does 1/TP of the FLOPs, all ranks at once; after attention's output projection and after the MLP
each layer sums its ranks' partial activations with an all-reduce (Vidur's execution-time model
has the same two per layer: ``attention_all_reduce_time`` and ``mlp_all_reduce_time``). A ring
all-reduce of ``S`` bytes moves ``2 (TP - 1) / TP x S`` bytes over each GPU's link (NCCL's bus
bandwidth), plus a fixed latency per collective. The all-reduces sit on the critical path (vLLM
does not overlap them with compute), so they add to the step. Activations are 16-bit, also with
FP8 weights.

Pipeline parallelism (``PP`` stages of consecutive layers, each on ``TP`` GPUs; vLLM's split, see
``params.pipeline_stage_layers``): :meth:`CostModel.pipeline_latency` is one batch's time through
every stage, each stage's roofline over its own layers (its share of the FLOPs, weights, KV and
all-reduces), plus the hand-over between consecutive stages: vLLM sends two activations a token
(``hidden_states`` and ``residual``, ``IntermediateTensors`` in vllm/model_executor/models/llama.py),
each TP rank its ``1/TP`` slice to its peer in the next stage, which all-gathers them over its TP
group (``isend_tensor_dict(..., all_gather_group=get_tp_group())`` in vllm/v1/worker/gpu_worker.py).
That is one batch alone; with others in flight the stages overlap (``pipeline.Pipeline`` times
them from :meth:`CostModel.stage_times` and :meth:`CostModel.hand_over`).

The per-sequence overhead is what a batch costs beyond the roofline for each sequence in it:
vLLM's scheduler, input preparation, sampling and output processing loop over the batch every
step, and decode kernels run below the roofline as the batch grows. Published sweeps show it
as TPOT rising linearly with concurrency (about 0.04 ms per sequence on an H100 or A100 with
an 8B model) long before a decode step turns compute-bound.
"""

from __future__ import annotations

from llmsim.engine.scheduler.params import SchedulerParams, kv_bytes_per_gpu

#: Bytes per activation element an all-reduce sums (bf16/fp16).
ACTIVATION_BYTES = 2
#: All-reduces per transformer layer under tensor parallelism (attention output, MLP output).
ALL_REDUCES_PER_LAYER = 2
#: Activations a token one pipeline stage hands the next (vLLM's hidden_states and residual).
PIPELINE_TENSORS_PER_TOKEN = 2


class CostModel:
    """Precomputed roofline constants for one model on one GPU (or one tensor-parallel group)."""

    __slots__ = (
        "all_reduce_fixed",
        "all_reduce_seconds_per_token",
        "expert_miss",
        "expert_seconds",
        "hand_over_fixed",
        "hand_over_seconds_per_token",
        "kv_seconds_per_token",
        "overhead",
        "overhead_per_sequence",
        "seconds_per_token",
        "stage_shares",
        "step_overhead",
        "weight_seconds",
    )

    def __init__(self, params: SchedulerParams) -> None:
        gpu, model = params.gpu, params.model
        tp = params.tensor_parallel_size
        flops = gpu.peak_flops * params.compute_efficiency
        bandwidth = gpu.memory_bandwidth * params.memory_efficiency
        # The whole layer stack on one tensor-parallel group (a pipeline stage takes its share).
        self.seconds_per_token = 2.0 * model.num_parameters / (tp * flops)
        # The weights every step reads; a mixture of experts' routed experts are apart (weight_time).
        self.weight_seconds = (model.weight_bytes - model.expert_weight_bytes) / tp / bandwidth
        self.expert_seconds = model.expert_weight_bytes / tp / bandwidth
        self.expert_miss = 1.0 - model.experts_per_token / model.num_experts if model.num_experts else 1.0
        self.kv_seconds_per_token = (
            kv_bytes_per_gpu(model.kv_bytes_per_token, tp, model.num_key_value_heads) / bandwidth
        )
        self.all_reduce_fixed = 0.0
        self.all_reduce_seconds_per_token = 0.0
        if tp > 1:
            collectives = ALL_REDUCES_PER_LAYER * model.num_hidden_layers
            self.all_reduce_fixed = collectives * gpu.interconnect_latency_s
            ring_bytes = 2.0 * (tp - 1) / tp * model.hidden_size * ACTIVATION_BYTES
            self.all_reduce_seconds_per_token = collectives * ring_bytes / gpu.interconnect_bandwidth
        # The all-reduces' fixed part costs every step alike: it joins the step overhead.
        self.step_overhead = params.step_overhead_s
        self.overhead = params.step_overhead_s + self.all_reduce_fixed
        self.overhead_per_sequence = params.step_overhead_per_sequence_s
        pp = params.pipeline_parallel_size
        self.stage_shares: tuple[float, ...] = (1.0,)
        self.hand_over_fixed = 0.0
        self.hand_over_seconds_per_token = 0.0
        if pp > 1:
            self.stage_shares = tuple(n / model.num_hidden_layers for n in params.stage_layers)
            # A rank sends its 1/TP slice of the token's activations; with TP > 1 the receiving
            # ranks all-gather the slices, a ring moving (TP - 1) / TP of the message each.
            message = PIPELINE_TENSORS_PER_TOKEN * model.hidden_size * ACTIVATION_BYTES
            per_token = message / tp + (message * (tp - 1) / tp)
            self.hand_over_fixed = gpu.interconnect_latency_s * (2 if tp > 1 else 1)
            self.hand_over_seconds_per_token = per_token / gpu.interconnect_bandwidth

    def compute_time(self, num_tokens: int) -> float:
        return self.seconds_per_token * num_tokens

    def weight_time(self, num_tokens: int) -> float:
        """Seconds to read the weights a step of ``num_tokens`` tokens multiplies by: all of a dense
        model's; a mixture of experts' shared weights and the experts its tokens route to."""
        if not self.expert_seconds:
            return self.weight_seconds
        return self.weight_seconds + self.expert_seconds * (1.0 - self.expert_miss**num_tokens)

    def memory_time(self, num_tokens: int, context_tokens: int) -> float:
        return self.weight_time(num_tokens) + self.kv_seconds_per_token * context_tokens

    def step_duration(self, num_tokens: int, context_tokens: int, num_sequences: int = 0) -> float:
        """Seconds for a step computing ``num_tokens`` tokens of ``num_sequences`` sequences that
        reads ``context_tokens`` tokens of KV.

        NOTE: ``DecodeRun.extend`` repeats this formula inline for decode steps (its inner loop):
        a mirrored rule, see the package docstring.
        """
        compute = self.seconds_per_token * num_tokens
        weights = self.weight_seconds if not self.expert_seconds else self.weight_time(num_tokens)
        memory = weights + self.kv_seconds_per_token * context_tokens
        return (
            (compute if compute > memory else memory)
            + self.overhead
            + self.overhead_per_sequence * num_sequences
            + self.all_reduce_seconds_per_token * num_tokens
        )

    def stage_times(self, num_tokens: int, context_tokens: int, num_sequences: int = 0) -> list[float]:
        """Seconds each pipeline stage spends on a batch: its layers' roofline and all-reduces; the
        step overheads (scheduling, input preparation, sampling, output processing) go to the first
        stage, whose start gates the batch."""
        compute = self.seconds_per_token * num_tokens
        memory = self.weight_time(num_tokens) + self.kv_seconds_per_token * context_tokens
        layers = (compute if compute > memory else memory) + (
            self.all_reduce_fixed + self.all_reduce_seconds_per_token * num_tokens
        )
        times = [layers * share for share in self.stage_shares]
        times[0] += self.step_overhead + self.overhead_per_sequence * num_sequences
        return times

    def hand_over(self, num_tokens: int) -> float:
        """Seconds to pass a batch's activations from one pipeline stage to the next."""
        return self.hand_over_fixed + self.hand_over_seconds_per_token * num_tokens

    def pipeline_latency(self, num_tokens: int, context_tokens: int, num_sequences: int = 0) -> float:
        """Seconds for one batch to pass every pipeline stage: the sum of each stage's roofline over
        its layers (with their all-reduces), the hand-overs between stages, and the step's
        overheads once (the engine core schedules and samples a batch once).

        With one stage this is :meth:`step_duration`. Not one step of a pipelined engine: vLLM runs
        other batches on the other stages meanwhile (see the module docstring).
        """
        stages = sum(self.stage_times(num_tokens, context_tokens, num_sequences))
        return stages + (len(self.stage_shares) - 1) * self.hand_over(num_tokens)
