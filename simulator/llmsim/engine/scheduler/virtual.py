"""Virtual time: the same scheduler and cost model, stepped in a plain loop with no asyncio and no clock.

It follows the driver's rules exactly - a request joins the first step starting at or after its
arrival, an idle GPU restarts at the next arrival, an abort frees blocks at once and the step in
flight releases nothing to it - so for the same arrivals it produces the same timeline, only as
fast as Python can step it. Capacity planning, the ``llmsim plan`` command and most of the tests
run here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from llmsim.engine.scheduler.params import SchedulerParams
from llmsim.engine.scheduler.scheduler import Scheduler
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
    kv_total_blocks: int
    # Most KV blocks in use during any step (StepStats shows the end of each step).
    kv_peak_used_blocks: int = 0

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


def simulate(params: SchedulerParams, workload: Iterable[WorkloadItem], *, audit: bool = False) -> SimulationResult:
    """Run ``workload`` through the scheduler in virtual time.

    Parameters
    ----------
    params:
        The engine's numbers, as the server would use them.
    workload:
        Requests in any order; ties in arrival keep workload order. ``abort_at`` earlier than
        the arrival counts as an abort at arrival.
    audit:
        Check after every step that the running sequences' blocks and the free list partition
        the cache exactly (O(blocks) per step: for tests).
    """
    items = list(workload)
    n = len(items)
    sched: Scheduler[Sequence] = Scheduler(params)
    seqs = [Sequence(RequestId(str(i)), it.arrival, it.prompt_tokens, it.output_tokens) for i, it in enumerate(items)]
    for seq in seqs:
        seq.limit_to_context(params.context_length)
    order = sorted(range(n), key=lambda i: (items[i].arrival, i))
    aborts = sorted((max(it.abort_at, it.arrival), i) for i, it in enumerate(items) if it.abort_at is not None)
    added = bytearray(n)
    steps: list[StepStats] = []
    step_duration = sched.cost.step_duration
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
    nxt = 0
    na = 0
    while True:
        if not sched.has_work():
            if nxt == n:
                break
            t = max(t, items[order[nxt]].arrival)
        while nxt < n and items[order[nxt]].arrival <= t:
            i = order[nxt]
            nxt += 1
            if not seqs[i].is_finished and sched.add_requests([seqs[i]], t):
                added[i] = 1
        while na < len(aborts) and aborts[na][0] <= t:
            abort(aborts[na][1], aborts[na][0])
            na += 1
        if not sched.has_work():
            continue
        out = sched.schedule(t)
        peak = max(peak, out.kv_used_blocks)
        duration = step_duration(out.num_tokens, out.num_context_tokens)
        deadline = t + duration
        # Clients leaving while the step runs: blocks freed at once, no token at the deadline.
        while na < len(aborts) and aborts[na][0] < deadline:
            abort(aborts[na][1], aborts[na][0])
            na += 1
        sched.update_from_output(out, deadline)
        steps.append(sched.step_stats(out, t, duration))
        if audit:
            sched.kv.audit(sched.running)
        t = deadline
    # Aborts after everything ended change nothing.
    return SimulationResult([_result(i, seq) for i, seq in enumerate(seqs)], steps, sched.kv.num_blocks, peak)


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
    )
