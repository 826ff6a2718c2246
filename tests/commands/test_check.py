"""``llmsim check`` prints a report a person reads, and the same as JSON with ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmsim.cli import main

MODELS = """
models:
  - {name: big, engine: scheduler, profile: llama-3.1-8b, hardware: h100-80gb, context_length: 8192,
     scheduler: {max_num_sequences: 64, max_batch_tokens: 4096}}
  - {name: quick, engine: fixed, latency: {ttft_overhead_ms: 20, prefill_tokens_per_second: 20000, itl_ms: 15}}
  - {name: now, engine: instant}
"""


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    path = tmp_path / "models.yml"
    path.write_text(MODELS)
    assert main(["check", "--config", str(path), *extra]) == 0
    return capsys.readouterr().out


def test_the_report_is_lines_not_a_python_repr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = check(tmp_path, capsys)
    assert "EngineInfo" not in out
    assert "=None" not in out
    lines = out.splitlines()
    assert lines[0] == f"models.yml: {tmp_path / 'models.yml'}: 3 model(s), OK"
    assert lines[1] == "big: scheduler engine on h100-80gb"
    kv = lines[2].split()
    assert kv[:2] == ["KV", "cache"]
    assert kv[3:6] == ["blocks", "of", "16"]
    blocks = int(kv[2].replace(",", ""))
    assert kv[7] == f"({blocks * 16:,}"
    assert lines[3] == "  batch      up to 64 sequences, 4,096 tokens per step"
    assert lines[4] == "  timing (value: source)"
    assert "quick: fixed engine" in lines
    assert "now: instant engine" in lines


def test_json_has_the_same_facts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = json.loads(check(tmp_path, capsys, "--json"))
    big = body["models"]["big"]
    assert (big["engine"], big["hardware"], big["block_size"]) == ("scheduler", "h100-80gb", 16)
    assert big["kv_cache_tokens"] == big["kv_cache_blocks"] * 16
    assert (big["max_num_sequences"], big["max_batch_tokens"]) == (64, 4096)
    assert set(big["timing"]) == {
        "efficiency.compute",
        "efficiency.memory",
        "latency.step_overhead_ms",
        "latency.step_overhead_per_sequence_ms",
        "latency.request_overhead_ms",
    }
    assert all(isinstance(k["value"], float) and k["source"] for k in big["timing"].values())
    assert body["models"]["quick"] == {
        "engine": "fixed",
        "hardware": None,
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "kv_cache_blocks": None,
        "block_size": None,
        "kv_cache_tokens": None,
        "max_num_sequences": None,
        "max_batch_tokens": None,
        "timing": {},
    }
    assert set(body["calibration_data"]) == {"A1", "A4"}


def test_a_tensor_parallel_model_names_its_gpus_and_per_gpu_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "models.yml"
    path.write_text(
        "models:\n"
        "  - {name: tp, engine: scheduler, profile: llama-3.1-70b, hardware: h100-80gb, context_length: 8192,\n"
        "     tensor_parallel_size: 4}\n"
    )
    assert main(["check", "--config", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "tp: scheduler engine on 4 x h100-80gb (tensor parallel)"
    # One GPU's blocks: (0.9 x 80 GiB - 141.2 GB / 4) / (327,680 B / 4 x 16) = 32,050.
    assert lines[2] == "  KV cache   32,050 blocks of 16 tokens (512,800 tokens) on every GPU"
    assert main(["check", "--config", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["models"]["tp"]["tensor_parallel_size"] == 4


def test_a_pipeline_parallel_model_names_its_stages_and_per_gpu_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "models.yml"
    path.write_text(
        "models:\n"
        "  - {name: pp, engine: scheduler, profile: llama-3.1-70b, hardware: h100-80gb, context_length: 8192,\n"
        "     tensor_parallel_size: 2, pipeline_parallel_size: 2}\n"
    )
    assert main(["check", "--config", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "pp: scheduler engine on 2 stages of 2 x h100-80gb (pipeline parallel)"
    # A GPU holds 40 of 80 layers, half of each: (0.9 x 80 GiB - 141.2 GB / 4) / (327,680 B / 4 x 16).
    assert lines[2] == "  KV cache   32,050 blocks of 16 tokens (512,800 tokens) on every GPU"


def test_a_server_per_rank_is_checked_as_its_first_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # External load balancing over 4 ranks in one process: serve starts a server per rank; check
    # builds the first (every rank has the same GPU) instead of refusing the config.
    path = tmp_path / "models.yml"
    path.write_text(
        "version: 1\nmodels:\n  - name: big\n    engine: scheduler\n    profile: llama-3.1-8b\n"
        "    hardware: h100-80gb\n    data_parallel: {size: 4, load_balancing: external}\n"
    )
    assert main(["check", "--config", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "big: scheduler engine on h100-80gb"
