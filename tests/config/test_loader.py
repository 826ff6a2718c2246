"""models.yml parsing: profiles merge, defaults, and one-line errors naming file, entry and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmsim.config import load_models_config
from llmsim.errors import ConfigError
from llmsim.runtime import build_runtime, scheduler_params


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
        (
            "models: [{name: a, engine: fixed, lora: {max_loras: 2, max_cpu_loras: 1}}]",
            "models[0] (name 'a'): field 'lora': Value error, max_cpu_loras (1) must be >= max_loras (2).",
        ),
        (
            "models:\n  - {name: a, engine: fixed}\n  - {name: b, engine: fixed, lora: {adapters: [{name: a}]}}",
            "LoRA adapter 'a' conflicts with a served base model",
        ),
        (
            "models: [{name: a, engine: fixed, kv_events: {event_format: json}}]",
            "models[0] (name 'a'): field 'kv_events.event_format'",
        ),
        ("models: [{name: a, engine: fixed}\n", "invalid YAML: line"),
        ("[1, 2]", "expected a mapping"),
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


SCHEDULER = """
hardware:
  toy: {hbm_gib: 2, memory_bandwidth_gbps: 2000, peak_tflops: 400}
models:
  - name: a
    engine: scheduler
    hardware: toy
    context_length: 1024
    weights: {parameters_billions: 0.01}
    kv_cache: {bytes_per_token: 1024}
"""


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "    tokenizer: {path: missing/tokenizer.json}",
            "models[0] (name 'a'): field 'tokenizer.path': cannot load tokenizer",
        ),
        (
            "    kv_events: {enable_kv_cache_events: true, endpoint: 'tcp://*:not-a-port'}",
            "models[0] (name 'a'): field 'kv_events.endpoint': KV events: cannot bind tcp://*:not-a-port",
        ),
    ],
)
def test_runtime_checks_stop_before_anything_listens(tmp_path: Path, extra: str, expected: str) -> None:
    path = write(tmp_path, SCHEDULER + extra + "\n")
    with pytest.raises(ConfigError) as info:
        build_runtime(path)
    assert str(info.value).startswith(str(path) + ": ")
    assert expected in str(info.value)


def test_kv_events_need_a_kv_cache(tmp_path: Path) -> None:
    path = write(tmp_path, "models: [{name: f, engine: instant, kv_events: {enable_kv_cache_events: true}}]")
    with pytest.raises(
        ConfigError, match="models\\[0\\] \\(name 'f'\\): field 'kv_events': KV-cache events need engine 'scheduler'"
    ):
        build_runtime(path)


def test_prefix_caching_and_async_scheduling_default_on_as_in_vllm(tmp_path: Path) -> None:
    params = scheduler_params(load_models_config(write(tmp_path, SCHEDULER)), "a")
    assert params.enable_prefix_caching
    assert params.async_scheduling
    assert not params.enable_kv_cache_events
    assert params.lora is None


def test_the_readme_models_yml_example_is_valid(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("### models.yml") :]
    example = section[section.index("```yaml") + len("```yaml") : section.index("```", section.index("```yaml") + 7)]
    config = load_models_config(write(tmp_path, example))
    llama = config.model("llama-3.1-8b")
    assert llama.kv_events is not None
    assert llama.kv_events.enable_kv_cache_events
    assert llama.lora is not None
    assert [a.name for a in llama.lora.adapters] == ["sql-lora"]
    params = scheduler_params(config, "llama-3.1-8b")
    assert params.enable_prefix_caching
    assert params.lora is not None
    assert params.lora.load_s == 0.02
