"""What a virtual-time run of one replica produced: per-request results and every step's stats.

The run itself is the fleet's event loop with one replica (``llmsim.fleet.simulate``): one
virtual-time engine for one replica and many.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from llmsim.engine.scheduler.block_hash import BlockHash
from llmsim.engine.scheduler.simulation_summary import Percentiles, SimulationSummary
from llmsim.types import FinishReason, StepStats


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
