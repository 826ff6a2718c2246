"""Virtual time: the same scheduler and cost model, stepped in a plain loop with no asyncio and no clock.

It follows the driver's rules exactly - a request joins the first step starting at or after its
arrival, an idle GPU restarts at the next arrival, an abort frees blocks at once and the step in
flight releases nothing to it - so for the same arrivals it produces the same timeline. Runs of
steps in which nothing but lengths changes are jumped over (:mod:`.decode_run`), with the same
result to the last bit as stepping them one by one. Capacity planning, the ``llmsim plan`` command
and most of the tests run here.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from llmsim.engine.base import EngineObserver
from llmsim.engine.scheduler.block_hash import BlockHash, ExtraKeys, hash_blocks, lora_extra_keys
from llmsim.engine.scheduler.decode_run import DecodeRun
from llmsim.engine.scheduler.params import SchedulerParams
from llmsim.engine.scheduler.scheduler import Scheduler, admission_cutoff, ready_time
from llmsim.engine.scheduler.sequence import Sequence, SequenceStatus
from llmsim.engine.scheduler.simulation_summary import Percentiles, SimulationSummary
from llmsim.engine.scheduler.workload import WorkloadItem
from llmsim.types import FinishReason, RequestId, StepStats


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One workload item's simulated latencies, in seconds."""

    # Position in the workload.
    index: int
    arrival: float
    prompt_tokens: int
    output_tokens: int
    finish_reason: FinishReason
    # None when no token was released (aborted early, or a plan with no tokens).
    ttft: float | None
    e2e: float
    # Arrival to the start of the first step that scheduled it (to the end if never scheduled).
    queue_time: float
    num_preemptions: int
    # Release time of every output token.
    token_times: list[float]
    # Refused at arrival (max_waiting_requests): never queued; finish_reason is ABORT, no latencies.
    rejected: bool = False
    # Prompt tokens found in the prefix cache at admission.
    num_cached_tokens: int = 0

    @property
    def itl(self) -> list[float]:
        """Inter-token latencies: gaps between consecutive releases."""
        t = self.token_times
        return [t[i] - t[i - 1] for i in range(1, len(t))]


@dataclass(slots=True)
class SimulationResult:
    """Per-request results (workload order) and every step's stats."""

    requests: list[RequestResult]
    steps: list[StepStats]
    # Blocks requests can use: all but vLLM's null block (the denominator of KV usage).
    kv_total_blocks: int
    # Most KV blocks in use during any step (StepStats shows the end of each step).
    kv_peak_used_blocks: int = 0
    # The prefix cache at the end: each cached block hash and how many blocks hold it (what a
    # subscriber to the KV-cache events rebuilds).
    cached_blocks: dict[BlockHash, int] = field(default_factory=dict)

    def ttfts(self) -> list[float]:
        return [r.ttft for r in self.requests if r.ttft is not None]

    def itls(self) -> list[float]:
        return [gap for r in self.requests for gap in r.itl]

    def e2es(self) -> list[float]:
        return [r.e2e for r in self.requests if r.finish_reason is not FinishReason.ABORT]

    def queue_times(self) -> list[float]:
        return [r.queue_time for r in self.requests if not r.rejected]

    def summary(self) -> SimulationSummary:
        reqs = self.requests
        steps = self.steps
        start = min((r.arrival for r in reqs), default=0.0)
        end = steps[-1].start + steps[-1].duration if steps else start
        rejected = sum(r.rejected for r in reqs)
        aborted = sum(r.finish_reason is FinishReason.ABORT for r in reqs) - rejected
        return SimulationSummary(
            prefix_cache_queries=sum(s.prefix_cache_queries for s in steps),
            prefix_cache_hits=sum(s.prefix_cache_hits for s in steps),
            num_requests=len(reqs),
            num_finished=len(reqs) - aborted - rejected,
            num_aborted=aborted,
            num_rejected=rejected,
            duration=end - start,
            output_tokens=sum(r.output_tokens for r in reqs),
            ttft=Percentiles.of(self.ttfts()),
            itl=Percentiles.of(self.itls()),
            e2e=Percentiles.of(self.e2es()),
            queue_time=Percentiles.of(self.queue_times()),
            num_preemptions=sum(s.num_preemptions for s in steps),
            num_steps=len(steps),
            mean_batch_size=math.fsum(s.batch_size for s in steps) / len(steps) if steps else 0.0,
            kv_total_blocks=self.kv_total_blocks,
            kv_peak_used_blocks=self.kv_peak_used_blocks,
        )


