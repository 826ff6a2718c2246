"""Fault timelines: which fault state a replica is in, phase by phase, from a start the test triggers.

A :class:`TimelineRunner` holds one model's ``faults.timeline`` and drives its
:class:`~llmsim.api.faults.FaultInjector`: from each phase's ``at`` on, the replicas the phase
names (ordinals, or a seeded draw of a count) get its ``set`` and every other replica the base
faults. Every replica of a fleet holds the same timeline and computes the same draw, so the
fleet agrees on who is bad without talking.

Time is the server's clock (:class:`~llmsim.engine.clock.Clock`). Transitions are applied by
:meth:`TimelineRunner.poll`, which every request, every read of the state and the background task
call: a request after a phase's ``at`` always sees that phase, whenever the task wakes, and a
test drives a timeline with a manual clock and no task at all.

Each request is recorded (its time from the start and its fault, if any) so that a verdict can
read, after the run, when a gateway stopped sending to a replica and when it sent again.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import hashlib
import logging
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmsim.api.faults import FaultInjector
from llmsim.config.schema import BASE_PHASE, FAULT_KINDS, FaultPhase, FaultState, FaultTimeline

logger = logging.getLogger("llmsim.faults")

#: Requests kept for ``GET /admin/timeline/requests``: 12 bytes each, so at most 2.4 MB per model;
#: past it the oldest half is dropped (a verdict reads a bounded test run, minutes long).
MAX_RECORDED_REQUESTS = 200_000
#: Code of a request without a fault in the record; a fault is its index in FAULT_KINDS.
NO_FAULT = -1


@dataclass(frozen=True, slots=True)
class Replica:
    """Who this process is in its fleet: its ordinal (0-based) and the fleet's size, when known."""

    ordinal: int | None = None
    count: int | None = None


#: A replica that knows neither its ordinal nor its fleet's size (the start call may say).
UNKNOWN_REPLICA = Replica()


def drawn_replicas(seed: int, phase_index: int, count: int, fleet: int) -> frozenset[int]:
    """The ``count`` ordinals of ``range(fleet)`` a phase picks: the lowest hashes of (seed, phase, ordinal).

    Every replica computes the same set from the same three numbers; a count at least the fleet's
    size picks every replica.
    """

    def rank(ordinal: int) -> bytes:
        return hashlib.blake2b(f"{seed}\x00{phase_index}\x00{ordinal}".encode(), digest_size=8).digest()

    return frozenset(sorted(range(fleet), key=rank)[:count])


def affected(phase: FaultPhase, index: int, seed: int, replica: Replica) -> bool:
    """Whether ``replica`` gets this phase's ``set``. Raises ValueError when that needs an unknown ordinal or size."""
    if phase.clear:
        return False
    if phase.replicas is None and phase.count is None:
        return True
    if replica.ordinal is None:
        raise ValueError(
            f"phase {phase.name!r} names replicas, and this replica's ordinal is not known "
            "(--replica-ordinal / LLMSIM_REPLICA_ORDINAL, or the start call's ordinal)"
        )
    if phase.replicas is not None:
        return replica.ordinal in phase.replicas
    if replica.count is None:
        raise ValueError(
            f"phase {phase.name!r} draws {phase.count} replicas, and the fleet's size is not known "
            "(--replica-count / LLMSIM_REPLICA_COUNT, or the start call's replicas)"
        )
    assert phase.count is not None
    return replica.ordinal in drawn_replicas(seed, index, phase.count, replica.count)


def _phase_state(phase: FaultPhase, base: FaultState) -> FaultState:
    """A phase's ``set``, its seed the base's unless it gives one."""
    assert phase.set is not None
    if "seed" in phase.set.model_fields_set:
        return phase.set
    return phase.set.model_copy(update={"seed": base.seed})


class PhaseCounts:
    """What one replica got in one phase: requests and faults by kind (JSON for the verdict)."""

    __slots__ = ("faults", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.faults: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "faults": dict(self.faults)}


