"""Every benchmark, then the predict-then-measure experiments: what `make bench` runs.

Each bench runs in its own process (the live ones start their own `llmsim serve`), prints its
figures and writes its JSON to bench/results/; the experiments write bench/results/experiments.json
and the markdown table for bench/README.md (bench/results/experiments.md). The token-path A/B
(bench_token_path.py) compares two source trees and is run by hand (see bench/README.md).

    .venv/bin/python bench/run_all.py [--only matcher,plan,metrics,fixed,health,experiments]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

BENCHES: dict[str, list[str]] = {
    "matcher": [PY, "bench/bench_matcher.py"],
    "plan": [PY, "bench/bench_plan.py"],
    "metrics": [PY, "bench/bench_metrics.py", "--live", "--duration", "6"],
    "fixed": [PY, "bench/bench_fixed.py", "--duration", "6", "--levels", "50,100,200"],
    "health": [PY, "bench/bench_health_under_load.py"],
    "experiments": [PY, "-m", "llmsim.cli", "bench", "experiments"],
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help=f"comma-separated subset of {','.join(BENCHES)}")
    args = p.parse_args()
    names = [n.strip() for n in args.only.split(",")] if args.only else list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        p.error(f"unknown bench(es) {', '.join(unknown)}; known: {', '.join(BENCHES)}")
    failed: list[str] = []
    for name in names:
        print(f"\n### {name}: {' '.join(BENCHES[name][1:])}", flush=True)
        started = time.monotonic()
        code = subprocess.run(BENCHES[name], cwd=ROOT, check=False).returncode
        print(f"### {name}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
        if code != 0:
            failed.append(name)
    if failed:
        # The experiments exit 1 when a figure is out of tolerance: a finding to read, not a crash.
        print(f"\nnot clean: {', '.join(failed)} (see above)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
