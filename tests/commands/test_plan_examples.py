"""The capacity-planning example of README.md runs as written (shorter)."""

from __future__ import annotations

import json
from pathlib import Path

from llmsim.cli import main

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples" / "fleet"


def test_the_readme_fleet_example_runs(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["plan", "--config", str(EXAMPLES / "models.yml"), "--fleet", str(EXAMPLES / "fleet.yml")]
    shape = ["--rate", "40", "--duration", "5", "--prompt-tokens", "1000", "--output-tokens", "200"]
    assert main([*args, *shape, "--json", str(out)]) == 0
    body = json.loads(out.read_text())
    assert [r["name"] for r in body["summary"]["replicas"]] == [
        "h100/0",
        "h100/1",
        "h100/2",
        "h100/3",
        "a100/0",
        "a100/1",
    ]
    assert main([*args, *shape, "--compare", "round-robin,least-requests,weighted"]) == 0


def test_the_example_trace_runs(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["plan", "--config", str(EXAMPLES / "models.yml"), "--fleet", str(EXAMPLES / "fleet.yml")]
    assert main([*args, "--workload", str(EXAMPLES / "trace.jsonl"), "--json", str(out)]) == 0
    s = json.loads(out.read_text())["summary"]
    assert (s["num_requests"], s["num_finished"], s["num_aborted"]) == (5, 4, 1)
