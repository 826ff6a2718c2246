"""The client watching itself: a late timer or a busy CPU means the client, not the server, made the numbers worse."""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress
from dataclasses import dataclass

from llmsim.benchmark.stats import Distribution

#: How often the monitor wakes.
PERIOD_S = 0.010
#: Above this p99 lateness the report says the client inflated the latencies.
SATURATED_P99_S = 0.005


@dataclass(frozen=True, slots=True)
class ClientHealth:
    # How late the monitor's 10 ms timer fired, seconds.
    loop_lateness: Distribution
    # Process CPU (user + system) over the run, and its share of one core.
    cpu_seconds: float
    wall_seconds: float

    @property
    def cpu_share(self) -> float:
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def saturated(self) -> bool:
        return self.loop_lateness.count > 0 and self.loop_lateness.p99 > SATURATED_P99_S


class LoopMonitor:
    """Wakes every 10 ms on the client's event loop and records how late each wake-up was."""

    def __init__(self, period: float = PERIOD_S) -> None:
        self._period = period
        self._lateness: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = 0.0
        self._wall0 = 0.0

    def start(self) -> None:
        self._cpu0 = time.process_time()
        self._wall0 = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="llmsim-bench-monitor")

    async def _watch(self) -> None:
        period = self._period
        lateness = self._lateness
        # time.monotonic, not loop.time(): uvloop's loop time has a millisecond resolution.
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(period)
            lateness.append(max(0.0, time.monotonic() - t0 - period))

    async def stop(self) -> ClientHealth:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
        return ClientHealth(
            Distribution.of(self._lateness), time.process_time() - self._cpu0, time.monotonic() - self._wall0
        )
