"""Every benchmark, then the predict-then-measure experiments: what `make bench` runs.

Each benchmark runs in its own process (the live ones start their own `llmsim serve`), prints its
figures and writes them to ``bench/results/<name>.json``; this script then adds a ``run`` block
to that file: the commit (and whether the tree had uncommitted changes), the date and the host
(Python, CPU count, load average), so a figure can be traced to the code and the machine that
made it. The experiments also write the markdown table for bench/README.md
(``bench/results/experiments.md``).

Two benchmarks need something besides this tree: ``token_path`` compares two source trees (the
baseline is ``git archive`` of ``--baseline``, default HEAD, against the working tree), and
``operator_fleet`` needs a cluster with the operator installed (it runs only when ``KUBECONFIG``
is set; otherwise it is reported as skipped).

    .venv/bin/python bench/run_all.py [--only matcher,plan,...] [--quick] [--baseline REF]

``--quick`` runs each benchmark at its smallest setting (seconds to a minute each) and writes to
``bench/results/quick/``: to check they run, not to read the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


@dataclass(frozen=True)
class Bench:
    """How to run one benchmark: its arguments in full and at its smallest, and what it needs."""

    # The command after the interpreter; the results file is appended as ``--out`` (or the
    # experiments' ``--json``) by the runner.
    command: tuple[str, ...]
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()
    # Why it cannot run here (None: it can).
    unavailable: Callable[[], str | None] = field(default=lambda: None)
    out_flag: str = "--out"


def _no_cluster() -> str | None:
    return None if os.environ.get("KUBECONFIG") else "needs a cluster with the operator (set KUBECONFIG)"


def _no_envtest() -> str | None:
    return (
        None if os.environ.get("KUBEBUILDER_ASSETS") else "needs envtest (KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh))"
    )


#: One entry per bench/bench_*.py (a test checks none is missing), then the experiments.
BENCHES: dict[str, Bench] = {
    "matcher": Bench(("bench/bench_matcher.py",)),
    "plan": Bench(("bench/bench_plan.py",), quick=("--quick", "--repeat", "1")),
    "plan_pd": Bench(("bench/bench_plan_pd.py",), quick=("--quick",)),
    "metrics": Bench(
        ("bench/bench_metrics.py", "--live"),
        full=("--duration", "6"),
        quick=("--duration", "1", "--concurrency", "10"),
    ),
    "fixed": Bench(
        ("bench/bench_fixed.py",),
        full=("--duration", "6", "--levels", "50,100,200,400"),
        quick=("--duration", "1", "--levels", "10"),
    ),
    "prefix_cache": Bench(
        ("bench/bench_prefix_cache.py",),
        quick=("--conversations", "2", "--turns", "2", "--gap", "0.5", "--system-tokens", "200"),
    ),
    "live_timing": Bench(
        ("bench/bench_live_timing.py",),
        quick=("--levels", "8", "--rounds", "1", "--duration", "1", "--rate", "5", "--ttft-duration", "2"),
    ),
    "health_probe": Bench(("bench/bench_health_probe.py",), quick=("--seconds", "1")),
    "health_under_load": Bench(("bench/bench_health_under_load.py",), quick=("--seconds-before", "0.5")),
    "token_path": Bench(
        ("bench/bench_token_path.py", "--b", "."),
        quick=("--levels", "10", "--rounds", "1", "--duration", "1"),
    ),
    "pd_token_path": Bench(("bench/bench_pd_token_path.py",), quick=("--quick",)),
    "operator_fleet": Bench(
        ("bench/bench_operator_fleet.py",),
        quick=("--count", "3", "--timeout", "120"),
        unavailable=_no_cluster,
    ),
    "operator_envtest": Bench(
        ("bench/bench_operator_envtest.py",),
        quick=("--quick",),
        unavailable=_no_envtest,
    ),
    "soak": Bench(("bench/bench_soak.py",), quick=("--minutes", "1")),
    "dp_density": Bench(("bench/bench_dp_density.py",), quick=("--quick",)),
    "experiments": Bench(
        ("-m", "llmsim.cli", "bench", "experiments"),
        quick=("--only", "E1"),
        out_flag="--json",
    ),
}


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def run_facts() -> dict[str, Any]:
    """What a figure needs beside it to be read later: the code, the date, the machine."""
    return {
        "commit": _git("rev-parse", "HEAD") or None,
        "uncommitted_changes": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "machine": platform.machine(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
    }


def stamp(path: Path, facts: dict[str, Any], seconds: float) -> None:
    """Add the ``run`` block to a benchmark's results file (left alone when the bench wrote none)."""
    if not path.exists():
        return
    body = json.loads(path.read_text())
    if isinstance(body, dict):
        body["run"] = {**facts, "wall_seconds": round(seconds, 1)}
        path.write_text(json.dumps(body, indent=2) + "\n")


def _baseline_tree(ref: str, into: Path) -> None:
    """``git archive REF`` unpacked into ``into``: the tree bench_token_path.py compares with."""
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def command(name: str, bench: Bench, results: Path, *, quick: bool, baseline: Path | None) -> list[str]:
    """The full command line of one benchmark."""
    args = [PY, *bench.command, *(bench.quick if quick else bench.full)]
    if name == "token_path":
        if baseline is None:
            raise ValueError("token_path needs a baseline tree")
        args += ["--a", str(baseline)]
    args += [bench.out_flag, str(results / f"{name}.json")]
    if name == "experiments":
        args += ["--markdown", str(results / "experiments.md")]
    return args


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help=f"comma-separated subset of {','.join(BENCHES)}")
    p.add_argument("--quick", action="store_true", help="each at its smallest setting, into bench/results/quick/")
    p.add_argument("--baseline", default="HEAD", help="git ref token_path compares the working tree with (HEAD)")
    args = p.parse_args()
    names = [n.strip() for n in args.only.split(",")] if args.only else list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        p.error(f"unknown bench(es) {', '.join(unknown)}; known: {', '.join(BENCHES)}")
    results = ROOT / "bench" / "results" / ("quick" if args.quick else "")
    results.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="llmsim-baseline-") as tmp:
        baseline: Path | None = None
        if "token_path" in names:
            baseline = Path(tmp)
            _baseline_tree(args.baseline, baseline)
        for name in names:
            bench = BENCHES[name]
            reason = bench.unavailable()
            if reason is not None:
                print(f"\n### {name}: skipped: {reason}", flush=True)
                skipped.append(name)
                continue
            argv = command(name, bench, results, quick=args.quick, baseline=baseline)
            print(f"\n### {name}: {' '.join(argv[1:])}", flush=True)
            facts = run_facts()
            started = time.monotonic()
            code = subprocess.run(argv, cwd=ROOT, check=False).returncode
            seconds = time.monotonic() - started
            stamp(results / f"{name}.json", facts, seconds)
            print(f"### {name}: exit {code} after {seconds:.0f} s", flush=True)
            if code != 0:
                failed.append(name)
    if skipped:
        print(f"\nskipped: {', '.join(skipped)}")
    if failed:
        # The experiments exit 1 when a figure is out of tolerance: a finding to read, not a crash.
        print(f"\nnot clean: {', '.join(failed)} (see above)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
