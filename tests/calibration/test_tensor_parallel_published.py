"""``llmsim plan``'s prediction for a published vLLM run of a 70B model at TP 4, within 10 %.

The figures, their source and setup are in ``data/tensor_parallel_published.yml``. The run is an
end-to-end latency of 8 requests batched together (32 prompt tokens, 128 output tokens), so its
TPOT is (latency - time to the first token) / 127. The interconnect's figures come from the GPU's
datasheet and Vidur's measured all-reduce times, not from this run: nothing here was fitted to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmsim.cli import main

DATA = Path(__file__).parent / "data" / "tensor_parallel_published.yml"
RUNS: dict[str, dict[str, Any]] = yaml.safe_load(DATA.read_text())["runs"]


def plan(run: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    config = tmp_path / "models.yml"
    model = {
        "name": "m",
        "engine": "scheduler",
        "profile": run["profile"],
        "hardware": run["hardware"],
        "tensor_parallel_size": run["tensor_parallel_size"],
        "context_length": 4096,
    }
    config.write_text(json.dumps({"version": 1, "models": [model]}))
    out = tmp_path / "plan.json"
    argv = ["plan", "--config", str(config), "--model", "m", "--json", str(out)]
    argv += ["--concurrency", str(run["batch"]), "--num-requests", str(run["batch"])]
    argv += ["--prompt-tokens", str(run["input_tokens"]), "--output-tokens", str(run["output_tokens"])]
    assert main(argv) == 0
    summary: dict[str, Any] = json.loads(out.read_text())["summary"]
    return summary


def test_a_70b_at_tp4_decodes_within_ten_percent_of_the_published_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = RUNS["latency_llama70B_tp4"]
    summary = plan(run, tmp_path)
    capsys.readouterr()
    # The offline benchmark has no HTTP server: the simulated request overhead (the queue time of
    # this closed batch, nobody waits for a slot) is not part of its latency.
    overhead = summary["queue_time"]["mean"]
    ttft = summary["ttft"]["mean"] - overhead
    predicted_tpot = summary["tpot"]["mean"]
    published_tpot = (run["mean_latency_ms"] / 1000 - ttft) / (run["output_tokens"] - 1)
    assert predicted_tpot == pytest.approx(published_tpot, rel=0.10)
    predicted_latency = summary["e2e"]["mean"] - overhead
    assert predicted_latency == pytest.approx(run["mean_latency_ms"] / 1000, rel=0.10)