def _sequences(params: SchedulerParams, items: list[WorkloadItem], sched: Scheduler[Sequence]) -> list[Sequence]:
    """One sequence per item, with what the driver gives its streams: LoRA keys, prompt block hashes."""
    loras: dict[str, tuple[int, ExtraKeys]] = {}
    if params.lora is not None:
        for i, (name, path) in enumerate(params.lora.adapters, start=1):
            loras[name] = (i, lora_extra_keys(name, path))
            sched.load_lora(name)
    hashed: dict[tuple[tuple[int, ...], str | None], list[bytes]] = {}
    seqs = []
    for i, it in enumerate(items):
        lora_id, keys = 0, None
        if it.lora_name is not None:
            if it.lora_name not in loras:
                raise ValueError(f"request {i}: unknown LoRA adapter '{it.lora_name}'")
            lora_id, keys = loras[it.lora_name]
        seq = Sequence(
            RequestId(str(i)),
            it.arrival,
            it.prompt_tokens,
            it.output_tokens,
            prompt_token_ids=it.prompt_token_ids,
            output_token_ids=it.output_token_ids,
            lora_name=it.lora_name,
            lora_id=lora_id,
            extra_keys=keys,
        )
        seq.limit_to_context(params.context_length)
        ids = seq.prompt_token_ids
        if params.enable_prefix_caching and ids is not None:
            # As the driver does at submission; equal prompts (a shared system prompt repeated
            # verbatim, say) are hashed once here, which changes no result.
            key = (ids, it.lora_name)
            if key not in hashed:
                hashed[key] = hash_blocks(ids, params.block_size, keys)
            seq.block_hashes = list(hashed[key])
        seqs.append(seq)
    return seqs


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a virtual-time loop.

    The loop allocates millions of small objects that hold no cycles (token times, step records,
    tuples), so reference counting frees them all; the cyclic collector would only walk the
    growing heap again and again (measured: 25-35 % of a fleet run). Anything cyclic made
    meanwhile is collected when the collector resumes.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def simulate(
    params: SchedulerParams,
    workload: Iterable[WorkloadItem],
    *,
    audit: bool = False,
    observer: EngineObserver | None = None,
    fast_forward: bool = True,
) -> SimulationResult:
    """Run ``workload`` through the scheduler in virtual time.

    Parameters
    ----------
    params:
        The engine's numbers, as the server would use them.
    workload:
        Requests in any order; ties in arrival keep workload order. ``abort_at`` earlier than
        the arrival counts as an abort at arrival. Items with token ids share cached prefixes.
    audit:
        Check after every step that reference counts, the free queue and the prefix cache agree
        exactly with the running sequences (O(blocks) per step: for tests).
    observer:
        Receives every step's stats as the step ends (KV-cache events included), as the live
        engine's observer does.
    fast_forward:
        Jump over runs of decode steps (:class:`~.decode_run.DecodeRun`); False steps every one
        (the reference the fast-forward is tested and benchmarked against: same results).
    """
    with collector_paused():
        return _simulate(params, list(workload), audit, observer, fast_forward)


