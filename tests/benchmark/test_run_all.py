"""``make bench`` (bench/run_all.py) runs every benchmark, and each writes bench/results/<name>.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import run_all

BENCH_DIR = Path(run_all.__file__).parent


def test_every_bench_script_is_listed_in_run_all() -> None:
    scripts = {p.name for p in BENCH_DIR.glob("bench_*.py")}
    listed = {arg.removeprefix("bench/") for b in run_all.BENCHES.values() for arg in b.command if arg.endswith(".py")}
    assert scripts - listed == set(), "add the new benchmark to BENCHES in bench/run_all.py"
    assert listed - scripts == set()


def test_each_benchmark_is_named_after_its_script_and_writes_its_own_file(tmp_path: Path) -> None:
    for name, bench in run_all.BENCHES.items():
        for quick in (False, True):
            argv = run_all.command(name, bench, tmp_path, quick=quick, baseline=tmp_path / "base")
            assert argv[argv.index(bench.out_flag) + 1] == str(tmp_path / f"{name}.json")
        if name != "experiments":
            assert bench.command[0] == f"bench/bench_{name}.py"


def test_the_results_file_gets_the_commit_date_and_host(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"figures": [1, 2]}))
    run_all.stamp(path, run_all.run_facts(), 12.34)
    body = json.loads(path.read_text())
    assert body["figures"] == [1, 2]
    run = body["run"]
    assert set(run) == {"commit", "uncommitted_changes", "date", "host", "wall_seconds"}
    assert run["wall_seconds"] == pytest.approx(12.3)
    assert {"python", "machine", "cpus", "load_average"} <= set(run["host"])
    run_all.stamp(tmp_path / "missing.json", run_all.run_facts(), 1.0)
    assert not (tmp_path / "missing.json").exists()
