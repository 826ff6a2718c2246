"""How long one step takes on the simulated GPU: a roofline, a pure function of the batch shape.

    compute   = 2 x parameters x scheduled tokens / (TP x peak FLOP/s x compute efficiency)
    memory    = (weight bytes + KV bytes per token x context tokens read) / (TP x bandwidth x memory efficiency)
    all-reduce = 2 x layers x (latency + 2 (TP - 1) / TP x scheduled tokens x hidden size x 2 B / link bandwidth)
    duration  = max(compute, memory) + all-reduce + step overhead + per-sequence overhead x scheduled sequences

"Context tokens read" by one scheduled sequence is its length after the step,
``num_computed_tokens + num_scheduled_tokens``: a prefill chunk attends to the tokens already
computed plus the chunk itself (and writes the chunk's KV), a decode step to its full context
including the token being computed. Attention FLOPs are left out: at the context lengths served
they are small next to the 2 x parameters per token of the matrix multiplies. For a mixture of
experts "parameters" are the active ones (what one token multiplies by) and "weight bytes" all of
them: past a handful of tokens a step's tokens route to every expert, so every expert is read.

Tensor parallelism (Megatron-style, as vLLM shards a model over ``TP`` GPUs): each rank holds
1/TP of the weights and of the KV heads (see ``SchedulerParams.kv_bytes_per_token_per_gpu``) and
does 1/TP of the FLOPs, all ranks at once; after attention's output projection and after the MLP
each layer sums its ranks' partial activations with an all-reduce (Vidur's execution-time model
has the same two per layer: ``attention_all_reduce_time`` and ``mlp_all_reduce_time``). A ring
all-reduce of ``S`` bytes moves ``2 (TP - 1) / TP x S`` bytes over each GPU's link (NCCL's bus
bandwidth), plus a fixed latency per collective. The all-reduces sit on the critical path (vLLM
does not overlap them with compute), so they add to the step. Activations are 16-bit, also with
FP8 weights.

The per-sequence overhead is what a batch costs beyond the roofline for each sequence in it:
vLLM's scheduler, input preparation, sampling and output processing loop over the batch every
step, and decode kernels run below the roofline as the batch grows. Published sweeps show it
as TPOT rising linearly with concurrency (about 0.04 ms per sequence on an H100 or A100 with
an 8B model) long before a decode step turns compute-bound.
"""

from __future__ import annotations

from llmsim.engine.scheduler.params import SchedulerParams

#: Bytes per activation element an all-reduce sums (bf16/fp16).
ACTIVATION_BYTES = 2
#: All-reduces per transformer layer under tensor parallelism (attention output, MLP output).
ALL_REDUCES_PER_LAYER = 2


class CostModel:
    """Precomputed roofline constants for one model on one GPU (or one tensor-parallel group)."""

    __slots__ = (
        "all_reduce_seconds_per_token",
        "kv_seconds_per_token",
        "overhead",
        "overhead_per_sequence",
        "seconds_per_token",
        "weight_seconds",
    )

    def __init__(self, params: SchedulerParams) -> None:
        gpu, model = params.gpu, params.model
        tp = params.tensor_parallel_size
        flops = gpu.peak_flops * params.compute_efficiency
        bandwidth = gpu.memory_bandwidth * params.memory_efficiency
        self.seconds_per_token = 2.0 * model.num_parameters / (tp * flops)
        self.weight_seconds = params.weight_bytes_per_gpu / bandwidth
        self.kv_seconds_per_token = params.kv_bytes_per_token_per_gpu / bandwidth
        all_reduce_fixed = 0.0
        self.all_reduce_seconds_per_token = 0.0
        if tp > 1:
            collectives = ALL_REDUCES_PER_LAYER * model.num_hidden_layers
            all_reduce_fixed = collectives * gpu.interconnect_latency_s
            ring_bytes = 2.0 * (tp - 1) / tp * model.hidden_size * ACTIVATION_BYTES
            self.all_reduce_seconds_per_token = collectives * ring_bytes / gpu.interconnect_bandwidth
        # The all-reduces' fixed part costs every step alike: it joins the step overhead.
        self.overhead = params.step_overhead_s + all_reduce_fixed
        self.overhead_per_sequence = params.step_overhead_per_sequence_s

    def compute_time(self, num_tokens: int) -> float:
        return self.seconds_per_token * num_tokens

    def memory_time(self, context_tokens: int) -> float:
        return self.weight_seconds + self.kv_seconds_per_token * context_tokens

    def step_duration(self, num_tokens: int, context_tokens: int, num_sequences: int = 0) -> float:
        """Seconds for a step computing ``num_tokens`` tokens of ``num_sequences`` sequences that
        reads ``context_tokens`` tokens of KV.

        NOTE: ``DecodeRun.extend`` repeats this formula inline for decode steps (its inner loop):
        a mirrored rule, see the package docstring.
        """
        compute = self.seconds_per_token * num_tokens
        memory = self.weight_seconds + self.kv_seconds_per_token * context_tokens
        return (
            (compute if compute > memory else memory)
            + self.overhead
            + self.overhead_per_sequence * num_sequences
            + self.all_reduce_seconds_per_token * num_tokens
        )