def _simulate(
    params: SchedulerParams,
    items: list[WorkloadItem],
    audit: bool,
    observer: EngineObserver | None,
    fast_forward: bool,
) -> SimulationResult:
    n = len(items)
    sched: Scheduler[Sequence] = Scheduler(params)
    seqs = _sequences(params, items, sched)
    order = sorted(range(n), key=lambda i: (items[i].arrival, i))
    # When each request reaches the scheduler (its arrival plus the API server's work).
    ready = [ready_time(params, it.arrival) for it in items]
    aborts = sorted((max(it.abort_at, it.arrival), i) for i, it in enumerate(items) if it.abort_at is not None)
    added = bytearray(n)
    steps: list[StepStats] = []
    step_duration = sched.step_duration
    peak = 0

    def abort(i: int, when: float) -> None:
        seq = seqs[i]
        if seq.is_finished:
            return
        if added[i]:
            sched.abort(seq, when)
        else:  # left while still in the inbox: never reaches the scheduler
            seq.status = SequenceStatus.ABORTED
            seq.finished_time = when

    t = -math.inf
    previous = -math.inf
    nxt = 0
    na = 0
    while True:
        if not sched.has_work():
            if nxt == n:
                break
            t = max(t, ready[order[nxt]])
        # Clients gone by the step start never reach the scheduler (as a client that hangs up
        # before its admission is decided, in the live engine): aborts first, then admissions.
        while na < len(aborts) and aborts[na][0] <= t:
            abort(aborts[na][1], aborts[na][0])
            na += 1
        cutoff = admission_cutoff(params, t, previous, bool(sched.running))
        while nxt < n and ready[order[nxt]] <= cutoff:
            i = order[nxt]
            nxt += 1
            if not seqs[i].is_finished and sched.add_requests([seqs[i]], t):
                added[i] = 1
        if not sched.has_work():
            continue
        if fast_forward:
            run = DecodeRun.plan(
                sched,
                t,
                previous,
                next_arrival=ready[order[nxt]] if nxt < n else math.inf,
                next_abort=aborts[na][0] if na < len(aborts) else math.inf,
            )
            if run is not None:
                peak = max(peak, _run_to_end(run, steps, observer, audit))
                previous = run.last_start
                t = run.end
                continue
        out = sched.schedule(t)
        peak = max(peak, out.kv_used_blocks)
        duration = step_duration(out)
        deadline = t + duration
        # Clients leaving while the step runs: blocks freed at once, no token at the deadline.
        while na < len(aborts) and aborts[na][0] < deadline:
            abort(aborts[na][1], aborts[na][0])
            na += 1
        sched.update_from_output(out, deadline)
        stats = sched.step_stats(out, t, duration)
        steps.append(stats)
        if observer is not None:
            observer.on_step(stats)
        if audit:
            sched.kv.audit(sched.running)
        previous = t
        t = deadline
    # Aborts after everything ended change nothing.
    return SimulationResult(
        [_result(i, seq) for i, seq in enumerate(seqs)],
        steps,
        sched.kv.num_usable_blocks,
        peak,
        sched.kv.cached_hashes(),
    )


def _run_to_end(run: DecodeRun[Sequence], steps: list[StepStats], observer: EngineObserver | None, audit: bool) -> int:
    """Apply a whole run, recording each step as the stepping loop does; the most blocks any step used."""
    sched = run.sched

    def ended(j: int) -> None:
        stats = run.step_stats(j)
        steps.append(stats)
        if observer is not None:
            observer.on_step(stats)
        if audit:
            sched.kv.audit(sched.running)

    run.run_to_end(on_end=ended)
    return run.peak_used


def _result(index: int, seq: Sequence) -> RequestResult:
    stats = seq.to_stats()
    return RequestResult(
        index=index,
        arrival=stats.arrival,
        prompt_tokens=stats.prompt_tokens,
        output_tokens=stats.output_tokens,
        finish_reason=stats.finish_reason,
        ttft=stats.ttft,
        e2e=stats.e2e,
        queue_time=stats.queue_time,
        num_preemptions=stats.num_preemptions,
        token_times=stats.token_times,
        rejected=seq.status is SequenceStatus.REJECTED,
        num_cached_tokens=stats.num_cached_tokens,
    )
