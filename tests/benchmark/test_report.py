"""The report: a sweep's plot, and the CLI that must not load the client on the server's path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llmsim.benchmark import Api, PromptShape, Shape, open_loop, predict
from llmsim.benchmark.monitor import ClientHealth
from llmsim.benchmark.plot import plot_sweep
from llmsim.benchmark.report import format_result, rows
from llmsim.benchmark.run import RunResult
from llmsim.benchmark.stats import Distribution, summarize
from llmsim.commands import bench
from tests.engine.scheduler.builders import seed_params


def predicted_point(rate: float) -> RunResult:
    """A load point whose 'measurement' is its own prediction: the report must then show no difference."""
    workload = open_loop([i / rate for i in range(int(rate))], PromptShape(256, 16))
    p = predict(seed_params(), workload)
    stats = summarize(p.records)
    health = ClientHealth(Distribution.of([0.0001, 0.0002]), 0.1, 1.0)
    return RunResult("rate", rate, workload, p.records, stats, health, p, stats, None)


def test_a_run_equal_to_its_prediction_shows_no_difference() -> None:
    result = predicted_point(20)
    table = rows(result)
    assert {r.metric for r in table} >= {"TTFT p50", "ITL p99", "E2E max", "requests/s", "preemptions"}
    assert all(r.diff == 0 for r in table if r.predicted is not None and r.metric != "preemptions")
    assert "TTFT p50" in format_result(result)


def test_the_sweep_plot_draws_measured_and_predicted_lines(tmp_path: Path) -> None:
    path = tmp_path / "sweep.png"
    labels = plot_sweep([predicted_point(r) for r in (5, 10, 20)], path, title="test")
    assert "TTFT p99 measured" in labels
    assert "E2E p50 predicted" in labels
    assert len(labels) == 12
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_cli_choices_mirror_the_package() -> None:
    assert tuple(s.value for s in Shape) == bench.SHAPES
    assert tuple(a.value for a in Api) == bench.APIS


def test_serving_never_loads_the_client() -> None:
    # `llmsim serve` goes through llmsim.cli, which registers `llmsim bench` too.
    code = "import sys, llmsim.cli; llmsim.cli.build_parser(); print(sorted(m for m in sys.modules if m.startswith(('llmsim.benchmark', 'aiohttp'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
