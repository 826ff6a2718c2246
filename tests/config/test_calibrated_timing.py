"""Built-in timing: a model that names a profile and a GPU gets the knobs fitted to published vLLM runs.

Expected values are read from the data file (llmsim/data/calibrated_timing.yml) and the published sweeps
(tests/calibration/data), never from the loader's output; the derivation rule is re-applied here by hand.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmsim.cli import main
from llmsim.config import ModelConfig, ModelsConfig, load_models_config
from llmsim.config.calibrated_timing import TIMING_KNOBS as KNOBS
from llmsim.config.loader import parse_models_config
from llmsim.fleet import FleetRequest, simulate
from llmsim.runtime import scheduler_params


def data_file(name: str) -> Any:
    return yaml.safe_load(resources.files("llmsim").joinpath("data", name).read_text())


TABLE = data_file("calibrated_timing.yml")
HARDWARE = data_file("hardware.yml")
PROFILES = data_file("model_profiles.yml")


def knobs(model: ModelConfig) -> dict[str, float]:
    latency = model.latency
    assert latency is not None
    return {
        "efficiency.compute": model.efficiency.compute,
        "efficiency.memory": model.efficiency.memory,
        "latency.step_overhead_ms": latency.step_overhead_ms,
        "latency.step_overhead_per_sequence_ms": latency.step_overhead_per_sequence_ms,
        "latency.request_overhead_ms": latency.request_overhead_ms,
    }


def one_model(entry: str) -> ModelsConfig:
    return parse_models_config(f"models:\n  - {entry}\n", "models.yml")


def weight_bytes(profile: str) -> float:
    w = PROFILES[profile]["weights"]
    return float(w["parameters_billions"]) * 1e9 * float(w.get("bytes_per_parameter", 2))


def donor(profile: str, hardware: str) -> tuple[str, str]:
    """The measured pair whose knobs ``profile`` on ``hardware`` takes, by the rule the data file states."""
    gpu = hardware if TABLE["gpus"][hardware] == "calibrated" else TABLE["gpus"][hardware]["from"]
    measured = TABLE["pairs"][gpu]
    if profile in measured:
        return gpu, profile
    return gpu, min(sorted(measured), key=lambda m: abs(math.log(weight_bytes(m) / weight_bytes(profile))))


def test_a_profile_on_its_gpu_gets_the_knobs_fitted_to_its_sweep() -> None:
    config = one_model("{name: m, engine: scheduler, profile: qwen2.5-7b, hardware: a100-40gb}")
    entry = TABLE["pairs"]["a100-40gb"]["qwen2.5-7b"]
    assert knobs(config.model("m")) == {k: pytest.approx(entry[k]) for k in KNOBS}
    sources = config.timing_sources("m")
    assert set(sources.values()) == {"calibration data A4 (qwen2.5-7b on a100-40gb, vLLM 0.20.1)"}


@pytest.mark.parametrize("hardware", list(HARDWARE))
@pytest.mark.parametrize("profile", list(PROFILES))
def test_every_built_in_pair_has_timing_and_says_where_it_came_from(profile: str, hardware: str) -> None:
    config = one_model(f"{{name: m, engine: scheduler, profile: {profile}, hardware: {hardware}}}")
    gpu, model = donor(profile, hardware)
    entry = TABLE["pairs"][gpu][model]
    assert knobs(config.model("m")) == {k: pytest.approx(entry[k]) for k in KNOBS}
    dataset = TABLE["datasets"][entry["data"]]
    fitted_to = f"calibration data {entry['data']} ({model} on {gpu}, vLLM {dataset['vllm']})"
    for knob, source in config.timing_sources("m").items():
        if (gpu, model) == (hardware, profile):
            assert source.startswith(fitted_to)
        else:
            # Derived: it says from which pair, and why (the donor GPU's reason, the nearest model).
            assert source.startswith(f"derived from {model} on {gpu} (")
            assert fitted_to in source
            if gpu != hardware:
                assert TABLE["gpus"][hardware]["why"] in source
            if model != profile:
                assert f"{model} is the calibrated model nearest to {profile} in weight bytes" in source
        held = entry.get("held", {})
        assert (held[knob] in source) if knob in held else ("held at" not in source)


def test_every_measured_pair_names_its_published_source() -> None:
    sweeps = yaml.safe_load((Path(__file__).parents[1] / "calibration" / "data" / "sweeps.yml").read_text())
    by_id = {s["id"]: s for s in sweeps["sweeps"]}
    assert set(TABLE["datasets"]) == set(by_id)
    for name, dataset in TABLE["datasets"].items():
        sweep = by_id[name]
        assert (dataset["profile"], dataset["hardware"], dataset["source"]) == (
            sweep["profile"],
            sweep["hardware"],
            sweep["source"],
        )
        assert (Path(__file__).parents[2] / dataset["data"]).exists()
        assert TABLE["pairs"][dataset["hardware"]][dataset["profile"]]["data"] == name
    # Every built-in GPU is calibrated or derived from a calibrated one.
    assert set(TABLE["gpus"]) == set(HARDWARE)
    for how in TABLE["gpus"].values():
        assert how == "calibrated" or TABLE["gpus"][how["from"]] == "calibrated"


def test_fields_the_file_sets_win_knob_by_knob() -> None:
    config = one_model(
        "{name: m, engine: scheduler, profile: llama-3.1-8b, hardware: h100-80gb,"
        " efficiency: {memory: 0.5}, latency: {request_overhead_ms: 0, step_overhead_ms: 1.5}}"
    )
    entry = TABLE["pairs"]["h100-80gb"]["llama-3.1-8b"]
    expected = {k: entry[k] for k in KNOBS} | {
        "efficiency.memory": 0.5,
        "latency.request_overhead_ms": 0.0,
        "latency.step_overhead_ms": 1.5,
    }
    assert knobs(config.model("m")) == pytest.approx(expected)
    sources = config.timing_sources("m")
    assert [k for k in KNOBS if sources[k] == "the file"] == [
        "efficiency.memory",
        "latency.step_overhead_ms",
        "latency.request_overhead_ms",
    ]


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        (
            "{name: m, engine: scheduler, hardware: h100-80gb, weights: {parameters_billions: 8},"
            " kv_cache: {bytes_per_token: 131072}}",
            "no model profile",
        ),
        (
            "{name: m, engine: scheduler, profile: llama-3.1-8b, hardware: h100-80gb}\n"
            "hardware:\n  h100-80gb: {hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}",
            "hardware 'h100-80gb' is defined in the file, not the built-in profile",
        ),
    ],
)
def test_without_a_built_in_profile_and_gpu_the_schema_defaults_apply(entry: str, why: str) -> None:
    config = one_model(entry)
    model = config.model("m")
    assert (model.efficiency.compute, model.efficiency.memory) == (1.0, 1.0)
    assert model.latency is None
    assert set(config.timing_sources("m").values()) == {f"default ({why})"}


def test_other_engines_get_no_step_cost() -> None:
    config = one_model("{name: f, engine: fixed, profile: llama-3.1-8b, hardware: h100-80gb}")
    assert config.model("f").latency is None
    assert config.timing_sources("f") == {}


def test_the_embedded_model_and_a_profile_alone_decode_at_the_published_h100_tpot(tmp_path: Path) -> None:
    # The defect this guards: the embedded llama-3.1-8b decoded at 8.0 ms, a profile alone at 4.84 ms.
    # Both must now time alike, at the published 6.48 ms (vLLM 0.21, one H100, one stream), and the
    # embedded file carries no timing of its own.
    embedded = resources.files("llmsim").joinpath("data", "models.yml").read_text()
    llama = next(m for m in yaml.safe_load(embedded)["models"] if m["name"] == "llama-3.1-8b")
    assert "latency" not in llama
    assert "efficiency" not in llama
    plain = tmp_path / "models.yml"
    plain.write_text(
        "models:\n  - {name: llama-3.1-8b, engine: scheduler, profile: llama-3.1-8b, hardware: h100-80gb}\n"
    )
    tpots = []
    for config in (load_models_config(), load_models_config(plain)):
        (r,) = simulate(scheduler_params(config, "llama-3.1-8b"), [FleetRequest.of(0.0, 50, 128)]).requests
        tpots.append((r.token_times[-1] - r.token_times[0]) / 127)
        # TTFT: the request overhead, then one step prefills the 50 tokens (published: 13.98 ms).
        assert r.ttft == pytest.approx(13.98e-3, rel=0.01)
    assert tpots[0] == tpots[1]
    assert tpots[0] == pytest.approx(6.48e-3, rel=0.01)


def test_check_prints_every_knob_with_its_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "models.yml"
    path.write_text(
        "models:\n"
        "  - {name: a, engine: scheduler, profile: llama-2-13b, hardware: a100-80gb, context_length: 4096,"
        " latency: {step_overhead_ms: 1}}\n"
        "  - {name: i, engine: instant}\n"
    )
    assert main(["check", "--config", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index("  timing (value: source)")
    lines = out[start + 1 : start + 6]
    assert [line.split()[0] for line in lines] == list(KNOBS)
    entry = TABLE["pairs"]["a100-40gb"]["llama-3.1-8b"]
    for line, knob in zip(lines, KNOBS, strict=True):
        value = float(line.split()[1].rstrip(":"))
        if knob == "latency.step_overhead_ms":
            assert (value, line.split(": ", 1)[1]) == (1.0, "the file")
        else:
            assert value == pytest.approx(entry[knob], rel=1e-3)
            assert "derived from llama-3.1-8b on a100-40gb (a100-80gb takes a100-40gb's knobs" in line
    # The instant engine has no step cost to show; the legend names each cited data set's publication.
    assert out[start + 6].startswith("i: ")
    assert out[start + 7] == "calibration data:"
    legend = out[out.index("calibration data:") + 1 :]
    assert [line.split(":")[0].strip() for line in legend] == ["A4", "A2"]
    assert TABLE["datasets"]["A2"]["source"] in legend[1]
