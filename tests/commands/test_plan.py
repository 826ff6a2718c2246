"""``llmsim plan`` on one replica: workload files, Poisson arguments, the table, the JSON and the errors.

One replica is a fleet of one: the same table (without the fleet's row) and the same JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmsim.cli import main
from tests.engine.scheduler.builders import roofline

# The reference example model: 7,609 KV blocks.
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
    for label in ("1 replica of seed", "TTFT", "ITL", "E2E", "queue", "throughput", "7,609 blocks", "speed-up"):
        assert label in table
    # One replica: its row, no fleet row, no balance between replicas.
    assert "\nseed/0 " in table
    assert "\nfleet " not in table
    assert "imbalance" not in table
    # The test suite runs the source (tests/fleet/test_compiled_core.py runs the compiled copy).
    assert table.rstrip().endswith("x real time (pure Python core)")
    body = json.loads(out.read_text())
    summary = body["summary"]
    assert summary["num_requests"] == 1
    assert summary["output_tokens"] == 3
    (replica,) = summary["replicas"]
    # 7,609 blocks, one of them vLLM's null block.
    assert replica["kv_total_blocks"] == 7609 - 1
    assert summary["ttft"]["p50"] == pytest.approx(roofline(16, 16), rel=1e-12)
    assert summary["itl"]["p50"] == pytest.approx((roofline(1, 17) + roofline(1, 18)) / 2, rel=1e-12)
    assert summary["num_preemptions"] == 0
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
    summary = json.loads(out.read_text())["summary"]
    assert (summary["num_finished"], summary["num_aborted"]) == (1, 1)


def test_poisson_arguments(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    common = ["plan", "--config", str(config), "--model", "seed", "--rate", "5", "--duration", "20"]
    sizes = ["--prompt-tokens", "200", "--output-tokens", "20", "--seed", "3", "--json", str(out)]
    assert main(common + sizes) == 0
    first = json.loads(out.read_text())["summary"]
    assert first["output_tokens"] == 20 * first["num_requests"]
    assert first["num_requests"] == pytest.approx(5 * 20, abs=40)  # Poisson(100): 4 sigma
    assert main(common + sizes) == 0
    assert json.loads(out.read_text())["summary"]["e2e"] == first["e2e"]  # same seed, same run


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
    body = json.loads(out.read_text())["summary"]
    n = body["num_requests"]
    assert n > 50
    assert body["prefix_query_tokens"] == n * 2148
    assert body["prefix_hit_tokens"] == (n - 1) * 2048
    assert body["prefix_hit_rate"] == pytest.approx((n - 1) * 2048 / (n * 2148))
    table = capsys.readouterr().out
    assert f"{(n - 1) * 2048:,} of {n * 2148:,} prompt tokens hit the cache" in table
    # Without the shared prefix nothing is shared: queries, no hits.
    assert main([*args[:-2], "--shared-prefix-tokens", "0", "--json", str(out)]) == 0
    body = json.loads(out.read_text())["summary"]
    assert (body["prefix_query_tokens"], body["prefix_hit_tokens"]) == (n * 2148, 0)


def test_one_replica_and_a_fleet_write_the_same_json_shape(config: Path, tmp_path: Path) -> None:
    workload = tmp_path / "w.jsonl"
    workload.write_text('{"arrival": 0, "prompt_tokens": 16, "output_tokens": 3}\n')
    args = ["plan", "--config", str(config), "--model", "seed", "--workload", str(workload), "--json"]
    assert main([*args, str(tmp_path / "one.json")]) == 0
    assert main([*args, str(tmp_path / "two.json"), "--replicas", "2"]) == 0
    one, two = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("one", "two"))

    def keys(value: object) -> object:
        if isinstance(value, dict):
            return {k: keys(v) for k, v in value.items()}
        if isinstance(value, list):
            return [keys(v) for v in value[:1]]
        return None

    assert keys(one) == keys(two)
    assert (one["summary"]["num_replicas"], two["summary"]["num_replicas"]) == (1, 2)


LORA_MODELS = MODELS.replace(
    "    scheduler: {max_batch_tokens: 8192, max_num_sequences: 64}\n",
    "    scheduler: {max_batch_tokens: 8192, max_num_sequences: 64}\n"
    "    lora: {max_loras: 1, adapters: [{name: sql-lora, path: /adapters/sql}]}\n",
    1,
)
ADAPTER_TRACE = (
    '{"arrival": 0, "prompt_tokens": 16, "output_tokens": 3}\n'
    '{"arrival": 0.01, "prompt_tokens": 900, "output_tokens": 40, "adapter": "sql-lora"}\n'
)


@pytest.mark.parametrize("target", [["--model", "seed"], ["--model", "seed", "--replicas", "2"]])
def test_an_adapter_no_replica_serves_is_an_error_naming_file_line_and_adapter(
    config: Path, tmp_path: Path, target: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # vLLM answers 404 to a request for a model or adapter it does not serve.
    workload = tmp_path / "w.jsonl"
    workload.write_text(ADAPTER_TRACE)
    assert main(["plan", "--config", str(config), *target, "--workload", str(workload)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"llmsim plan: {workload}: line 2: field 'adapter': unknown LoRA adapter 'sql-lora' (served: none)\n"
    )


def test_a_served_adapter_runs_on_its_replica(tmp_path: Path) -> None:
    config = tmp_path / "models.yml"
    config.write_text(LORA_MODELS)
    workload = tmp_path / "w.jsonl"
    workload.write_text(ADAPTER_TRACE)
    out = tmp_path / "plan.json"
    args = ["plan", "--config", str(config), "--model", "seed", "--workload", str(workload), "--json", str(out)]
    assert main(args) == 0
    assert json.loads(out.read_text())["summary"]["num_finished"] == 2
