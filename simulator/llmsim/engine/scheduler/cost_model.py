"""How long one step takes on the simulated GPU: a roofline, a pure function of the batch shape.

    compute  = 2 x parameters x scheduled tokens / (peak FLOP/s x compute efficiency)
    memory   = (weight bytes + KV bytes per token x context tokens read) / (bandwidth x memory efficiency)
    duration = max(compute, memory) + step overhead + per-sequence overhead x scheduled sequences

"Context tokens read" by one scheduled sequence is its length after the step,
``num_computed_tokens + num_scheduled_tokens``: a prefill chunk attends to the tokens already
computed plus the chunk itself (and writes the chunk's KV), a decode step to its full context
including the token being computed. Attention FLOPs are left out: at the context lengths served
they are small next to the 2 x parameters per token of the matrix multiplies.

The per-sequence overhead is what a batch costs beyond the roofline for each sequence in it:
vLLM's scheduler, input preparation, sampling and output processing loop over the batch every
step, and decode kernels run below the roofline as the batch grows. Published sweeps show it
as TPOT rising linearly with concurrency (about 0.04 ms per sequence on an H100 or A100 with
an 8B model) long before a decode step turns compute-bound.
"""

from __future__ import annotations

from llmsim.engine.scheduler.params import SchedulerParams


class CostModel:
    """Precomputed roofline constants for one model on one GPU."""

    __slots__ = ("kv_seconds_per_token", "overhead", "overhead_per_sequence", "seconds_per_token", "weight_seconds")

    def __init__(self, params: SchedulerParams) -> None:
        gpu, model = params.gpu, params.model
        flops = gpu.peak_flops * params.compute_efficiency
        bandwidth = gpu.memory_bandwidth * params.memory_efficiency
        self.seconds_per_token = 2.0 * model.num_parameters / flops
        self.weight_seconds = model.weight_bytes / bandwidth
        self.kv_seconds_per_token = model.kv_bytes_per_token / bandwidth
        self.overhead = params.step_overhead_s
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
        return (compute if compute > memory else memory) + self.overhead + self.overhead_per_sequence * num_sequences
