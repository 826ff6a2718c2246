"""``llmsim plan --fleet`` and friends: tables, JSON, comparisons, sweeps and errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmsim.cli import main
from tests.engine.scheduler.builders import roofline

from .test_plan import LORA_MODELS, MODELS

FLEET = """
version: 1
router: {policy: round-robin, scrape_interval_ms: 0}
replicas:
  - {model: seed, count: 2}
  - {model: seed, count: 1, name: spare}
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    models = tmp_path / "models.yml"
    models.write_text(MODELS)
    fleet = tmp_path / "fleet.yml"
    fleet.write_text(FLEET)
    return models, fleet


def run(args: list[str], tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "out.json"
    assert main([*args, "--json", str(out)]) == 0
    body: dict[str, Any] = json.loads(out.read_text())
    return body


def test_a_trace_through_a_fleet(files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, fleet = files
    # The replicas serve the LoRA adapter the third request names (loaded at startup: no load time).
    models = tmp_path / "lora-models.yml"
    models.write_text(LORA_MODELS.replace("sql-lora", "a"))
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        '{"arrival": 0, "prompt_tokens": 16, "output_tokens": 3}\n'
        '{"arrival": 0, "prefix_group": "g", "prefix_tokens": 10, "suffix_tokens": 6, "output_tokens": 3}\n'
        '{"arrival": 0, "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], "output_tokens": 3, "adapter": "a"}\n'
        '{"arrival": 0, "prompt_tokens": 16, "output_tokens": 3}\n'
    )
    body = run(["plan", "--config", str(models), "--fleet", str(fleet), "--workload", str(trace)], tmp_path)
    table = capsys.readouterr().out
    for label in ("4 requests", "seed/0", "seed/1", "spare/0", "fleet", "load imbalance 1.50", "speed-up"):
        assert label in table
    s = body["summary"]
    assert [r["num_requests"] for r in s["replicas"]] == [2, 1, 1]
    assert s["num_finished"] == 4
    assert s["load_imbalance"] == pytest.approx(2 / (4 / 3))
    # Requests alone on their replica: TTFT is the 16-token prefill; replica 0 batches two.
    alone = roofline(16, 16)
    assert s["replicas"][1]["ttft"]["p50"] == pytest.approx(alone, rel=1e-12)
    assert s["replicas"][0]["ttft"]["p50"] == pytest.approx(roofline(32, 32), rel=1e-12)
    # Every prompt looked up (prefix caching is on by default), none shares a block with another.
    assert s["prefix_hit_rate"] == 0.0
    assert body["fleet"]["router"] == {
        "policy": "round-robin",
        "scrape_interval_ms": 0,
        "weights": {"queue": 2.0, "kv_cache": 2.0, "prefix": 3.0},
        "seed": 0,
    }


def test_a_model_as_a_closed_loop_fleet(files: tuple[Path, Path], tmp_path: Path) -> None:
    models, _ = files
    args = ["plan", "--config", str(models), "--model", "seed", "--replicas", "2", "--router", "least-requests"]
    body = run(
        [*args, "--concurrency", "4", "--num-requests", "12", "--prompt-tokens", "64", "--output-tokens", "16"],
        tmp_path,
    )
    s = body["summary"]
    assert s["num_requests"] == 12
    assert s["output_tokens"] == 12 * 16
    assert [r["name"] for r in s["replicas"]] == ["seed/0", "seed/1"]
    assert body["fleet"]["router"]["policy"] == "least-requests"


def test_compare_prints_one_row_per_router(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models, fleet = files
    shape = ["--rate", "20", "--duration", "5", "--prompt-tokens", "500", "--output-tokens", "50"]
    body = run(
        ["plan", "--config", str(models), "--fleet", str(fleet), *shape, "--compare", "round-robin,weighted"], tmp_path
    )
    table = capsys.readouterr().out
    assert "round-robin" in table
    assert "weighted" in table
    assert "prefix hit" in table
    assert [c["router"] for c in body["compare"]] == ["round-robin", "weighted"]
    assert body["compare"][0]["summary"]["num_requests"] == body["compare"][1]["summary"]["num_requests"]


def test_rates_find_the_highest_rate_meeting_the_slo(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models, _ = files
    args = [
        "plan",
        "--config",
        str(models),
        "--model",
        "seed",
        "--duration",
        "10",
        "--prompt-tokens",
        "1000",
        "--output-tokens",
        "100",
    ]
    body = run([*args, "--rates", "2,40,5", "--slo", "ttft_p99=300", "--slo", "itl_p50=40"], tmp_path)
    points = body["points"]
    assert [p["rate"] for p in points] == [2, 5, 40]
    for p in points:
        s = p["summary"]
        meets = s["ttft"]["p99"] <= 0.3 and s["itl"]["p50"] <= 0.04 and s["num_rejected"] == 0
        assert p["meets_slo"] == meets
    assert body["best_rate"] == max(p["rate"] for p in points if p["meets_slo"])
    assert f"highest rate meeting the SLO: {body['best_rate']:g} req/s" in capsys.readouterr().out


def test_replicas_for_slo(files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models, _ = files
    args = ["plan", "--config", str(models), "--model", "seed", "--rate", "40", "--duration", "10"]
    body = run(
        [*args, "--prompt-tokens", "1000", "--output-tokens", "100", "--replicas-for-slo", "--slo", "ttft_p99=300"],
        tmp_path,
    )
    tried = {t["count"]: t["meets_slo"] for t in body["tried"]}
    best = body["best_count"]
    assert tried[best]
    assert best == 1 or tried[best - 1] is False
    assert f"fewest replicas of 'seed' meeting the SLO: {best}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            [
                "--rate",
                "5",
                "--duration",
                "1",
                "--prompt-tokens",
                "10",
                "--output-tokens",
                "1",
                "--compare",
                "round-robin,fastest",
            ],
            "--compare: unknown router 'fastest'",
        ),
        (
            ["--duration", "1", "--prompt-tokens", "10", "--output-tokens", "1", "--rates", "1,2"],
            "--rates needs at least one --slo",
        ),
        (
            ["--rate", "5", "--duration", "1", "--prompt-tokens", "10", "--output-tokens", "1", "--slo", "ttft_p99=5"],
            "--slo goes with --rates or --replicas-for-slo",
        ),
        (["--concurrency", "2", "--prompt-tokens", "10", "--output-tokens", "1"], "--concurrency needs --num-requests"),
        (
            ["--rate", "5", "--duration", "1", "--prompt-tokens", "40000", "--output-tokens", "1"],
            "prompt of 40000 tokens exceeds the context length of 32768",
        ),
        (
            ["--rate", "5", "--duration", "1", "--prompt-tokens", "10", "--output-tokens", "1", "--replicas", "2"],
            "--replicas goes with --model",
        ),
        (
            [
                "--concurrency",
                "2",
                "--num-requests",
                "2",
                "--prompt-tokens",
                "10",
                "--output-tokens",
                "1",
                "--turns",
                "2",
            ],
            "--turns go with --rate or --rates",
        ),
    ],
)
def test_errors_exit_2_with_one_line(
    files: tuple[Path, Path], extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    models, fleet = files
    assert main(["plan", "--config", str(models), "--fleet", str(fleet), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_a_broken_fleet_file_stops_before_simulating(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models, fleet = files
    fleet.write_text("replicas: [{model: steady}]\n")
    assert (
        main(
            [
                "plan",
                "--config",
                str(models),
                "--fleet",
                str(fleet),
                "--rate",
                "1",
                "--duration",
                "1",
                "--prompt-tokens",
                "1",
                "--output-tokens",
                "1",
            ]
        )
        == 2
    )
    assert (
        "fleet.yml: replicas[0] (model 'steady'): field 'model': model 'steady' uses engine 'fixed'"
        in capsys.readouterr().err
    )