class TimelineRunner:
    """One model's fault timeline on this replica.

    Parameters
    ----------
    model: the served model's name (log lines).
    timeline: the ``faults.timeline`` entry.
    base: the model's base fault state (before the first phase, after a ``clear``, and for the
        replicas a phase does not name).
    injector: the model's fault injector, which each transition reconfigures.
    replica: this process's ordinal and fleet size (the start call may give them instead).
    now: the server's clock.
    on_phases: called with every phase's name (``base`` first; none without a timeline) when the
        timeline is set (metrics: each phase's series from 0).
    on_phase: called with the phase's name at each transition (metrics).
    """

    def __init__(
        self,
        model: str,
        timeline: FaultTimeline | None,
        base: FaultState,
        injector: FaultInjector,
        replica: Replica,
        now: Callable[[], float],
        on_phases: Callable[[list[str]], None] = lambda names: None,
        on_phase: Callable[[str], None] = lambda name: None,
    ) -> None:
        self.model = model
        self.base = base
        self._injector = injector
        self.replica = replica
        self._now = now
        self._on_phases = on_phases
        self._on_phase = on_phase
        self._changed = asyncio.Event()
        self.timeline: FaultTimeline | None = None
        self.started_at: float | None = None
        self.set_timeline(timeline)

    # -- the schedule --------------------------------------------------------------------------

    def set_timeline(self, timeline: FaultTimeline | None) -> None:
        """A new timeline (startup, ``PUT /admin/timeline``): back to base; started at once for ``start: process``.

        Raises ValueError when a phase needs an ordinal or a fleet size this replica does not know
        and the timeline starts by itself (with ``start: admin`` the start call may still give them).
        """
        self.timeline = timeline
        self.phase_index = -1
        self._ats: list[float] = [p.at for p in timeline.phases] if timeline is not None else []
        self._affected: list[bool] = []
        self.started_at = None
        self.counts: dict[str, PhaseCounts] = {}
        self._times = array("d")
        self._faults = array("b")
        self._injector.configure(self.base)
        self._on_phases([BASE_PHASE, *(p.name for p in timeline.phases)] if timeline is not None else [])
        if timeline is not None and timeline.start == "process":
            self.start()
        self._changed.set()

    def start(self, replica: Replica | None = None) -> None:
        """Time 0 is now (again); ``replica`` overrides what the command line said. Raises ValueError (see above)."""
        if self.timeline is None:
            return
        if replica is not None:
            self.replica = Replica(
                replica.ordinal if replica.ordinal is not None else self.replica.ordinal,
                replica.count if replica.count is not None else self.replica.count,
            )
        seed = self.timeline.seed
        self._affected = [affected(p, i, seed, self.replica) for i, p in enumerate(self.timeline.phases)]
        self.started_at = self._now()
        self.phase_index = -1
        self.counts = {BASE_PHASE: PhaseCounts()} | {p.name: PhaseCounts() for p in self.timeline.phases}
        del self._times[:]
        del self._faults[:]
        self._injector.configure(self.base)
        logger.info(
            "fault timeline started: model=%s replica=%s of %s, phases=%d",
            self.model,
            self.replica.ordinal,
            self.replica.count,
            len(self._ats),
        )
        self._enter(BASE_PHASE)
        self.poll()
        self._changed.set()

    @property
    def phase(self) -> str:
        """The current phase's name (``base`` before the first)."""
        if self.timeline is None or self.phase_index < 0:
            return BASE_PHASE
        return self.timeline.phases[self.phase_index].name

    def elapsed(self) -> float | None:
        """Seconds since the start, or None before it."""
        return None if self.started_at is None else self._now() - self.started_at

    def next_due(self) -> float | None:
        """Clock time of the next transition, or None (not started, or past the last phase)."""
        if self.started_at is None or self.phase_index + 1 >= len(self._ats):
            return None
        return self.started_at + self._ats[self.phase_index + 1]

    def poll(self) -> None:
        """Apply every transition due by now, in order: each is logged and counted."""
        elapsed = self.elapsed()
        if elapsed is None or self.timeline is None:
            return
        due = bisect.bisect_right(self._ats, elapsed) - 1
        if due <= self.phase_index:
            return
        phases = self.timeline.phases
        for index in range(self.phase_index + 1, due + 1):
            self.phase_index = index
            self._enter(phases[index].name)
        phase = phases[due]
        state = _phase_state(phase, self.base) if self._affected[due] else self.base
        self._injector.configure(state)

    def _enter(self, name: str) -> None:
        index = self.phase_index
        mine = index >= 0 and self._affected[index]
        logger.info(
            "fault phase %s: model=%s replica=%s at %.3f s: %s",
            name,
            self.model,
            self.replica.ordinal,
            self.elapsed() or 0.0,
            "this replica's faults set" if mine else "base faults",
        )
        self._on_phase(name)

    # -- the record ----------------------------------------------------------------------------

    def record(self, kind: str | None, at: float) -> None:
        """One request arrived at ``at`` (clock time; ``kind``: its fault): count it in the current
        phase and keep its time from the start (0 if it came in before the start)."""
        if self.started_at is None:
            return
        elapsed = max(0.0, at - self.started_at)
        counts = self.counts[self.phase]
        counts.requests += 1
        if kind is not None:
            counts.faults[kind] += 1
        if len(self._times) >= MAX_RECORDED_REQUESTS:
            half = MAX_RECORDED_REQUESTS // 2
            del self._times[:half]
            del self._faults[:half]
        self._times.append(elapsed)
        self._faults.append(FAULT_KINDS.index(kind) if kind is not None else NO_FAULT)

    def to_json(self) -> dict[str, Any]:
        """``GET /admin/timeline``: the schedule, who this replica is, where it stands, and per-phase counts."""
        self.poll()
        timeline = self.timeline
        return {
            "timeline": timeline.model_dump(mode="json") if timeline is not None else None,
            "replica": {"ordinal": self.replica.ordinal, "count": self.replica.count},
            "started": self.started_at is not None,
            "elapsed_s": self.elapsed(),
            "phase": self.phase,
            # Per phase: whether this replica gets its set (None before the start).
            "affected": (
                {p.name: a for p, a in zip(timeline.phases, self._affected, strict=True)}
                if timeline is not None and self.started_at is not None
                else None
            ),
            "counts": {name: c.to_json() for name, c in self.counts.items()},
        }

    def requests_json(self) -> dict[str, Any]:
        """``GET /admin/timeline/requests``: each recorded request's seconds from the start and its fault."""
        self.poll()
        return {
            "t": [round(t, 6) for t in self._times],
            "fault": [FAULT_KINDS[k] if k != NO_FAULT else None for k in self._faults],
        }

    # -- the background task -------------------------------------------------------------------

    async def run(self) -> None:
        """Apply each transition when it is due (requests and reads apply them too); runs until cancelled."""
        while True:
            self._changed.clear()
            due = self.next_due()
            timeout = None if due is None else max(due - self._now(), 0.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)
            self.poll()
