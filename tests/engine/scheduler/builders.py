"""Builders on tiny and seed-design configs (like vLLM's create_scheduler()/create_requests()).

The reference example: 80 GiB HBM at 3,000 GB/s and 989 TFLOPS, a 6.74 B-parameter fp16
model (13.48 GB of weights), 512 KiB of KV per token, 90 % utilisation, blocks of 16 tokens.
"""

from __future__ import annotations

from typing import Any

from llmsim.engine.scheduler import (
    GpuSpec,
    ModelSpec,
    Scheduler,
    SchedulerOutput,
    SchedulerParams,
    Sequence,
    StepResult,
)
from llmsim.types import RequestId

# The reference example's figures, written out once so tests derive expectations from them.
PARAMS = 6.74e9  # parameters
WEIGHTS = PARAMS * 2  # bytes (fp16)
KV_PER_TOKEN = 524_288  # bytes
BANDWIDTH = 3000e9  # bytes/s
FLOPS = 989e12  # FLOP/s
HBM = 80 * 2**30  # bytes

SEED_GPU = GpuSpec(hbm_bytes=HBM, memory_bandwidth=BANDWIDTH, peak_flops=FLOPS)
SEED_MODEL = ModelSpec(num_parameters=PARAMS, weight_bytes=WEIGHTS, kv_bytes_per_token=KV_PER_TOKEN)

#: The parallelism tests' pair, written out from the profiles (hardware.yml, model_profiles.yml):
#: an H100 SXM with NVLink 4 (450 GB/s each way, 40 us a small collective) ...
H100 = GpuSpec(
    hbm_bytes=80 * 2**30,
    memory_bandwidth=3350e9,
    peak_flops=989e12,
    interconnect_bandwidth=450e9,
    interconnect_latency_s=40e-6,
)
#: ... and Llama 3.1 70B in bf16: 80 layers, hidden 8192, 8 KV heads of 128, 327,680 KV bytes a token.
LLAMA_70B = ModelSpec(
    num_parameters=70.6e9,
    weight_bytes=141.2e9,
    kv_bytes_per_token=327_680,
    num_hidden_layers=80,
    hidden_size=8192,
    num_key_value_heads=8,
)


def roofline(tokens: int, context_tokens: int) -> float:
    """The roofline step-duration formula for the reference model, efficiencies 1, no overhead."""
    compute = 2 * PARAMS * tokens / FLOPS
    memory = (WEIGHTS + KV_PER_TOKEN * context_tokens) / BANDWIDTH
    return max(compute, memory)


def seed_params(**overrides: Any) -> SchedulerParams:
    fields: dict[str, Any] = {"context_length": 32768} | overrides
    return SchedulerParams(gpu=SEED_GPU, model=SEED_MODEL, **fields)


def sized_params(num_blocks: int, *, block_size: int = 16, **overrides: Any) -> SchedulerParams:
    """The reference GPU's speed and model, with HBM sized so exactly ``num_blocks`` KV blocks are usable.

    vLLM's null block comes on top: the GPU holds ``num_blocks + 1`` blocks.
    """
    hbm = WEIGHTS + (num_blocks + 1.5) * KV_PER_TOKEN * block_size
    gpu = GpuSpec(hbm_bytes=hbm, memory_bandwidth=BANDWIDTH, peak_flops=FLOPS)
    fields: dict[str, Any] = {"context_length": min(4096, num_blocks * block_size)} | overrides
    return SchedulerParams(gpu=gpu, model=SEED_MODEL, block_size=block_size, gpu_memory_utilization=1.0, **fields)


def tiny_params(num_blocks: int, *, block_size: int = 4, **overrides: Any) -> SchedulerParams:
    """A toy model (1 B of KV per token, ~10 ms steps) with exactly ``num_blocks`` usable blocks (+ the null block)."""
    model = ModelSpec(num_parameters=1e6, weight_bytes=1e6, kv_bytes_per_token=1)
    gpu = GpuSpec(hbm_bytes=1e6 + (num_blocks + 1.5) * block_size, memory_bandwidth=1e8, peak_flops=1e12)
    fields: dict[str, Any] = {"context_length": num_blocks * block_size, "max_batch_tokens": 1000} | overrides
    return SchedulerParams(gpu=gpu, model=model, block_size=block_size, gpu_memory_utilization=1.0, **fields)


def tiny_scheduler(num_blocks: int, **overrides: Any) -> Scheduler[Sequence]:
    return Scheduler(tiny_params(num_blocks, **overrides))


def seq(name: str, prompt: int, output: int, arrival: float = 0.0) -> Sequence:
    return Sequence(RequestId(name), arrival, prompt, output)


def step(sched: Scheduler[Sequence], index: int) -> tuple[SchedulerOutput[Sequence], StepResult[Sequence]]:
    """Run step ``index`` from time ``index`` to ``index + 1`` (durations are irrelevant to decisions)."""
    out = sched.schedule(float(index))
    result = sched.update_from_output(out, float(index + 1))
    sched.kv.audit(list(sched.running))
    return out, result


def names(seqs: list[Sequence]) -> list[str]:
    return [s.request_id for s in seqs]
