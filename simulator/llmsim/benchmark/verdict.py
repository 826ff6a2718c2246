"""What a gateway did while replicas followed a fault timeline: pure analysis of what was collected.

The inputs are the replicas' own records (``GET /admin/timeline`` and ``/admin/timeline/requests``:
the phases, which replica each phase made bad, every request a replica received with its time
from the timeline's start and its fault) and the client's records (each request sent through the
gateway: when, status, latency, which replica answered). All times are seconds from the
timeline's start; the verdict started every replica's timeline itself, so the replicas' and the
client's clocks agree to within the start calls' spread (milliseconds).

The time series is the replicas' per-request record rather than counters polled by the verdict:
it is exact (no polling interval to blur an ejection), costs the replica 12 bytes a request, and
can be read after the run, from any replica, by anyone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ClientRecord:
    """One request sent through the gateway. Never raises: a failure is a status 0 and an error text."""

    # Seconds from the timeline's start at which the request was sent.
    sent: float
    # HTTP status (0: no answer: connection error or timeout).
    status: int
    # Seconds from sending to the end of the answer.
    latency: float
    # The replica that answered (its x-llmsim-pod header), if it said.
    replica: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    """One replica's view: its name, ordinal, timeline state and request record."""

    name: str
    ordinal: int
    # GET /admin/timeline's entry for the model.
    timeline: Mapping[str, Any]
    # GET /admin/timeline/requests's entry: ``t`` (seconds from the start) and ``fault`` (kind or None).
    requests: Mapping[str, Sequence[Any]]


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    start: float
    # The next phase's start, or the end of the run.
    end: float


@dataclass(slots=True)
class Latency:
    n: int = 0
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, values: Sequence[float]) -> Latency:
        if not values:
            return cls()
        ordered = sorted(values)
        return cls(len(ordered), _quantile(ordered, 0.5), _quantile(ordered, 0.9), _quantile(ordered, 0.99))


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (the value below which a fraction q of the requests fall)."""
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


@dataclass(slots=True)
class ReplicaPhase:
    """One replica in one phase."""

    replica: str
    # Whether the phase set this replica's faults (it was the bad one).
    affected: bool
    # Requests the replica received, and how many of them it answered with a fault (by its own record).
    received: int
    faults: int
    # Requests the client got answered by this replica (x-llmsim-pod), and their latency.
    answered: Latency = field(default_factory=Latency)


@dataclass(slots=True)
class PhaseReport:
    name: str
    start: float
    end: float
    # The client's view: requests sent, those that did not get a 2xx, their rate, latency of all.
    sent: int
    errors: int
    error_rate: float
    latency: Latency
    replicas: list[ReplicaPhase]


@dataclass(slots=True)
class Ejection:
    """How fast the gateway stopped sending to a bad replica, and took it back."""

    replica: str
    phase: str
    # Seconds from the phase's start to the start of the replica's first silence of at least
    # ``gap`` (0 if it got nothing at all); None: it never went silent in the phase.
    ejected_after_s: float | None
    # Requests the replica received in the phase before that silence.
    requests_before_ejection: int
    # The phase in which the replica was healthy again, and seconds from its start to the first
    # request the replica received in it; None: none came before the run ended.
    recovery_phase: str | None
    returned_after_s: float | None


@dataclass(slots=True)
class Verdict:
    duration_s: float
    gap_s: float
    sent: int
    errors: int
    error_rate: float
    phases: list[PhaseReport]
    ejections: list[Ejection]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def phases_of(timeline: Mapping[str, Any], duration: float) -> list[Phase]:
    """The run's phases (``base`` first) from a replica's ``/admin/timeline`` entry; those starting after ``duration`` left out."""
    spec = timeline.get("timeline") or {"phases": []}
    starts = [("base", 0.0)] + [(p["name"], float(p["at"])) for p in spec["phases"] if float(p["at"]) < duration]
    ends = [at for _, at in starts[1:]] + [duration]
    return [Phase(name, at, end) for (name, at), end in zip(starts, ends, strict=True)]


def _in(phase: Phase, t: float) -> bool:
    return phase.start <= t < phase.end


def _ejection(times: Sequence[float], phase: Phase, gap: float) -> tuple[float | None, int]:
    """Start of the first silence of at least ``gap`` after the phase's start, and requests before it."""
    last = phase.start
    count = 0
    for t in times:
        if t < phase.start:
            continue
        if t >= phase.end:
            break
        if t - last >= gap:
            return last - phase.start, count
        last = t
        count += 1
    if phase.end - last >= gap:
        return last - phase.start, count
    return None, count


