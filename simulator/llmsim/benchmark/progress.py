"""A progress bar on stderr (rich, an optional extra) for runs longer than a few seconds."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

from llmsim.benchmark.records import RequestRecord
from llmsim.benchmark.workload import Workload

#: Shorter runs get no bar.
MIN_SECONDS = 3.0


def expected_requests(workload: Workload, predicted: Sequence[RequestRecord] | None) -> int | None:
    """How many requests the run will send: known for an open loop or from a prediction."""
    if predicted is not None:
        return len(predicted)
    if all(chain.turn(1) is None for chain in workload.chains[:1000]):
        return sum(chain.start < workload.send_until for chain in workload.chains)
    return None


def expected_seconds(workload: Workload, predicted: Sequence[RequestRecord] | None) -> float:
    if predicted:
        return max(r.end for r in predicted)
    if math.isfinite(workload.send_until):
        return workload.send_until
    return max((c.start for c in workload.chains), default=0.0)


class Progress:
    """Counts finished requests; draws a bar only on a terminal, with rich installed, for runs over 3 s."""

    def __init__(self, label: str, *, enabled: bool = True) -> None:
        self._label = label
        self._enabled = enabled
        self._bar: Any = None
        self._task: Any = None
        self.done = 0

    def start(self, workload: Workload, predicted: Sequence[RequestRecord] | None) -> None:
        self.done = 0
        if not self._enabled or not sys.stderr.isatty() or expected_seconds(workload, predicted) < MIN_SECONDS:
            return
        try:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress
        except ImportError:  # the optional "bench" extra is not installed
            return
        self._bar = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=True,
        )
        self._bar.start()
        self._task = self._bar.add_task(self._label, total=expected_requests(workload, predicted))

    def advance(self, record: RequestRecord) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.advance(self._task)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
