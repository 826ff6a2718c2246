"""Random small configs, arrivals and client aborts: capacity holds, no block leaks, plans complete, runs repeat."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsim.engine.scheduler import SchedulerParams, WorkloadItem, simulate
from llmsim.types import FinishReason

from .builders import tiny_params


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[SchedulerParams, list[WorkloadItem]]:
    block_size = draw(st.sampled_from([1, 2, 4, 8]))
    num_blocks = draw(st.integers(2, 24))
    capacity = num_blocks * block_size
    context = draw(st.integers(1, capacity))
    params = tiny_params(
        num_blocks,
        block_size=block_size,
        context_length=context,
        max_batch_tokens=draw(st.integers(1, 48)),
        max_num_sequences=draw(st.integers(1, 6)),
        watermark=draw(st.sampled_from([0.0, 0.1, 0.3])),
    )
    items = []
    for _ in range(draw(st.integers(0, 14))):
        prompt = draw(st.integers(0, context))
        # Plans within the context length, so every un-aborted one must complete exactly.
        output = draw(st.integers(0, context - max(prompt, 1)))
        # Steps last ~10 ms: arrivals and aborts over ~0.5 s interleave with many steps.
        arrival = draw(st.integers(0, 500)) / 1000
        abort_at = draw(st.none() | st.integers(0, 800).map(lambda ms: ms / 1000))
        items.append(WorkloadItem(arrival, prompt, output, abort_at))
    return params, items


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_workloads_respect_capacity_free_every_block_and_finish_plans(
    scenario: tuple[SchedulerParams, list[WorkloadItem]],
) -> None:
    params, workload = scenario
    result = simulate(params, workload, audit=True)
    total = result.kv_total_blocks
    assert result.kv_peak_used_blocks <= total
    for s in result.steps:
        assert 1 <= s.num_prefill_tokens + s.num_decode_tokens <= params.max_batch_tokens
        assert s.num_running <= params.max_num_sequences
        assert s.kv_used_blocks <= total
        assert s.kv_total_blocks == total
        assert s.batch_size >= 1
    if result.steps:
        last = result.steps[-1]
        assert (last.kv_used_blocks, last.num_running, last.num_waiting) == (0, 0, 0)
    for item, r in zip(workload, result.requests, strict=True):
        times = r.token_times
        assert all(b > a for a, b in itertools.pairwise(times))
        assert all(t >= item.arrival for t in times)
        if r.finish_reason is FinishReason.ABORT:
            assert item.abort_at is not None
            assert r.output_tokens <= item.output_tokens
            assert all(t <= max(item.abort_at, item.arrival) for t in times)
        else:
            assert r.finish_reason is FinishReason.STOP
            assert r.output_tokens == item.output_tokens == len(times)
            assert r.e2e >= (r.ttft or 0.0) >= 0.0


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_the_same_input_gives_the_same_timeline(scenario: tuple[SchedulerParams, list[WorkloadItem]]) -> None:
    params, workload = scenario
    first, second = simulate(params, workload), simulate(params, list(workload))

    def timeline(result: Any) -> Any:
        return [(r.token_times, r.queue_time, r.e2e, r.num_preemptions) for r in result.requests], result.steps

    assert timeline(first) == timeline(second)
