"""The scheduler experiments E1-E5, re-derived in virtual time on the example model.

Each test states the workload that reproduces the design's figure, computes the expectation
from the roofline (builders.roofline) or from block arithmetic, and checks the simulation
against it; the design's measured figure is then checked against the formula, loosely.
"""

from __future__ import annotations

import math

import pytest

from llmsim.fleet import FleetRequest, simulate
from llmsim.types import FinishReason

from .builders import FLOPS, PARAMS, roofline, seed_params, sized_params


def test_e1_batching_64_streams_get_38x_the_throughput_for_1_56x_the_step_time() -> None:
    # Prompt 128, 200 outputs, all arriving at 0. 64 x 128 = 8,192 prompt tokens: exactly one
    # full-budget prefill step. Decode step j (1..199) reads 128 + j tokens per stream.
    p, o = 128, 200
    one = [roofline(p, p)] + [roofline(1, p + j) for j in range(1, o)]
    many = [roofline(64 * p, 64 * p)] + [roofline(64, 64 * (p + j)) for j in range(1, o)]
    single = simulate(seed_params(), [FleetRequest.of(0.0, p, o)])
    batch = simulate(seed_params(), [FleetRequest.of(0.0, p, o)] * 64)
    assert [s.duration for s in single.steps] == pytest.approx(one, rel=1e-9)
    assert [s.duration for s in batch.steps] == pytest.approx(many, rel=1e-9)
    assert all(r.token_times[-1] == pytest.approx(sum(many), rel=1e-9) for r in batch.requests)

    throughput_gain = (64 * o / sum(many)) / (o / sum(one))
    step_time_ratio = (sum(many[1:]) / (o - 1)) / (sum(one[1:]) / (o - 1))
    sim_gain = (batch.summary().output_tokens / batch.summary().duration) / (
        single.summary().output_tokens / single.summary().duration
    )
    assert sim_gain == pytest.approx(throughput_gain, rel=1e-9)
    assert throughput_gain == pytest.approx(38, rel=0.03)
    assert step_time_ratio == pytest.approx(1.56, rel=0.02)


def test_e2_context_16x_the_prompt_makes_each_step_about_2_8x_slower() -> None:
    # 32 streams, 200 outputs, prompt 128 vs 2,048; a budget of 32 x 2,048 tokens prefills every
    # prompt in one step, so decode step j reads 32 x (prompt + j) tokens in both runs.
    def decode_steps(prompt: int) -> list[float]:
        params = seed_params(max_batch_tokens=32 * 2048)
        result = simulate(params, [FleetRequest.of(0.0, prompt, 200)] * 32)
        return [s.duration for s in result.steps if s.num_prefill_tokens == 0]

    short, long = decode_steps(128), decode_steps(2048)
    assert short == pytest.approx([roofline(32, 32 * (128 + j)) for j in range(1, 200)], rel=1e-9)
    assert long == pytest.approx([roofline(32, 32 * (2048 + j)) for j in range(1, 200)], rel=1e-9)
    assert (sum(long) / sum(short)) == pytest.approx(2.8, rel=0.05)


@pytest.mark.parametrize("budget", [8192, 2048])
def test_e3_one_long_prompt_stalls_16_decoders_for_one_full_budget_step(budget: int) -> None:
    # 16 streams (prompt 128, 400 outputs) decode; at 0.1 s a prompt of 8,176 tokens arrives.
    # A step is then 16 decode tokens plus the largest chunk that fits: budget tokens in all,
    # compute-bound at 2 x params x budget / FLOPS: 111.7 ms at 8,192, 27.9 ms at 2,048.
    workload = [FleetRequest.of(0.0, 128, 400)] * 16 + [FleetRequest.of(0.1, 8176, 64)]
    result = simulate(seed_params(max_batch_tokens=budget), workload)
    stall = 2 * PARAMS * budget / FLOPS
    decoders = result.requests[:16]
    assert max(max(r.itl) for r in decoders) == pytest.approx(stall, rel=1e-9)
    assert stall == pytest.approx({8192: 0.112, 2048: 0.028}[budget], rel=0.01)
    # One stalled step at 8,192; ceil(8176 / (2048 - 16)) - 1 = 4 full-budget steps at 2,048.
    stalled = sum(gap > 0.02 for gap in decoders[0].itl)
    assert stalled == (1 if budget == 8192 else 4)


def test_e3_a_smaller_budget_serves_the_same_tokens_in_about_the_same_time() -> None:
    workload = [FleetRequest.of(0.0, 128, 400)] * 16 + [FleetRequest.of(0.1, 8176, 64)]
    big, small = (simulate(seed_params(max_batch_tokens=b), workload) for b in (8192, 2048))
    assert big.summary().output_tokens == small.summary().output_tokens == 16 * 400 + 64
    # Prefill is compute-bound either way, so its total time barely changes; the small budget
    # overlaps 4 decode tokens with it instead of 1, which saves a few ~5 ms decode steps.
    assert small.summary().duration == pytest.approx(big.summary().duration, rel=0.01)


def test_e4_the_kv_cache_not_max_num_sequences_decides_how_many_run() -> None:
    # 1,188 blocks of 16; 64 prompts of 2,000 tokens (125 blocks each), 100 outputs.
    # Admission needs the whole prompt: floor(1188 / 125) = 9 fit, although 64 are allowed.
    # 9 x ceil((2000 + 100 - 1) / 16) = 9 x 132 = 1,188 blocks: the 9 never outgrow the cache.
    blocks = 1188
    params = sized_params(blocks, max_num_sequences=64)
    result = simulate(params, [FleetRequest.of(0.0, 2000, 100)] * 64, audit=True)
    assert max(s.num_running for s in result.steps) == blocks // math.ceil(2000 / 16) == 9
    summary = result.summary()
    assert summary.num_preemptions == 0
    assert summary.num_finished == 64
    # Most of the TTFT is queueing (the design measured 4.46 s of 4.57 s).
    assert summary.latencies.queue_time.mean / summary.latencies.ttft.mean > 0.9


def test_e5_requests_that_outgrow_the_cache_together_are_preempted_and_recomputed() -> None:
    # 64 requests (prompt 256 = 16 blocks, 1,024 outputs) fit at admission (64 x 16 <= 1,188)
    # but would grow to 64 x ceil(1279 / 16) = 5,120 blocks: they must take turns.
    workload = [FleetRequest.of(0.0, 256, 1024)] * 64
    runs = {}
    for watermark in (0.0, 0.01):
        params = sized_params(1188, max_num_sequences=64, watermark=watermark)
        runs[watermark] = result = simulate(params, workload, audit=True)
        summary = result.summary()
        assert summary.num_preemptions > 0
        assert all(r.output_tokens == 1024 and r.finish_reason is FinishReason.STOP for r in result.requests)
        assert sum(r.num_preemptions for r in result.requests) == summary.num_preemptions
        assert max(s.kv_used_blocks for s in result.steps) <= 1188
        assert result.steps[-1].kv_used_blocks == 0
        # A preempted stream stalls far longer than a step, yet the median ITL stays one step.
        assert max(gap for r in result.requests for gap in r.itl) > 100 * summary.latencies.itl.p50
    # The watermark keeps room for the running ones to grow: fewer preemptions.
    assert runs[0.01].summary().num_preemptions < runs[0.0].summary().num_preemptions
