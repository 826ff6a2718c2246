"""models.yml parsing: profiles merge, defaults, and one-line errors naming file, entry and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmsim.config import load_models_config
from llmsim.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "models.yml"
    p.write_text(text)
    return p


def test_embedded_default_has_fixed_and_scheduler_models() -> None:
    config = load_models_config()
    engines = {m.engine for m in config.models}
    assert {"fixed", "scheduler"} <= engines
    sched = next(m for m in config.models if m.engine == "scheduler")
    assert sched.hardware == "h100-80gb"
    assert sched.hardware in config.hardware


def test_profile_fills_fields_and_explicit_fields_win(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
models:
  - name: m
    engine: scheduler
    profile: llama-2-7b
    hardware: a100-80gb
    kv_cache: {block_size: 32}
""",
    )
    m = load_models_config(path).model("m")
    assert m.weights is not None
    assert m.kv_cache is not None
    # llama-2-7b: 32 layers x 32 heads x 128 dim x 2 (K, V) x 2 bytes
    assert m.kv_cache.bytes_per_token == 32 * 32 * 128 * 2 * 2
    assert m.kv_cache.block_size == 32
    assert m.weights.bytes == pytest.approx(6.74e9 * 2)
    assert m.context_length == 4096


def test_user_hardware_overrides_builtin(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
hardware:
  h100-80gb: {hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
models:
  - {name: m, engine: fixed, hardware: h100-80gb}
""",
    )
    assert load_models_config(path).hardware["h100-80gb"].memory_bandwidth_gbps == 3000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("models: [{name: a, engine: warp}]", "models[0] (name 'a'): field 'engine'"),
        (
            "models:\n  - {name: a, engine: fixed}\n  - {name: b, engine: scheduler, kv_cache: {bytes_per_token: 1024, block_size: 0}}",
            "models[1] (name 'b'): field 'kv_cache.block_size': Input should be greater than 0",
        ),
        ("models: [{name: a, engine: fixed, colour: red}]", "models[0] (name 'a'): field 'colour': unknown field"),
        (
            "models: [{name: a, engine: fixed, hardware: tpu}]",
            "models[0] (name 'a'): field 'hardware': unknown hardware 'tpu'",
        ),
        (
            "models: [{name: a, engine: fixed, profile: gpt-9}]",
            "models[0] (name 'a'): field 'profile': unknown model profile",
        ),
        ("models: [{engine: fixed}]", "models[0]: field 'name': required field is missing"),
        # A misspelt field is named as unknown (not as the field it leaves missing), with the known ones.
        (
            "models: [{nmae: a, engine: fixed}]",
            "models[0]: field 'nmae': unknown field (allowed: name, engine, profile, hardware, context_length,",
        ),
        (
            "models:\n  - {name: a, engine: fixed}\n  - {name: a, engine: instant}",
            "models[1] (name 'a'): field 'name': duplicate name 'a'",
        ),
        ("models: []", "field 'models': expected a non-empty list"),
        (
            "models: [{name: a, engine: fixed, legacy_metrics: [1]}]",
            "models[0] (name 'a'): field 'legacy_metrics': expected true or false, got list",
        ),
        (
            "hardware: {gpu: {hbm_gib: 0, memory_bandwidth_gbps: 1, peak_tflops: 1}}\nmodels: [{name: a, engine: fixed}]",
            "field 'hardware.gpu.hbm_gib': Input should be greater than 0",
        ),
        ("models: [{name: a, engine: fixed}\n", "invalid YAML: line 2, column 1"),
        ("models: [{name: a, engine: 'fi\x07xed'}]", "invalid YAML: line 1, column 31: unacceptable character #x0007"),
        (
            "models: [{name: a, engine: instant, embeddings: {dimensions: 0}}]",
            "models[0] (name 'a'): field 'embeddings.dimensions': Input should be greater than 0",
        ),
        ("[1, 2]", "expected a mapping"),
        ("", "expected a mapping with a 'models' list"),
    ],
)
def test_errors_name_file_entry_and_field(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_models_config(path)
    message = str(info.value)
    assert message.startswith(str(path) + ": ")
    assert expected in message
    assert "\n" not in message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read file"):
        load_models_config(tmp_path / "nope.yml")


def test_a_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "models.yml"
    # Latin-1 "é" (0xE9) after 22 bytes; UTF-8 would need a continuation byte where "," is.
    path.write_bytes(b"models:\n  - {name: caf\xe9, engine: instant}\n")
    with pytest.raises(ConfigError) as info:
        load_models_config(path)
    assert str(info.value) == f"{path}: not UTF-8 text: invalid continuation byte at byte 22 (line 2, column 15)"
