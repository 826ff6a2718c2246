"""Tensor parallelism in the cost model and the KV capacity: expectations worked out by hand.

Each expected value is written from the model's definition (Megatron-style sharding, a ring
all-reduce of ``2 (TP - 1) / TP x S`` bytes per GPU, two all-reduces per layer), not from the code.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from llmsim.engine.scheduler import CostModel, GpuSpec, ModelSpec, SchedulerParams, num_kv_blocks

from .builders import H100, LLAMA_70B


def params(tp: int, model: ModelSpec = LLAMA_70B, gpu: GpuSpec = H100) -> SchedulerParams:
    return SchedulerParams(gpu=gpu, model=model, context_length=8192, tensor_parallel_size=tp)


def test_tp2_halves_a_compute_bound_step_and_adds_the_all_reduces() -> None:
    # A 4,096-token prefill chunk of the 70B model: compute-bound at TP 1 and TP 2.
    tokens, context = 4096, 4096
    one = CostModel(params(1)).step_duration(tokens, context, 1)
    two = CostModel(params(2)).step_duration(tokens, context, 1)
    compute_tp1 = 2 * 70.6e9 * 4096 / 989e12  # 0.5848 s
    assert one == pytest.approx(compute_tp1, rel=1e-12)
    # TP 2: half the FLOPs a GPU, then 2 x 80 all-reduces of 4,096 x 8,192 x 2 B = 64 MiB each, of
    # which a ring moves 2 x (2 - 1) / 2 = 1 x the message over each GPU's 450 GB/s link.
    message = 4096 * 8192 * 2
    all_reduce = 160 * (40e-6 + 1.0 * message / 450e9)  # 160 x (40 us + 149.1 us) = 30.26 ms
    assert two == pytest.approx(compute_tp1 / 2 + all_reduce, rel=1e-12)
    assert all_reduce == pytest.approx(0.030259, rel=1e-4)


def test_tp4_decode_reads_a_quarter_of_the_weights_and_kv_per_gpu() -> None:
    # 8 sequences at 1,000 tokens of context decode one token each: memory-bound.
    batch, context = 8, 8 * 1000
    step = CostModel(params(4)).step_duration(batch, context, batch)
    weights = 141.2e9 / 4 / 3350e9  # 10.537 ms
    kv = 327_680 / 4 * context / 3350e9  # 8 KV heads over 4 GPUs: 2 each
    ring = 2 * 3 / 4 * 8 * 8192 * 2 / 450e9  # 1.5 x 131,072 B = 0.437 us
    all_reduce = 160 * (40e-6 + ring)
    assert step == pytest.approx(weights + kv + all_reduce, rel=1e-12)
    assert step * 1e3 == pytest.approx(10.537 + 0.196 + 6.470, abs=0.002)


def test_kv_capacity_grows_with_the_gpu_count() -> None:
    budget = 0.9 * 80 * 2**30  # 77.31 GB a GPU
    expected = {
        2: math.floor((budget - 141.2e9 / 2) / (327_680 / 2 * 16)),
        4: math.floor((budget - 141.2e9 / 4) / (327_680 / 4 * 16)),
        8: math.floor((budget - 141.2e9 / 8) / (327_680 / 8 * 16)),
    }
    # (77.309 - 70.6) GB / 2,621,440 B; (77.309 - 35.3) GB / 1,310,720 B; (77.309 - 17.65) GB / 655,360 B.
    assert expected == {2: 2559, 4: 32050, 8: 91033}
    for tp, blocks in expected.items():
        assert num_kv_blocks(params(tp)) == blocks
    # Tokens held per replica: more than the GPU count's multiple of the first (weights shrink too).
    assert expected[8] / expected[2] > 4


def test_kv_heads_are_replicated_past_one_head_a_gpu() -> None:
    # 8 KV heads over 16 GPUs: vLLM gives each rank one head (max(1, 8 // 16)), so a GPU's KV a
    # token is kv / 8, not kv / 16.
    p16 = params(16)
    assert p16.kv_bytes_per_token_per_gpu == 327_680 / 8
    budget = 0.9 * 80 * 2**30
    assert num_kv_blocks(p16) == math.floor((budget - 141.2e9 / 16) / (327_680 / 8 * 16))


def test_a_mixture_of_experts_holds_every_expert_but_multiplies_by_the_active_ones() -> None:
    # Mixtral 8x7B: 46.7 B parameters held, 12.9 B multiplied per token, bf16, TP 2.
    mixtral = ModelSpec(
        num_parameters=12.9e9,
        weight_bytes=46.7e9 * 2,
        kv_bytes_per_token=131_072,
        num_hidden_layers=32,
        hidden_size=4096,
        num_key_value_heads=8,
    )
    p = params(2, mixtral)
    budget = 0.9 * 80 * 2**30
    assert num_kv_blocks(p) == math.floor((budget - 93.4e9 / 2) / (131_072 / 2 * 16))
    cost = CostModel(p)
    # Compute-bound prefill: FLOPs from the active parameters.
    tokens = 8192
    all_reduce = 64 * (40e-6 + 1.0 * tokens * 4096 * 2 / 450e9)
    compute = 2 * 12.9e9 * tokens / (2 * 989e12)
    assert cost.step_duration(tokens, tokens, 1) == pytest.approx(compute + all_reduce, rel=1e-12)
    # Memory-bound decode: every expert's weights are read.
    decode = cost.step_duration(1, 100, 1)
    memory = (93.4e9 / 2 + 131_072 / 2 * 100) / 3350e9
    assert decode == pytest.approx(memory + 64 * (40e-6 + 4096 * 2 / 450e9), rel=1e-12)


def test_tp1_is_the_single_gpu_roofline() -> None:
    # No interconnect term at TP 1, whatever the link: the formula reduces to the old one.
    cost = CostModel(params(1))
    assert cost.all_reduce_seconds_per_token == 0.0
    assert cost.overhead == 0.0
    assert cost.step_duration(1, 1000, 1) == pytest.approx((141.2e9 + 327_680 * 1000) / 3350e9, rel=1e-12)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gpu": dataclasses.replace(H100, interconnect_bandwidth=0.0)}, "interconnect bandwidth"),
        ({"model": dataclasses.replace(LLAMA_70B, num_hidden_layers=0)}, "num_hidden_layers"),
        ({"tensor_parallel_size": 3}, "key/value heads (8)"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size must be >= 1"),
    ],
)
def test_a_tensor_parallel_group_it_cannot_price_is_refused(change: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"gpu": H100, "model": LLAMA_70B, "context_length": 8192, "tensor_parallel_size": 2}
    fields |= change
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SchedulerParams(**fields)  # type: ignore[arg-type]
