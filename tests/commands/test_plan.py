"""``llmsim plan``: workload files, Poisson arguments, the table, the JSON and the errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmsim.cli import main
from tests.engine.scheduler.builders import roofline

# The example model (the seed design): 7,609 KV blocks.
MODELS = """
hardware:
  h100-80gb: {hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
models:
  - name: seed
    engine: scheduler
    hardware: h100-80gb
    context_length: 32768
    weights: {parameters_billions: 6.74, bytes_per_parameter: 2}
    kv_cache: {bytes_per_token: 524288, block_size: 16, gpu_memory_utilization: 0.9}
    scheduler: {max_batch_tokens: 8192, max_num_sequences: 64}
  - name: steady
    engine: fixed
    latency: {itl_ms: 10}
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "models.yml"
    path.write_text(MODELS)
    return path


def test_a_jsonl_workload_prints_the_table_and_writes_json(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One request alone on the GPU: TTFT = its prefill step, ITL = decode steps at 17 and 18 tokens.
    workload = tmp_path / "w.jsonl"
    workload.write_text('{"arrival": 0, "prompt_tokens": 16, "output_tokens": 3}\n')
    out = tmp_path / "plan.json"
    args = ["plan", "--config", str(config), "--model", "seed", "--workload", str(workload), "--json", str(out)]
    assert main(args) == 0
    table = capsys.readouterr().out
    for label in ("TTFT", "ITL", "E2E", "queue time", "throughput", "7,609 blocks", "speed-up"):
        assert label in table
    # The test suite runs the source (tests/fleet/test_compiled_core.py runs the compiled copy).
    assert table.rstrip().endswith("x real time (pure Python core)")
    body = json.loads(out.read_text())
    assert body["num_requests"] == 1
    assert body["output_tokens"] == 3
    # 7,609 blocks, one of them vLLM's null block.
    assert body["kv_total_blocks"] == 7609 - 1
    assert body["ttft"]["p50"] == pytest.approx(roofline(16, 16), rel=1e-12)
    assert body["itl"]["p50"] == pytest.approx((roofline(1, 17) + roofline(1, 18)) / 2, rel=1e-12)
    assert body["num_preemptions"] == 0
    assert body["speedup"] > 0
    assert body["compiled_core"] is False


def test_a_yaml_workload_with_an_abort(config: Path, tmp_path: Path) -> None:
    workload = tmp_path / "w.yml"
    workload.write_text(
        "- {arrival: 0.0, prompt_tokens: 100, output_tokens: 50}\n"
        "- {arrival: 0.01, prompt_tokens: 100, output_tokens: 50, abort_at: 0.05}\n"
    )
    out = tmp_path / "plan.json"
    args = ["plan", "--config", str(config), "--model", "seed", "--workload", str(workload), "--json", str(out)]
    assert main(args) == 0
    body = json.loads(out.read_text())
    assert (body["num_finished"], body["num_aborted"]) == (1, 1)


def test_poisson_arguments(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    common = ["plan", "--config", str(config), "--model", "seed", "--rate", "5", "--duration", "20"]
    sizes = ["--prompt-tokens", "200", "--output-tokens", "20", "--seed", "3", "--json", str(out)]
    assert main(common + sizes) == 0
    first = json.loads(out.read_text())
    assert first["output_tokens"] == 20 * first["num_requests"]
    assert first["num_requests"] == pytest.approx(5 * 20, abs=40)  # Poisson(100): 4 sigma
    assert main(common + sizes) == 0
    assert json.loads(out.read_text())["e2e"] == first["e2e"]  # same seed, same run


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "seed", "--rate", "5"], "--rate needs --duration, --prompt-tokens, --output-tokens"),
        (["--model", "steady", "--rate", "5", "--duration", "1"], "does not use engine 'scheduler'"),
        (["--model", "nope", "--rate", "5"], "no model named 'nope'"),
    ],
)
def test_errors_exit_2_with_one_line(
    config: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "--config", str(config), *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_broken_workload_entry_is_named(config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workload = tmp_path / "w.yml"
    workload.write_text("- {arrival: 0, prompt_tokens: 10, output_tokens: 1}\n- {arrival: 1}\n")
    assert main(["plan", "--config", str(config), "--model", "seed", "--workload", str(workload)]) == 2
    assert "request 1" in capsys.readouterr().err


def test_a_shared_system_prompt_reports_the_prefix_cache_hit_rate(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every request starts with the same 2,048 tokens (128 full blocks) then 100 of its own. The
    # cache holds 7,608 blocks, far more than the run needs, so nothing is evicted: after the
    # first request, each hits exactly 2,048 tokens (even one admitted in the same step).
    out = tmp_path / "plan.json"
    args = ["plan", "--config", str(config), "--model", "seed", "--rate", "5", "--duration", "20"]
    args += ["--prompt-tokens", "2148", "--output-tokens", "20", "--shared-prefix-tokens", "2048", "--json", str(out)]
    assert main(args) == 0
    body = json.loads(out.read_text())
    n = body["num_requests"]
    assert n > 50
    assert body["prefix_cache_queries"] == n * 2148
    assert body["prefix_cache_hits"] == (n - 1) * 2048
    assert body["prefix_cache_hit_rate"] == pytest.approx((n - 1) * 2048 / (n * 2148))
    table = capsys.readouterr().out
    assert f"{(n - 1) * 2048:,} of {n * 2148:,} prompt tokens hit the cache" in table
    # Without the shared prefix nothing is shared: queries, no hits.
    assert main([*args[:-2], "--shared-prefix-tokens", "0", "--json", str(out)]) == 0
    body = json.loads(out.read_text())
    assert (body["prefix_cache_queries"], body["prefix_cache_hits"]) == (n * 2148, 0)
