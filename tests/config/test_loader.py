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
        (
            "models: [{name: a, engine: fixed, lora: {max_loras: 2, max_cpu_loras: 1}}]",
            "models[0] (name 'a'): field 'lora': max_cpu_loras (1) must be >= max_loras (2).",
        ),
        (
            "models:\n  - {name: a, engine: fixed}\n  - {name: b, engine: fixed, lora: {adapters: [{name: a}]}}",
            "models[1] (name 'b'): field 'lora.adapters[0].name': LoRA adapter 'a' has the name of a served model",
        ),
        (
            "models: [{name: a, engine: fixed, kv_events: {event_format: json}}]",
            "models[0] (name 'a'): field 'kv_events.event_format'",
        ),
        (
            "models: [{name: a, engine: scheduler, weights: {parameters_billions: 46.7, experts: 8}}]",
            "models[0] (name 'a'): field 'weights': experts and experts_per_token go together",
        ),
        (
            "models: [{name: a, engine: scheduler, weights: {parameters_billions: 46.7, experts: 8, experts_per_token: 2}}]",
            "models[0] (name 'a'): field 'weights': a mixture of experts needs active_parameters_billions below",
        ),
        (
            "models: [{name: a, engine: scheduler, weights: {parameters_billions: 46.7, "
            "active_parameters_billions: 12.9, experts: 8, experts_per_token: 8}}]",
            "models[0] (name 'a'): field 'weights': experts_per_token (8) must be < experts (8)",
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


def test_faults_and_startup_seconds_parse_with_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
startup_seconds: 12.5
models:
  - name: a
    engine: fixed
    faults: {seed: 42, rates: {rate_limit: 0.1, stall: 0.25}, stall_ms: 300, header_override: true}
  - {name: b, engine: fixed}
""",
    )
    config = load_models_config(path)
    assert config.startup_seconds == 12.5
    a = config.model("a").faults
    assert (a.seed, a.rates.rate_limit, a.rates.stall, a.rates.crash) == (42, 0.1, 0.25, 0.0)
    assert (a.stall_ms, a.slow_factor, a.header_override) == (300, 2.0, True)
    assert a.enabled
    b = config.model("b").faults
    assert not b.enabled
    assert load_models_config().startup_seconds == 0


@pytest.mark.parametrize(
    ("faults", "expected"),
    [
        ("{rates: {rate_limit: 1.5}}", "field 'faults.rates.rate_limit': Input should be less than or equal to 1"),
        ("{rates: {teapot: 0.5}}", "field 'faults.rates.teapot': unknown field"),
        (
            "{rates: {server_error: 0.6, unavailable: 0.5}}",
            "field 'faults.rates': the rates add up to 1.1",
        ),
        ("{slow_factor: 0.5}", "field 'faults.slow_factor': Input should be greater than or equal to 1"),
        ("{stall_ms: -1}", "field 'faults.stall_ms': Input should be greater than or equal to 0"),
        ("{stall_ms: 1e308}", "field 'faults.stall_ms': Input should be less than or equal to 3600000"),
        ("{stall_ms: .inf}", "field 'faults.stall_ms': Input should be a finite number"),
        ("{slow_factor: 1e9}", "field 'faults.slow_factor': Input should be less than or equal to 1000"),
        ("{rates: {stall: .nan}}", "field 'faults.rates.stall': Input should be a finite number"),
        ("{seed: 9223372036854775808}", "field 'faults.seed': Input should be less than 9223372036854775808"),
    ],
)
def test_fault_errors_name_the_entry_and_field(tmp_path: Path, faults: str, expected: str) -> None:
    path = write(tmp_path, f"models:\n  - {{name: a, engine: fixed, faults: {faults}}}\n")
    with pytest.raises(ConfigError) as info:
        load_models_config(path)
    assert f"{path}: models[0] (name 'a'): {expected}" in str(info.value)
    assert "\n" not in str(info.value)


def test_rates_adding_up_to_exactly_one_are_accepted(tmp_path: Path) -> None:
    # 0.1 + 0.2 + 0.7 is 1.0000000000000002 in binary floating point: still one fault per request.
    path = write(
        tmp_path, "models:\n  - {name: a, engine: fixed, faults: {rates: {rate_limit: 0.1, stall: 0.2, slow: 0.7}}}\n"
    )
    assert load_models_config(path).model("a").faults.rates.slow == 0.7


def test_negative_startup_seconds_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "startup_seconds: -1\nmodels: [{name: a, engine: fixed}]\n")
    with pytest.raises(ConfigError, match="field 'startup_seconds': Input should be greater than or equal to 0"):
        load_models_config(path)


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


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("engine: fixed, kv_transfer: {kv_role: kv_producer}", "kv_transfer needs engine: scheduler"),
        ("engine: instant, data_parallel: {size: 2}", "data_parallel.size > 1 needs engine: scheduler"),
        ("engine: scheduler, data_parallel: {size: 2, rank: 2}", "rank (2) must be < size (2)"),
    ],
)
def test_pd_and_data_parallel_refusals_name_the_entry(tmp_path: Path, extra: str, expected: str) -> None:
    path = write(tmp_path, f"version: 1\nmodels:\n  - {{name: m, {extra}}}\n")
    with pytest.raises(ConfigError) as info:
        load_models_config(path)
    message = str(info.value)
    assert "models[0] (name 'm')" in message
    assert expected in message
    assert "\n" not in message


@pytest.mark.parametrize("layout", ["{size: 2}", "{size: 2, load_balancing: external}", "{size: 2, rank: 1}"])
def test_pd_with_ranks_behind_one_port_a_port_or_a_server_per_rank_loads(tmp_path: Path, layout: str) -> None:
    path = write(
        tmp_path,
        f"version: 1\nmodels:\n  - {{name: m, engine: scheduler, kv_transfer: {{kv_role: kv_producer}}, "
        f"data_parallel: {layout}}}\n",
    )
    model = load_models_config(path).models[0]
    assert model.kv_transfer is not None
    assert model.data_parallel.size == 2
