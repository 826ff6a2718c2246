"""The verdict's picture: requests each replica received over time, phases shaded (matplotlib, an optional extra)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from llmsim.benchmark.verdict import ClientRecord, ReplicaRecord, Verdict

#: Width of a bar of the request histogram: fine enough to show a one-second ejection interval.
BIN_S = 0.25


def plot_verdict(
    verdict: Verdict, replicas: Sequence[ReplicaRecord], client: Sequence[ClientRecord], path: Path
) -> list[str]:
    """Write a PNG: per replica, requests received per second; the client's errors below; return the line labels."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib: pip install 'llmsim[bench]'") from exc
    bins = max(math.ceil(verdict.duration_s / BIN_S), 1)
    edges = [i * BIN_S for i in range(bins + 1)]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, height_ratios=(3, 1))
    labels: list[str] = []
    for r in replicas:
        counts = [0] * bins
        for t in r.requests.get("t", ()):
            i = int(float(t) / BIN_S)
            if 0 <= i < bins:
                counts[i] += 1
        top.step(edges[:-1], [c / BIN_S for c in counts], where="post", label=r.name)
        labels.append(r.name)
    errors = [0] * bins
    for c in client:
        i = int(c.sent / BIN_S)
        if 0 <= i < bins and not 200 <= c.status < 300:
            errors[i] += 1
    bottom.step(edges[:-1], [e / BIN_S for e in errors], where="post", color="tab:red", label="client errors")
    labels.append("client errors")
    shades = ("#f0f0f0", "#ffe9d6")
    for i, phase in enumerate(verdict.phases):
        for ax in (top, bottom):
            ax.axvspan(phase.start, phase.end, color=shades[i % 2], zorder=0)
        top.text(phase.start, 1.0, f" {phase.name}", transform=top.get_xaxis_transform(), va="top", fontsize="small")
    top.set_ylabel("requests/s received")
    top.legend(fontsize="small", loc="upper right")
    bottom.set_ylabel("errors/s")
    bottom.set_xlabel("seconds from the timeline's start")
    bottom.legend(fontsize="small", loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return labels
