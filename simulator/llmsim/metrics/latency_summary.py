"""What /metrics/summary reports for one model: counts and quantiles since the last reset."""

from __future__ import annotations

from typing import Any

from llmsim.metrics.sketch import QuantileSketch
from llmsim.types import FinishReason

#: Quantiles reported for every distribution, as (JSON key, q).
QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def _stats(sketch: QuantileSketch) -> dict[str, float | int | None]:
    out: dict[str, float | int | None] = {"count": sketch.count}
    for key, q in QUANTILES:
        out[key] = sketch.quantile(q)
    out["max"] = sketch.max if sketch.count else None
    return out


_SKETCHES = ("ttft", "itl", "e2e", "queue_time", "step_duration", "batch_size", "lag", "step_lag")


class LatencySummary:
    """Resettable counts and sketches (unlike Prometheus counters, which never go back)."""

    __slots__ = (
        "batch_size",
        "e2e",
        "generation_tokens",
        "itl",
        "lag",
        "preemptions",
        "prompt_tokens",
        "queue_time",
        "requests",
        "step_duration",
        "step_lag",
        "ttft",
    )

    def __init__(self) -> None:
        self.requests = dict.fromkeys(FinishReason, 0)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        # Simulated values, seconds (batch size in sequences).
        self.ttft = QuantileSketch()
        self.itl = QuantileSketch()
        self.e2e = QuantileSketch()
        self.queue_time = QuantileSketch()
        self.step_duration = QuantileSketch()
        self.batch_size = QuantileSketch()
        # The simulator's own error: release - simulated deadline, seconds.
        self.lag = QuantileSketch()
        self.step_lag = QuantileSketch()

    @classmethod
    def merged(cls, summaries: list[LatencySummary]) -> LatencySummary:
        """One summary of several (a model's data-parallel ranks): counts added, sketches merged."""
        out = cls()
        for s in summaries:
            for reason, n in s.requests.items():
                out.requests[reason] += n
            out.prompt_tokens += s.prompt_tokens
            out.generation_tokens += s.generation_tokens
            out.preemptions += s.preemptions
            for name in _SKETCHES:
                getattr(out, name).merge(getattr(s, name))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": {str(reason): n for reason, n in self.requests.items()}
            | {"total": sum(self.requests.values())},
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "preemptions": self.preemptions,
            "ttft": _stats(self.ttft),
            "itl": _stats(self.itl),
            "e2e": _stats(self.e2e),
            "queue_time": _stats(self.queue_time),
            "lag": _stats(self.lag),
            "step_lag": _stats(self.step_lag),
            "step_duration": _stats(self.step_duration),
            "batch_size": _stats(self.batch_size),
        }
