"""Latency distributions and load figures of one run, computed the same way from measured and predicted records.

Percentiles are the virtual-time core's (linear interpolation, numpy's default), so a predicted
and a measured p99 are the same statistic of their samples.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from llmsim.benchmark.records import Outcome, RequestRecord
from llmsim.engine.scheduler import Percentiles


@dataclass(frozen=True, slots=True)
class Distribution:
    """Count, mean, p50/p90/p99 and max of one latency, in seconds (NaN without values)."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Distribution:
        ordered = sorted(values)
        p = Percentiles.of(ordered)
        return cls(p.count, p.mean, p.p50, p.p90, p.p99, ordered[-1] if ordered else math.nan)


@dataclass(frozen=True, slots=True)
class LoadStats:
    """What a run achieved, over its measured requests (warm-up and background ones left out)."""

    requests: int
    completed: int
    aborted: int
    # Failed requests by kind ("http 503 ...", "connect", "timeout", "stream error ...", ...).
    errors: dict[str, int]
    prompt_tokens: int
    output_tokens: int
    # Completed requests whose usage.prompt_tokens differs from the workload's length.
    prompt_mismatches: int
    # From the first measured request's scheduled send to the end of the last measured one.
    window: float
    request_rate: float
    output_token_rate: float
    # Latencies from the *scheduled* send: what a user arriving on schedule would see.
    ttft: Distribution
    e2e: Distribution
    # The same from the actual send (what a client that waits for a free slot reports).
    ttft_sent: Distribution
    e2e_sent: Distribution
    itl: Distribution
    # Per request: (last token - first token) / (output tokens - 1).
    tpot: Distribution
    # Actual send - scheduled send: how far behind its schedule the client fell.
    send_delay: Distribution


def measured(records: Iterable[RequestRecord], warmup: float) -> list[RequestRecord]:
    """The records that count: not background, scheduled at or after the warm-up."""
    return [r for r in records if not r.background and r.scheduled >= warmup]


def summarize(records: Sequence[RequestRecord], warmup: float = 0.0) -> LoadStats:
    """Every figure of a run from its records (see :class:`LoadStats`)."""
    rs = measured(records, warmup)
    ok = [r for r in rs if r.outcome is Outcome.OK]
    errors = Counter(r.error or "unknown" for r in rs if r.outcome is Outcome.ERROR)
    start = min((r.scheduled for r in rs), default=0.0)
    end = max((r.end for r in rs if not math.isnan(r.end)), default=start)
    window = end - start
    output_tokens = sum(r.output_tokens for r in rs)
    ttft = [(r.token_times[0] - r.scheduled, r.token_times[0] - r.sent) for r in ok if r.token_times]
    itl = [b - a for r in ok for a, b in zip(r.token_times, r.token_times[1:], strict=False)]
    tpot = [
        (r.token_times[-1] - r.token_times[0]) / (r.output_tokens - 1)
        for r in ok
        if r.output_tokens > 1 and len(r.token_times) > 1
    ]
    return LoadStats(
        requests=len(rs),
        completed=len(ok),
        aborted=sum(r.outcome is Outcome.ABORTED for r in rs),
        errors=dict(sorted(errors.items())),
        prompt_tokens=sum(r.expected_prompt_tokens for r in ok),
        output_tokens=output_tokens,
        prompt_mismatches=sum(r.prompt_tokens is not None and r.prompt_tokens != r.expected_prompt_tokens for r in ok),
        window=window,
        request_rate=len(ok) / window if window > 0 else math.nan,
        output_token_rate=output_tokens / window if window > 0 else math.nan,
        ttft=Distribution.of(t for t, _ in ttft),
        e2e=Distribution.of(r.end - r.scheduled for r in ok),
        ttft_sent=Distribution.of(t for _, t in ttft),
        e2e_sent=Distribution.of(r.end - r.sent for r in ok),
        itl=Distribution.of(itl),
        tpot=Distribution.of(tpot),
        send_delay=Distribution.of(r.sent - r.scheduled for r in rs if not math.isnan(r.sent)),
    )