def judge(replicas: Sequence[ReplicaRecord], client: Sequence[ClientRecord], duration: float, gap: float) -> Verdict:
    """Per phase and replica: what each replica got and the client saw; per fault: ejection and return times.

    ``gap``: a bad replica silent this long (seconds) is taken as ejected.
    """
    phases = phases_of(replicas[0].timeline, duration) if replicas else [Phase("base", 0.0, duration)]
    times = {r.name: [float(t) for t in r.requests.get("t", ())] for r in replicas}
    faults = {r.name: list(r.requests.get("fault", ())) for r in replicas}
    affected = {r.name: dict(r.timeline.get("affected") or {}) for r in replicas}
    reports = []
    for phase in phases:
        sent = [c for c in client if _in(phase, c.sent)]
        errors = sum(1 for c in sent if not 200 <= c.status < 300)
        rows = []
        for r in replicas:
            picked = [i for i, t in enumerate(times[r.name]) if _in(phase, t)]
            answered = [c.latency for c in sent if c.replica == r.name and 200 <= c.status < 300]
            rows.append(
                ReplicaPhase(
                    replica=r.name,
                    affected=bool(affected[r.name].get(phase.name, False)),
                    received=len(picked),
                    faults=sum(1 for i in picked if faults[r.name][i] is not None),
                    answered=Latency.of(answered),
                )
            )
        reports.append(
            PhaseReport(
                name=phase.name,
                start=phase.start,
                end=phase.end,
                sent=len(sent),
                errors=errors,
                error_rate=errors / len(sent) if sent else 0.0,
                latency=Latency.of([c.latency for c in sent if 200 <= c.status < 300]),
                replicas=rows,
            )
        )
    ejections = []
    for r in replicas:
        for i, phase in enumerate(phases):
            if not affected[r.name].get(phase.name, False):
                continue
            # A bad phase followed by another bad phase for the same replica is one fault.
            if i > 0 and affected[r.name].get(phases[i - 1].name, False):
                continue
            ejected, before = _ejection(times[r.name], phase, gap)
            recovery = next((p for p in phases[i + 1 :] if not affected[r.name].get(p.name, False)), None)
            returned = None
            if recovery is not None:
                later = [t for t in times[r.name] if t >= recovery.start]
                returned = later[0] - recovery.start if later else None
            ejections.append(
                Ejection(
                    replica=r.name,
                    phase=phase.name,
                    ejected_after_s=ejected,
                    requests_before_ejection=before,
                    recovery_phase=recovery.name if recovery is not None else None,
                    returned_after_s=returned,
                )
            )
    total_errors = sum(1 for c in client if not 200 <= c.status < 300)
    return Verdict(
        duration_s=duration,
        gap_s=gap,
        sent=len(client),
        errors=total_errors,
        error_rate=total_errors / len(client) if client else 0.0,
        phases=reports,
        ejections=ejections,
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f} s"


def render(verdict: Verdict) -> str:
    """The verdict as text: a table per phase, then one line per fault."""
    lines = [
        f"{verdict.sent} requests in {verdict.duration_s:.1f} s through the gateway: "
        f"{verdict.errors} errors ({verdict.error_rate:.2%})",
    ]
    for p in verdict.phases:
        lines.append("")
        lines.append(
            f"phase {p.name} [{p.start:.1f} s, {p.end:.1f} s): client sent {p.sent}, errors {p.errors} "
            f"({p.error_rate:.2%}), latency p50/p90/p99 {_ms(p.latency.p50)}/{_ms(p.latency.p90)}/"
            f"{_ms(p.latency.p99)} ms"
        )
        lines.append(
            f"  {'replica':<24} {'bad':>3} {'received':>8} {'faults':>6} {'answered':>8} {'p50 ms':>7} {'p99 ms':>7}"
        )
        for row in p.replicas:
            lines.append(
                f"  {row.replica:<24} {'yes' if row.affected else '':>3} {row.received:>8} {row.faults:>6} "
                f"{row.answered.n:>8} {_ms(row.answered.p50):>7} {_ms(row.answered.p99):>7}"
            )
    if verdict.ejections:
        lines.append("")
        lines.append(f"faults (ejected: first silence of at least {verdict.gap_s:g} s):")
        for e in verdict.ejections:
            back = (
                f"taken back {_s(e.returned_after_s)} into {e.recovery_phase}"
                if e.recovery_phase is not None
                else "no recovery phase in the run"
            )
            lines.append(
                f"  {e.replica} in {e.phase}: ejected after {_s(e.ejected_after_s)} "
                f"({e.requests_before_ejection} requests), {back}"
            )
    return "\n".join(lines)
