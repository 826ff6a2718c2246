"""Latency percentiles against load for a sweep, measured and predicted together (matplotlib, an optional extra)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from llmsim.benchmark.run import RunResult
from llmsim.benchmark.stats import Distribution, LoadStats

_PANELS: tuple[tuple[str, Callable[[LoadStats], Distribution]], ...] = (
    ("TTFT", lambda s: s.ttft),
    ("ITL", lambda s: s.itl),
    ("E2E", lambda s: s.e2e),
)


def plot_sweep(results: Sequence[RunResult], path: Path, *, title: str = "") -> list[str]:
    """Write a PNG with one panel per latency (p50 and p99 against load); return the drawn lines' labels."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import ScalarFormatter
    except ImportError as exc:
        raise RuntimeError("--plot needs matplotlib: pip install 'llmsim[bench]'") from exc
    xs = [r.value if r.value is not None else float(i) for i, r in enumerate(results)]
    load = results[0].load if results else "load"
    fig, axes = plt.subplots(1, len(_PANELS), figsize=(5 * len(_PANELS), 4), squeeze=False)
    labels: list[str] = []
    for ax, (name, pick) in zip(axes[0], _PANELS, strict=True):
        for q, color in (("p50", "tab:blue"), ("p99", "tab:red")):
            measured = [getattr(pick(r.measured), q) * 1000 for r in results]
            ax.plot(xs, measured, marker="o", color=color, label=f"{name} {q} measured")
            labels.append(f"{name} {q} measured")
            if all(r.predicted is not None for r in results) and results:
                predicted = [getattr(pick(r.predicted), q) * 1000 for r in results if r.predicted is not None]
                ax.plot(xs, predicted, linestyle="--", marker="x", color=color, label=f"{name} {q} predicted")
                labels.append(f"{name} {q} predicted")
        ax.set_title(name)
        ax.set_xlabel(load)
        ax.set_ylabel("ms")
        ax.set_yscale("log")
        # Plain milliseconds on the log axis, not powers of ten.
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return labels
