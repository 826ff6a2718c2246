"""The fast-forward over runs of decode steps gives the stepping loop's results, to the last bit."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

from llmsim.engine.scheduler import Scheduler, SchedulerParams
from llmsim.engine.scheduler.params import LoraParams
from llmsim.fleet import FleetRequest, FleetResult, simulate

from .builders import roofline, seed_params, tiny_params

# Two "documents" prompts start from, so that prompts share prefixes of every length.
_FAMILIES = [tuple(range(1000 * f, 1000 * f + 96)) for f in range(1, 3)]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[SchedulerParams, list[FleetRequest]]:
    """Small configs with long outputs (long decode runs), caching, LoRA and async scheduling on or off."""
    block_size = draw(st.sampled_from([1, 2, 4, 8]))
    num_blocks = draw(st.integers(3, 32))
    capacity = num_blocks * block_size
    context = draw(st.integers(2, capacity))
    lora = None
    if draw(st.booleans()):
        lora = LoraParams(
            max_loras=draw(st.integers(1, 2)), max_cpu_loras=2, load_s=0.005, adapters=(("x", "/x"), ("y", "/y"))
        )
    params = tiny_params(
        num_blocks,
        block_size=block_size,
        context_length=context,
        max_batch_tokens=draw(st.integers(1, 64)),
        max_num_sequences=draw(st.integers(1, 8)),
        watermark=draw(st.sampled_from([0.0, 0.1, 0.3])),
        max_waiting_requests=draw(st.none() | st.integers(1, 6)),
        enable_prefix_caching=draw(st.booleans()),
        enable_kv_cache_events=True,
        async_scheduling=draw(st.booleans()),
        request_overhead_s=draw(st.sampled_from([0.0, 0.0037])),
        lora=lora,
    )
    items = []
    for i in range(draw(st.integers(0, 16))):
        prompt = draw(st.integers(0, context - 1))
        shared = min(len(_FAMILIES[0]), draw(st.sampled_from([prompt, prompt // 2, 0])))
        family = _FAMILIES[draw(st.integers(0, 1))]
        own = tuple(range(100_000 * (i + 1), 100_000 * (i + 1) + prompt - shared))
        ids = family[:shared] + own if draw(st.booleans()) else None
        output = draw(st.integers(0, context - max(prompt, 1)))
        # Outputs with ids (some of them): a later prompt of the same family may quote them.
        known = draw(st.integers(0, output))
        outputs = family[prompt : prompt + known] if ids is not None and draw(st.booleans()) else None
        arrival = draw(st.integers(0, 1500)) / 1000
        abort_at = draw(st.none() | st.integers(0, 2000).map(lambda ms: ms / 1000))
        adapter = draw(st.sampled_from([None, "x", "y"])) if lora is not None else None
        items.append(FleetRequest.of(arrival, prompt, output, abort_at, ids, outputs, adapter=adapter))
    return params, items


def timeline(result: FleetResult) -> Any:
    return (
        [
            (r.token_times, r.finish_reason, r.ttft, r.e2e, r.queue_time, r.num_preemptions, r.prefix_hit_tokens)
            for r in result.requests
        ],
        result.steps,
        result.replicas[0].kv_peak_used_blocks,
        result.cached_blocks,
    )


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_jumping_over_decode_runs_gives_the_stepping_loop_s_timeline(
    scenario: tuple[SchedulerParams, list[FleetRequest]],
) -> None:
    params, items = scenario
    stepped = simulate(params, items, fast_forward=False, audit=True)
    jumped = simulate(params, items, fast_forward=True, audit=True)
    target(float(len(stepped.steps)), label="steps")
    target(float(stepped.summary().num_preemptions), label="preemptions")
    # The bar: the same token times to 1 ns; they are the same floats.
    for a, b in zip(stepped.requests, jumped.requests, strict=True):
        assert len(a.token_times) == len(b.token_times)
        assert all(abs(x - y) <= 1e-9 for x, y in zip(a.token_times, b.token_times, strict=True))
    # Every step's record too (batch, KV use, waiting, KV-cache events), the cache left behind.
    assert timeline(jumped) == timeline(stepped)


class _Counting(Scheduler[Any]):
    """Counts the steps the scheduler decides one by one."""

    decided = 0

    def schedule(self, now: float) -> Any:
        _Counting.decided += 1
        return super().schedule(now)


def test_a_steady_batch_is_jumped_over_not_stepped(monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 requests at once, 512 + 256 tokens: 4 prefill steps (8,192-token budget), then 255
    # decode steps in which nothing but lengths changes, then everyone finishes together.
    monkeypatch.setattr("llmsim.fleet.replica.Scheduler", _Counting)
    items = [FleetRequest.of(0.0, 512, 256) for _ in range(64)]
    _Counting.decided = 0
    jumped = simulate(seed_params(), items)
    decided_jumping = _Counting.decided
    _Counting.decided = 0
    stepped = simulate(seed_params(), items, fast_forward=False)
    assert timeline(jumped) == timeline(stepped)
    assert _Counting.decided == len(stepped.steps)
    assert len(jumped.steps) == len(stepped.steps)
    assert decided_jumping < len(stepped.steps) / 20


def test_a_run_s_step_times_are_the_roofline_of_a_shrinking_batch() -> None:
    # Two requests of 16-token prompts, 3 and 5 output tokens, alone: one prefill step of 32
    # tokens, then decodes. Decode step j reads both contexts, 17 + j tokens each, until the
    # first request's last token (its 3rd); then the second decodes alone, at 20 and 21 tokens.
    result = simulate(seed_params(), [FleetRequest.of(0.0, 16, 3), FleetRequest.of(0.0, 16, 5)])
    t = roofline(32, 32)
    expected = [t]
    for ctx in (34, 36):
        t += roofline(2, ctx)
        expected.append(t)
    short, long = result.requests
    assert list(short.token_times) == expected
    for ctx in (19, 20):
        t += roofline(1, ctx)
        expected.append(t)
    assert list(long.token_times) == expected
    assert [s.batch_size for s in result.steps] == [2, 2, 2, 1, 1]


@pytest.mark.parametrize("fast_forward", [False, True])
def test_a_run_caches_the_output_block_its_first_step_fills(fast_forward: bool) -> None:
    # Blocks of 4. A's prompt is 3 ids and its first output's id is known: the first decode step
    # computes that token, filling block [1, 2, 3, 4], which is cached. B, sent after A ended,
    # starts with those 4 ids and hits the block.
    params = tiny_params(16, block_size=4)
    a = FleetRequest.of(0.0, 3, 10, prompt_token_ids=(1, 2, 3), output_token_ids=(4,))
    b = FleetRequest.of(1.0, 7, 2, prompt_token_ids=(1, 2, 3, 4, 5, 6, 7))
    result = simulate(params, [a, b], fast_forward=fast_forward)
    assert result.requests[0].e2e < 1.0
    assert result.requests[1].prefix_hit_tokens == 4
