"""The roofline step duration, and the reference model's single-request and 29-request figures."""

from __future__ import annotations

import dataclasses

import pytest

from llmsim.engine.scheduler import CostModel, ModelSpec
from llmsim.fleet import FleetRequest, simulate

from .builders import BANDWIDTH, FLOPS, KV_PER_TOKEN, PARAMS, WEIGHTS, roofline, seed_params


def test_memory_bound_decode_and_compute_bound_prefill() -> None:
    cost = CostModel(seed_params())
    # Decode of one sequence at 1,000 tokens of context: reads the weights plus 1,000 tokens of KV.
    assert cost.step_duration(1, 1000) == pytest.approx((WEIGHTS + 1000 * KV_PER_TOKEN) / BANDWIDTH, rel=1e-12)
    # A full 8,192-token prefill: 2 x 6.74e9 x 8192 / 989e12 = 111.7 ms of compute.
    assert cost.step_duration(8192, 8192) == pytest.approx(2 * PARAMS * 8192 / FLOPS, rel=1e-12)
    assert cost.step_duration(8192, 8192) == pytest.approx(0.1117, rel=0.001)


def test_efficiencies_and_overhead() -> None:
    cost = CostModel(seed_params(compute_efficiency=0.5, memory_efficiency=0.8, step_overhead_s=0.002))
    assert cost.step_duration(1, 0) == pytest.approx(WEIGHTS / (BANDWIDTH * 0.8) + 0.002, rel=1e-12)
    assert cost.step_duration(8192, 0) == pytest.approx(2 * PARAMS * 8192 / (FLOPS * 0.5) + 0.002, rel=1e-12)
    assert cost.compute_time(10) == pytest.approx(2 * PARAMS * 10 / (FLOPS * 0.5))
    assert cost.memory_time(1, 10) == pytest.approx((WEIGHTS + 10 * KV_PER_TOKEN) / (BANDWIDTH * 0.8))


def test_the_per_sequence_overhead_adds_for_each_sequence_in_the_step() -> None:
    params = seed_params(step_overhead_s=0.001, step_overhead_per_sequence_s=0.0002)
    cost = CostModel(params)
    assert cost.step_duration(1, 1000, 1) == pytest.approx((WEIGHTS + 1000 * KV_PER_TOKEN) / BANDWIDTH + 0.0012)
    assert cost.step_duration(8192, 8192, 4) == pytest.approx(2 * PARAMS * 8192 / FLOPS + 0.001 + 4 * 0.0002)
    # Three 16-token prompts prefill in one step (3 sequences), then decode in lockstep: decode
    # step j computes 3 tokens and reads 3 x (16 + j) tokens of KV.
    result = simulate(params, [FleetRequest.of(0.0, 16, 3)] * 3)
    for r in result.requests:
        assert r.ttft == pytest.approx(roofline(48, 48) + 0.001 + 3 * 0.0002, rel=1e-12)
        assert r.itl == pytest.approx([roofline(3, 3 * (16 + j)) + 0.0016 for j in (1, 2)], rel=1e-12)


def test_one_short_request_decodes_at_about_4_5_ms_per_token() -> None:
    # Prompt 16, 10 outputs: decode step j (1..9) computes token 16 + j and reads 16 + j tokens.
    result = simulate(seed_params(), [FleetRequest.of(0.0, 16, 10)])
    (r,) = result.requests
    assert r.ttft == pytest.approx(roofline(16, 16), rel=1e-12)
    assert r.itl == pytest.approx([roofline(1, 16 + j) for j in range(1, 10)], rel=1e-12)
    assert r.itl[0] == pytest.approx(0.0045, rel=0.01)


def test_29_requests_at_4k_context_share_an_itl_of_about_25_ms() -> None:
    # A budget of 29 x 4000 tokens prefills all prompts in one step, so the 29 decode in lockstep:
    # decode step j reads 29 x (4000 + j) tokens of KV, ~62 GB -> ~25 ms for everyone.
    params = seed_params(max_batch_tokens=29 * 4000)
    result = simulate(params, [FleetRequest.of(0.0, 4000, 96)] * 29)
    expected = [roofline(29, 29 * (4000 + j)) for j in range(1, 96)]
    for r in result.requests:
        assert r.itl == pytest.approx(expected, rel=1e-9)
    assert result.summary().latencies.itl.p50 == pytest.approx(0.025, rel=0.02)


def test_a_mixture_of_experts_reads_the_experts_its_tokens_route_to() -> None:
    """Mixtral 8x7B (8 experts a layer, 2 a token; 46.7 B parameters, 12.9 B active) in bf16 on
    the reference GPU: the routed experts hold (46.7 - 12.9) / (1 - 2/8) = 45.07 B parameters,
    the rest (attention, router, embeddings) 1.63 B. One decode token reads exactly the active
    parameters' bytes; T tokens leave an expert unread with probability (3/4)^T; a prefill chunk
    reads them all."""
    total, active = 46.7e9, 12.9e9
    routed = (total - active) / (1 - 2 / 8)
    model = ModelSpec(
        num_parameters=active,
        weight_bytes=total * 2,
        kv_bytes_per_token=131_072,
        num_experts=8,
        experts_per_token=2,
        expert_weight_bytes=routed * 2,
    )
    cost = CostModel(dataclasses.replace(seed_params(), model=model))
    assert cost.weight_time(1) == pytest.approx(active * 2 / BANDWIDTH, rel=1e-12)
    shared = (total - routed) * 2
    for tokens in (2, 8, 64):
        read = shared + routed * 2 * (1 - 0.75**tokens)
        assert cost.step_duration(tokens, 100 * tokens) == pytest.approx(
            max(2 * active * tokens / FLOPS, (read + 100 * tokens * 131_072) / BANDWIDTH), rel=1e-12
        )
    assert cost.weight_time(8192) == pytest.approx(total * 2 / BANDWIDTH, rel=1e-12)
    # A dense model of the same bytes reads them all at every step: 3.6x the lone token's read.
    dense_model = ModelSpec(num_parameters=active, weight_bytes=total * 2, kv_bytes_per_token=131_072)
    dense = CostModel(dataclasses.replace(seed_params(), model=dense_model))
    assert dense.weight_time(1) / cost.weight_time(1) == pytest.approx(total / active, rel=1e-12)
