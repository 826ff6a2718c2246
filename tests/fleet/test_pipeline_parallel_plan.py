"""``llmsim plan`` with pipeline parallelism: a 70B on two stages of two H100s (``-tp 2 -pp 2``).

Expected values come from vLLM's rules worked by hand (its layer split and KV block count, its
batch queue and decode stagger), with the H100's calibrated knobs; nothing is read back from a
previous run.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmsim.cli import main


def plan(
    tmp_path: Path, tp: int, pp: int, *, concurrency: int, requests: int, prompt: int, output: int
) -> dict[str, Any]:
    config = tmp_path / f"models-{tp}-{pp}.yml"
    model = {
        "name": "m",
        "engine": "scheduler",
        "profile": "llama-3.1-70b",
        "hardware": "h100-80gb",
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "context_length": 8192,
    }
    config.write_text(json.dumps({"version": 1, "models": [model]}))
    out = tmp_path / f"plan-{tp}-{pp}.json"
    argv = ["plan", "--config", str(config), "--model", "m", "--json", str(out)]
    argv += ["--concurrency", str(concurrency), "--num-requests", str(requests)]
    argv += ["--prompt-tokens", str(prompt), "--output-tokens", str(output)]
    assert main(argv) == 0
    summary: dict[str, Any] = json.loads(out.read_text())["summary"]
    return summary


def test_a_lone_request_decodes_through_both_stages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = plan(tmp_path, 2, 2, concurrency=1, requests=1, prompt=32, output=128)
    capsys.readouterr()
    replica = summary["replicas"][0]
    # 32,050 blocks a GPU (the null block aside: 32,049 usable), as for TP 4 on the same 4 GPUs.
    assert replica["kv_total_blocks"] == 32_049
    # A token every trip through the pipeline (async scheduling, the default: the next decode
    # waits for the broadcast of the last token): two stages of a quarter of the weights at the
    # calibrated bandwidth and 80 all-reduces over TP 2, one hand-over (two collectives and
    # 32,768 B), the broadcast, and the per-sequence cost. The context's KV (under 160 tokens,
    # 81,920 B each a GPU) adds < 4 us a stage.
    knobs = yaml.safe_load(resources.files("llmsim").joinpath("data", "calibrated_timing.yml").read_text())
    h100 = knobs["pairs"]["h100-80gb"]["llama-3.1-8b"]
    stage = 141.2e9 / 4 / (3350e9 * h100["efficiency.memory"]) + 80 * (40e-6 + 8192 * 2 / 450e9)
    gap = 40e-6 + 2 * stage + (2 * 40e-6 + 32_768 / 450e9) + h100["latency.step_overhead_per_sequence_ms"] / 1000
    assert summary["tpot"]["mean"] == pytest.approx(gap, rel=1e-3)


def test_each_decode_is_in_one_batch_of_every_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 64 streams of 1,000-token prompts (one chunk each in the 8,192-token budget) and 100 outputs.
    # vLLM's stagger keeps a sequence out of the batch after the one it sampled in, and no prompt
    # spans two batches, so two consecutive batches hold each sequence at most once: a batch
    # averages at most 64 / 2 sequences. On TP 4 the same streams share every batch.
    pipelined = plan(tmp_path, 2, 2, concurrency=64, requests=256, prompt=1000, output=100)
    tensor = plan(tmp_path, 4, 1, concurrency=64, requests=256, prompt=1000, output=100)
    capsys.readouterr()
    assert pipelined["replicas"][0]["mean_batch_size"] <= 32
    assert tensor["replicas"][0]["mean_batch_size"] > 48
    assert pipelined["num_finished"] == tensor["num_finished"] == 256
