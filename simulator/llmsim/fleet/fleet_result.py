"""What a fleet run produced: one outcome per request, one report per replica."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from llmsim.engine.scheduler.block_hash import BlockHash
from llmsim.fleet.fleet_summary import FleetSummary, Latencies, OrderedCounts, ReplicaSummary
from llmsim.types import FinishReason, StepStats


@dataclass(slots=True, init=False)
class RequestOutcome:
    """One request's fate, in seconds on the simulated timeline (a record: not to be changed).

    Not frozen, and ``__init__`` written out (same parameters as the dataclass's): one is made
    per request inside the planner's loop; a frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field) took ~3 us of it against ~0.5 us, and compiled with mypyc
    a generated one runs interpreted (~4,900 instructions against a few hundred).
    """

    # Position in the workload.
    index: int
    # Replica that served it; -1 if it was never sent (its client left while it waited for a slot).
    replica: int
    # When the client sent it (after its predecessor, think time and a free concurrency slot).
    arrival: float
    prompt_tokens: int
    output_tokens: int
    finish_reason: FinishReason
    # None when no token was released.
    ttft: float | None
    e2e: float
    queue_time: float
    num_preemptions: int
    # (last - first token) / (tokens - 1); None below 2 tokens.
    tpot: float | None
    # Prompt tokens found in the prefix cache at its first admission, and looked up then (its
    # prompt, if it was admitted on a replica that caches; vLLM's hits and queries).
    prefix_hit_tokens: int = 0
    prefix_query_tokens: int = 0
    # Refused at admission (the replica's waiting queue was full).
    rejected: bool = False
    adapter: str | None = None
    # Release time of every token; empty unless the run kept them (keep_token_times).
    token_times: tuple[float, ...] = ()

    def __init__(
        self,
        index: int,
        replica: int,
        arrival: float,
        prompt_tokens: int,
        output_tokens: int,
        finish_reason: FinishReason,
        ttft: float | None,
        e2e: float,
        queue_time: float,
        num_preemptions: int,
        tpot: float | None,
        prefix_hit_tokens: int = 0,
        prefix_query_tokens: int = 0,
        rejected: bool = False,
        adapter: str | None = None,
        token_times: tuple[float, ...] = (),
    ) -> None:
        self.index = index
        self.replica = replica
        self.arrival = arrival
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.finish_reason = finish_reason
        self.ttft = ttft
        self.e2e = e2e
        self.queue_time = queue_time
        self.num_preemptions = num_preemptions
        self.tpot = tpot
        self.prefix_hit_tokens = prefix_hit_tokens
        self.prefix_query_tokens = prefix_query_tokens
        self.rejected = rejected
        self.adapter = adapter
        self.token_times = token_times

    @property
    def aborted(self) -> bool:
        return self.finish_reason is FinishReason.ABORT and not self.rejected

    @property
    def itl(self) -> list[float]:
        """Inter-token latencies: gaps between consecutive releases (needs the token times kept)."""
        t = self.token_times
        return [t[i] - t[i - 1] for i in range(1, len(t))]


@dataclass(slots=True)
class ReplicaReport:
    """One replica's counters at the end of the run."""

    name: str
    group: str
    model: str
    num_routed: int
    num_steps: int
    busy_time: float
    batch_total: int
    num_preemptions: int
    kv_total_blocks: int
    kv_peak_used_blocks: int
    # The replica's ITL distribution: the distinct inter-token gaps, ascending, and how many
    # tokens left after each (``merged_entries`` of what the replica counted).
    itl_gap_values: list[float] = field(default_factory=list)
    itl_gap_counts: list[int] = field(default_factory=list)
    # Its part in a disaggregated fleet (kv_producer, kv_consumer), None in an aggregated one:
    # the load imbalance compares replicas of one part only.
    role: str | None = None

    @property
    def itl_gaps(self) -> dict[float, int]:
        """Inter-token gap -> how many tokens left after it."""
        return dict(zip(self.itl_gap_values, self.itl_gap_counts, strict=True))


@dataclass(slots=True)
class FleetResult:
    """Outcomes in workload order and replica reports in fleet order."""

    requests: list[RequestOutcome]
    replicas: list[ReplicaReport]
    # Simulated time of the last step's end (or of the last event, if no step ran).
    end: float
    # Every step's stats, in the order steps ended (recorded by ``simulate``; else empty).
    steps: list[StepStats] = field(default_factory=list)
    # The first replica's prefix cache at the end: each cached block hash and how many blocks
    # hold it (what a subscriber to its KV-cache events rebuilds; recorded by ``simulate``).
    cached_blocks: dict[BlockHash, int] = field(default_factory=dict)

    def summary(self) -> FleetSummary:
        sent = [r for r in self.requests if r.replica >= 0]
        start = min((r.arrival for r in sent), default=0.0)
        duration = max(0.0, self.end - start)
        per_replica: list[list[RequestOutcome]] = [[] for _ in self.replicas]
        for r in sent:
            per_replica[r.replica].append(r)
        # Each replica's gaps put in order once, for its percentiles and the fleet's.
        fleet_gaps: list[OrderedCounts] = []
        # One pass over each replica's outcomes; the fleet's figures are their union (the
        # percentiles sort their values and fsum them, so the order of the union is immaterial),
        # plus the requests never sent, which count as aborted and nothing else.
        fleet = _Tally([])
        fleet.aborted = len(self.requests) - len(sent)
        replicas = []
        for report, outcomes in zip(self.replicas, per_replica, strict=True):
            gaps = OrderedCounts.of_sorted(report.itl_gap_values, report.itl_gap_counts)
            fleet_gaps.append(gaps)
            tally = _Tally(outcomes)
            fleet.add(tally)
            replicas.append(_replica_summary(report, tally, gaps, duration))
        # Every request goes once to each part of a disaggregated fleet: the worst part's imbalance.
        imbalance = math.nan
        for role in dict.fromkeys(rep.role for rep in self.replicas):
            routed = [rep.num_routed for rep in self.replicas if rep.role == role]
            mean_routed = sum(routed) / len(routed) if routed else 0.0
            if mean_routed > 0:
                part = max(routed) / mean_routed
                imbalance = part if math.isnan(imbalance) else max(imbalance, part)
        return FleetSummary(
            num_replicas=len(self.replicas),
            num_requests=len(self.requests),
            num_finished=fleet.finished,
            num_aborted=fleet.aborted,
            num_rejected=fleet.rejected,
            duration=duration,
            output_tokens=fleet.output_tokens,
            latencies=fleet.latencies(fleet_gaps),
            num_preemptions=sum(rep.num_preemptions for rep in self.replicas),
            load_imbalance=imbalance,
            prefix_hit_rate=fleet.hit_rate(),
            replicas=tuple(replicas),
            prefix_hit_tokens=fleet.hit_tokens,
            prefix_query_tokens=fleet.query_tokens,
        )


class _Tally:
    """What the summaries take from a set of sent requests, gathered in one pass over them."""

    __slots__ = (
        "aborted",
        "count",
        "e2e",
        "finished",
        "hit_tokens",
        "output_tokens",
        "query_tokens",
        "queue_time",
        "rejected",
        "tpot",
        "ttft",
    )

    def __init__(self, outcomes: list[RequestOutcome]) -> None:
        ttft: list[float] = []
        tpot: list[float] = []
        e2e: list[float] = []
        queue_time: list[float] = []
        aborted = rejected = output_tokens = hit_tokens = query_tokens = 0
        abort = FinishReason.ABORT
        # Once per request.
        for r in outcomes:
            if r.ttft is not None:
                ttft.append(r.ttft)
            if r.tpot is not None:
                tpot.append(r.tpot)
            if r.finish_reason is not abort:
                e2e.append(r.e2e)
            elif not r.rejected:
                aborted += 1
            if r.rejected:
                rejected += 1
            else:
                queue_time.append(r.queue_time)
            output_tokens += r.output_tokens
            hit_tokens += r.prefix_hit_tokens
            query_tokens += r.prefix_query_tokens
        self.count = len(outcomes)
        self.ttft = ttft
        self.tpot = tpot
        self.e2e = e2e
        self.queue_time = queue_time
        self.finished = len(e2e)
        self.aborted = aborted
        self.rejected = rejected
        self.output_tokens = output_tokens
        self.hit_tokens = hit_tokens
        self.query_tokens = query_tokens

    def add(self, other: _Tally) -> None:
        self.count += other.count
        self.ttft += other.ttft
        self.tpot += other.tpot
        self.e2e += other.e2e
        self.queue_time += other.queue_time
        self.finished += other.finished
        self.aborted += other.aborted
        self.rejected += other.rejected
        self.output_tokens += other.output_tokens
        self.hit_tokens += other.hit_tokens
        self.query_tokens += other.query_tokens

    def latencies(self, gaps: Sequence[OrderedCounts]) -> Latencies:
        return Latencies.of(ttft=self.ttft, itl_gaps=gaps, tpot=self.tpot, e2e=self.e2e, queue_time=self.queue_time)

    def hit_rate(self) -> float:
        """Cached over looked-up prompt tokens, as vLLM's hits / queries counters (NaN without lookups)."""
        return self.hit_tokens / self.query_tokens if self.query_tokens else math.nan


def _replica_summary(report: ReplicaReport, tally: _Tally, gaps: OrderedCounts, duration: float) -> ReplicaSummary:
    return ReplicaSummary(
        name=report.name,
        model=report.model,
        # A prefill replica's requests are the legs it prefilled; their client figures are the decode side's.
        num_requests=report.num_routed if report.role == "kv_producer" else tally.count,
        num_finished=tally.finished,
        num_aborted=tally.aborted,
        num_rejected=tally.rejected,
        output_tokens=tally.output_tokens,
        latencies=tally.latencies((gaps,)),
        num_steps=report.num_steps,
        busy_fraction=report.busy_time / duration if duration > 0 else 0.0,
        mean_batch_size=report.batch_total / report.num_steps if report.num_steps else 0.0,
        num_preemptions=report.num_preemptions,
        kv_total_blocks=report.kv_total_blocks,
        kv_peak_used_blocks=report.kv_peak_used_blocks,
        prefix_hit_rate=tally.hit_rate(),
    )
