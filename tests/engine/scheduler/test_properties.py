"""Random small configs, arrivals and client aborts: capacity holds, no block leaks, plans complete, runs repeat."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

from llmsim.engine.scheduler import SchedulerParams
from llmsim.engine.scheduler.params import LoraParams
from llmsim.fleet import FleetRequest, simulate
from llmsim.types import AllBlocksCleared, BlockRemoved, BlockStored, FinishReason, StepStats

from .builders import tiny_params


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[SchedulerParams, list[FleetRequest]]:
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
        items.append(FleetRequest.of(arrival, prompt, output, abort_at))
    return params, items


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_workloads_respect_capacity_free_every_block_and_finish_plans(
    scenario: tuple[SchedulerParams, list[FleetRequest]],
) -> None:
    params, workload = scenario
    result = simulate(params, workload, audit=True)
    total = result.replicas[0].kv_total_blocks
    assert result.replicas[0].kv_peak_used_blocks <= total
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
def test_the_same_input_gives_the_same_timeline(scenario: tuple[SchedulerParams, list[FleetRequest]]) -> None:
    params, workload = scenario
    first, second = simulate(params, workload), simulate(params, list(workload))

    def timeline(result: Any) -> Any:
        return [(r.token_times, r.queue_time, r.e2e, r.num_preemptions) for r in result.requests], result.steps

    assert timeline(first) == timeline(second)


# Two "documents" that prompts start from, so random prompts share prefixes of every length.
_FAMILIES = [tuple(range(1000 * f, 1000 * f + 64)) for f in range(1, 3)]


@st.composite
def cached_scenarios(draw: st.DrawFn) -> tuple[SchedulerParams, list[FleetRequest]]:
    """Like ``scenarios``, with token ids drawn so that prompts share prefixes, and LoRA adapters."""
    block_size = draw(st.sampled_from([1, 2, 4]))
    num_blocks = draw(st.integers(3, 24))
    capacity = num_blocks * block_size
    context = draw(st.integers(2, capacity))
    max_loras = draw(st.integers(1, 2))
    params = tiny_params(
        num_blocks,
        block_size=block_size,
        context_length=context,
        max_batch_tokens=draw(st.integers(1, 48)),
        max_num_sequences=draw(st.integers(1, 6)),
        watermark=draw(st.sampled_from([0.0, 0.1])),
        enable_kv_cache_events=True,
        lora=LoraParams(max_loras=max_loras, max_cpu_loras=2, load_s=0.005, adapters=(("x", "/x"), ("y", "/y"))),
    )
    items = []
    for i in range(draw(st.integers(0, 14))):
        prompt = draw(st.integers(1, context))
        # Mostly long shared prefixes (whole prompts repeated, halves), so hits are common.
        shared = min(64, draw(st.sampled_from([prompt, prompt, prompt // 2, 0])))
        family = _FAMILIES[draw(st.integers(0, 1))]
        own = tuple(range(100_000 * (i + 1), 100_000 * (i + 1) + prompt - shared))
        output = draw(st.integers(0, context - prompt))
        outputs = tuple(range(50_000, 50_000 + output)) if draw(st.booleans()) else None
        arrival = draw(st.integers(0, 500)) / 1000
        abort_at = draw(st.none() | st.integers(0, 800).map(lambda ms: ms / 1000))
        lora = draw(st.sampled_from([None, None, "x", "y"]))
        items.append(FleetRequest.of(arrival, prompt, output, abort_at, family[:shared] + own, outputs, adapter=lora))
    return params, items


class _Events:
    """Rebuilds the cached-block multiset from the KV-cache events alone, as a subscriber would."""

    def __init__(self) -> None:
        self.blocks: Counter[bytes] = Counter()

    def on_step(self, stats: StepStats) -> None:
        for event in stats.kv_events:
            if isinstance(event, BlockStored):
                self.blocks.update(event.block_hashes)
            elif isinstance(event, BlockRemoved):
                self.blocks.subtract(event.block_hashes)
            else:
                assert isinstance(event, AllBlocksCleared)
                self.blocks.clear()

    def on_first_token(self, ttft: float) -> None:
        pass

    def on_request_finished(self, stats: object) -> None:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cached_scenarios())
def test_with_prefix_caching_blocks_are_never_leaked_or_double_freed_and_events_match_the_cache(
    scenario: tuple[SchedulerParams, list[FleetRequest]],
) -> None:
    params, workload = scenario
    events = _Events()
    # audit=True: after every step, reference counts equal the holders, the free queue holds
    # exactly the unreferenced blocks, free + held = usable, and the cache map equals the hashes.
    result = simulate(params, workload, audit=True, observer=events)
    summary = result.summary()
    # Steer generation towards runs that hit, evict and preempt: where the bookkeeping is hard.
    target(float(summary.prefix_hit_tokens), label="prefix cache hits")
    target(float(summary.num_preemptions), label="preemptions")
    for s in result.steps:
        assert s.kv_used_blocks <= result.replicas[0].kv_total_blocks
        assert s.prefix_cache_hits <= s.prefix_cache_queries
    if result.steps:
        assert result.steps[-1].kv_used_blocks == 0
    assert +events.blocks == result.cached_blocks
    for item, r in zip(workload, result.requests, strict=True):
        if r.finish_reason is not FinishReason.ABORT:
            assert r.output_tokens == item.output_tokens == len(r.token_times)
        # A hit is whole blocks, and always leaves at least one prompt token to compute.
        assert r.prefix_hit_tokens % params.block_size == 0
        assert r.prefix_hit_tokens <= max(item.prompt_tokens - 1, 0)
