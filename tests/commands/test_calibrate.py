"""``llmsim calibrate``: bench result files in, a loadable models.yml and a table out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmsim.calibration import Measurement, TimingKnobs, predict
from llmsim.cli import main
from llmsim.config import load_models_config
from llmsim.runtime import scheduler_params

MODELS = """
models:
  - name: h100
    engine: scheduler
    profile: llama-3.1-8b
    hardware: h100-80gb
    context_length: 16384
    scheduler: {max_num_sequences: 64}
    latency: {step_overhead_ms: 2.0, step_overhead_per_sequence_ms: 0.0, request_overhead_ms: 3.0}
    efficiency: {compute: 0.6, memory: 0.8}
"""

# (concurrency, prompt, output, requests): a compute-bound prefill, short decodes, long contexts.
POINTS = [(1, 4096, 16, 4), (1, 128, 64, 4), (8, 512, 64, 16), (32, 1024, 64, 64)]


def write_bench_results(tmp_path: Path, knobs: TimingKnobs) -> list[Path]:
    """vllm bench serve result files as a deployment timed like llmsim with ``knobs`` would write them."""
    config = load_models_config(tmp_path / "models.yml")
    params = knobs.apply(scheduler_params(config, "h100", str(tmp_path / "models.yml")))
    paths = []
    for c, prompt, output, n in POINTS:
        p = predict(params, Measurement("x", c, None, n, prompt, output))
        body = {
            "backend": "openai",
            "model_id": "meta-llama/Llama-3.1-8B-Instruct",
            "request_rate": "inf",
            "burstiness": 1.0,
            "max_concurrency": c,
            "completed": n,
            "total_input_tokens": prompt * n,
            "total_output_tokens": output * n,
            "median_ttft_ms": p.ttft_p50 * 1000,
            "median_tpot_ms": p.tpot_p50 * 1000,
            "median_itl_ms": p.itl_p50 * 1000,
        }
        path = tmp_path / f"sweep_c{c}_p{prompt}.json"
        path.write_text(json.dumps(body))
        paths.append(path)
    return paths


def test_calibrate_recovers_the_knobs_and_writes_a_loadable_models_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "models.yml").write_text(MODELS)
    truth = TimingKnobs(
        compute=0.5, memory=0.7, step_overhead_ms=1.1, step_overhead_per_sequence_ms=0.04, request_overhead_ms=6.0
    )
    files = write_bench_results(tmp_path, truth)
    out = tmp_path / "calibrated.yml"
    report = tmp_path / "fit.json"
    args = ["calibrate", "--config", str(tmp_path / "models.yml"), "--model", "h100", "--name", "h100-fitted"]
    assert main([*args, *map(str, files), "--out", str(out), "--json", str(report)]) == 0
    table = capsys.readouterr().out
    assert "efficiency.memory" in table
    assert "sweep_c32_p1024.json" in table
    assert f"wrote {out}" in table
    # The written file loads and gives the model back with the fitted knobs, within 1 %.
    text = out.read_text()
    assert text.startswith("# Fitted by `llmsim calibrate` to 4 points")
    fitted = load_models_config(out)
    model = fitted.model("h100-fitted")
    assert model.efficiency.compute == pytest.approx(0.5, rel=0.01)
    assert model.efficiency.memory == pytest.approx(0.7, rel=0.01)
    assert model.latency is not None
    assert model.latency.step_overhead_ms == pytest.approx(1.1, rel=0.01)
    assert model.latency.step_overhead_per_sequence_ms == pytest.approx(0.04, rel=0.01)
    assert model.latency.request_overhead_ms == pytest.approx(6.0, rel=0.01)
    # Everything else is the base model's.
    assert model.scheduler is not None
    assert model.scheduler.max_num_sequences == 64
    assert model.context_length == 16384
    body = json.loads(report.read_text())
    assert [k["status"] for k in body["knobs"]] == ["fitted"] * 5
    assert body["rms_error"] < 1e-3
    assert all(abs(e) < 1e-3 for p in body["points"] for e in p["error"].values() if e is not None)


def test_published_h100_figures_from_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = Path(__file__).parents[1] / "calibration" / "data" / "h100-llama-3.1-8b-vllm-0.21.csv"
    out = tmp_path / "h100.yml"
    args = ["calibrate", "--profile", "llama-3.1-8b", "--hardware", "h100-80gb", str(data), "--metrics", "tpot"]
    assert main([*args, "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "not fitted: client-bound" in table
    model = load_models_config(out).model("llama-3.1-8b")
    assert 0.70 < model.efficiency.memory < 0.76


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--profile", "llama-3.1-8b"], "--profile needs --hardware"),
        (["--model", "h100", "--profile", "x"], "give --model (of --config), or --profile with --hardware"),
        (["--model", "h100", "--fix", "efficiency.memory"], "--fix: expected KNOB=VALUE"),
        (["--model", "nope"], "no model named 'nope'"),
    ],
)
def test_errors_exit_2_with_one_line(
    tmp_path: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "models.yml").write_text(MODELS)
    data = tmp_path / "m.csv"
    data.write_text("concurrency,prompt_tokens,output_tokens,tpot_p50_ms\n1,50,128,6.5\n")
    assert (
        main(
            ["calibrate", "--config", str(tmp_path / "models.yml"), str(data), *extra, "--out", str(tmp_path / "o.yml")]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_the_cli_starts_without_loading_scipy() -> None:
    # scipy is an optional extra the server image leaves out: `llmsim serve` must not need it.
    code = "import sys, llmsim.cli; sys.exit(any(m.split('.')[0] in ('scipy', 'numpy') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
