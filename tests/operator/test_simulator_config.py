"""The rendered models.yml is what llmsim's own loader accepts, with the numbers the spec gave."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest
import yaml

from llmsim.config import ModelsConfig
from llmsim.config.loader import parse_models_config
from llmsim_operator import crd
from llmsim_operator.conventions import MODELS_KEY, RESPONSES_KEY
from llmsim_operator.crd import MODELS
from llmsim_operator.simulator_config import config_data, config_hash, models_yaml
from llmsim_operator.simulator_schema import OMIT
from llmsim_operator.spec import InvalidSpec, parse_spec
from tests.operator.builders import NAMESPACE, faults_spec, full_spec, minimal_spec


def test_minimal_spec_loads_in_llmsim_with_the_profile_merged() -> None:
    sim = parse_spec("llama", NAMESPACE, minimal_spec())
    config = parse_models_config(models_yaml(sim), "models.yml")
    model = config.model("meta-llama/Llama-3.1-8B-Instruct")
    assert model.engine == "scheduler"
    assert model.hardware == "h100-80gb"
    assert model.weights is not None
    assert model.weights.parameters_billions == 8.03
    assert model.kv_cache is not None
    assert (model.kv_cache.bytes_per_token, model.kv_cache.block_size) == (131072, 16)
    assert model.kv_cache.gpu_memory_utilization == 0.9
    # The capacity both sides derive from these numbers is compared in test_capacity.py.


TIMING = (
    "efficiency.compute",
    "efficiency.memory",
    "latency.step_overhead_ms",
    "latency.step_overhead_per_sequence_ms",
    "latency.request_overhead_ms",
)


def effective_timing(config: ModelsConfig, name: str) -> dict[str, float]:
    model = config.model(name)
    assert model.latency is not None
    return {
        "efficiency.compute": model.efficiency.compute,
        "efficiency.memory": model.efficiency.memory,
        "latency.step_overhead_ms": model.latency.step_overhead_ms,
        "latency.step_overhead_per_sequence_ms": model.latency.step_overhead_per_sequence_ms,
        "latency.request_overhead_ms": model.latency.request_overhead_ms,
    }


def calibrated(hardware: str, profile: str) -> dict[str, float]:
    """The built-in calibration of a measured pair, read from llmsim's data file."""
    table = yaml.safe_load(resources.files("llmsim").joinpath("data", "calibrated_timing.yml").read_text())
    entry = table["pairs"][hardware][profile]
    return {knob: float(entry[knob]) for knob in TIMING}


def test_a_profile_and_a_gpu_alone_get_llmsims_calibrated_timing_in_the_pods() -> None:
    # The CR names a model profile and a GPU profile, no timing: the ConfigMap carries no knob, and the
    # pods' llmsim fills in its calibration of llama-3.1-8b on an H100 (fitted to a published vLLM sweep).
    sim = parse_spec("llama", NAMESPACE, minimal_spec())
    entry = yaml.safe_load(models_yaml(sim))["models"][0]
    assert "latency" not in entry
    assert "efficiency" not in entry
    config = parse_models_config(models_yaml(sim), "models.yml")
    name = "meta-llama/Llama-3.1-8B-Instruct"
    assert effective_timing(config, name) == calibrated("h100-80gb", "llama-3.1-8b")
    assert all(source.startswith("calibration data A1 ") for source in config.timing_sources(name).values())


def test_explicit_timing_in_the_cr_wins_knob_by_knob() -> None:
    spec = minimal_spec() | {
        "hardware": {"profile": "a100-40gb"},
        "model": {"name": "q", "profile": "qwen2.5-7b"},
        "efficiency": {"memory": 0.9},
        "latency": {"requestOverheadMs": 3, "stepOverheadPerSequenceMs": 0.1},
    }
    config = parse_models_config(models_yaml(parse_spec("q", NAMESPACE, spec)), "models.yml")
    expected = calibrated("a100-40gb", "qwen2.5-7b") | {
        "efficiency.memory": 0.9,
        "latency.request_overhead_ms": 3.0,
        "latency.step_overhead_per_sequence_ms": 0.1,
    }
    assert effective_timing(config, "q") == expected
    sources = config.timing_sources("q")
    assert [sources[k] == "the file" for k in TIMING] == [False, True, False, True, True]


def test_explicit_gpu_figures_get_no_calibration() -> None:
    # Figures of its own make a GPU llmsim has not calibrated ("custom"): the schema's defaults apply.
    spec = minimal_spec() | {"hardware": {"profile": "h100-80gb", "hbmGiB": 94}}
    config = parse_models_config(models_yaml(parse_spec("h", NAMESPACE, spec)), "models.yml")
    name = "meta-llama/Llama-3.1-8B-Instruct"
    assert config.model(name).hardware == "custom"
    assert config.model(name).latency is None
    assert (config.model(name).efficiency.compute, config.model(name).efficiency.memory) == (1.0, 1.0)
    assert set(config.timing_sources(name).values()) == {
        "default (hardware 'custom' is defined in the file, not the built-in profile)"
    }


def test_full_spec_loads_in_llmsim_with_every_field() -> None:
    sim = parse_spec("custom", NAMESPACE, full_spec())
    config = parse_models_config(models_yaml(sim), "models.yml")
    model = config.model("custom-13b")
    assert model.hardware == "custom"
    assert config.hardware["custom"].hbm_gib == 48
    assert config.hardware["custom"].peak_tflops == 362
    assert model.context_length == 8192
    assert model.weights is not None
    assert model.weights.bytes_per_parameter == 1
    assert model.kv_cache is not None
    assert model.kv_cache.block_size == 32
    assert model.kv_cache.gpu_memory_utilization == 0.85
    assert model.scheduler is not None
    assert (model.scheduler.max_batch_tokens, model.scheduler.max_num_sequences) == (4096, 64)
    assert model.latency is not None
    assert model.latency.step_overhead_ms == 1.5
    assert (model.efficiency.compute, model.efficiency.memory) == (0.6, 0.8)
    assert model.legacy_metrics


def test_fixed_engine_without_sizes_has_no_kv_cache_section() -> None:
    spec = {"model": {"name": "f"}, "engine": "fixed", "latency": {"ttftOverheadMs": 20, "itlMs": 15}}
    sim = parse_spec("fixed", NAMESPACE, spec)
    doc = yaml.safe_load(models_yaml(sim))
    assert "kv_cache" not in doc["models"][0]
    model = parse_models_config(models_yaml(sim), "models.yml").model("f")
    assert model.latency is not None
    assert model.latency.itl_ms == 15


def test_responses_are_a_second_key_only_when_given() -> None:
    sim = parse_spec("llama", NAMESPACE, minimal_spec())
    assert set(config_data(sim, None)) == {MODELS_KEY}
    assert config_data(sim, "responses: []\n")[RESPONSES_KEY] == "responses: []\n"


def test_hash_changes_with_any_byte_and_not_with_key_order() -> None:
    a = {"models.yml": "x: 1\n", "responses.yml": "r\n"}
    b = {"responses.yml": "r\n", "models.yml": "x: 1\n"}
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash({**a, "responses.yml": "r \n"})
    assert len(config_hash(a)) == 16


def test_faults_and_startup_load_in_llmsim_with_the_spec_numbers() -> None:
    sim = parse_spec("flaky", NAMESPACE, faults_spec())
    config = parse_models_config(models_yaml(sim), "models.yml")
    assert config.startup_seconds == 45
    faults = config.model("flaky").faults
    assert faults.seed == 42
    assert (faults.stall_ms, faults.slow_factor, faults.header_override) == (2500, 4, True)
    rates = faults.rates
    assert (rates.rate_limit, rates.server_error, rates.abort_mid_stream, rates.stall, rates.crash) == (
        0.05,
        0.01,
        0.02,
        0.1,
        0.001,
    )
    assert (rates.unavailable, rates.bad_request, rates.slow) == (0, 0, 0)


def test_no_faults_section_without_faults() -> None:
    for spec in (minimal_spec(), minimal_spec() | {"faults": {}}, minimal_spec() | {"faults": {"rates": {}}}):
        doc = yaml.safe_load(models_yaml(parse_spec("x", NAMESPACE, spec)))
        assert "faults" not in doc["models"][0]
        assert "startup_seconds" not in doc


def test_rates_adding_up_to_more_than_one_are_refused() -> None:
    spec = minimal_spec() | {"faults": {"rates": {"stall": 0.6, "slow": 0.5}}}
    with pytest.raises(InvalidSpec, match=r"faults\.rates add up to more than 1"):
        parse_spec("x", NAMESPACE, spec)


def sample(node: dict[str, Any]) -> Any:
    """A valid value of an OpenAPI node that is not its default (small numbers: everything still fits)."""
    if "enum" in node:
        # A one-value enum (kv_connector: NixlConnector) has no other value: its default it is.
        return next((v for v in node["enum"] if v != node.get("default")), node["enum"][0])
    kind = node["type"]
    if kind == "boolean":
        return not node.get("default", False)
    if kind == "object":
        return {key: sample(sub) for key, sub in node["properties"].items()}
    if kind == "array":
        return [sample(node["items"])]
    if kind == "string":
        return "s"
    if node.get("maximum") == 1:  # fractions and fault rates (eight of them add up to less than 1)
        return 0.1
    return node.get("minimum", 0) + 2


def spec_node(path: tuple[str, ...]) -> dict[str, Any]:
    node = crd.SPEC_SCHEMA
    for key in path:
        node = node["properties"][key]
    return node


def subset(expected: Any, actual: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and subset(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(map(subset, expected, actual))
    return bool(expected == actual)


def test_every_bound_spec_field_reaches_llmsim() -> None:
    # One spec setting every field bound to models.yml (crd.MODELS_FIELDS) to a value other than its
    # default; llmsim's loader must read each one back at the binding's place.
    spec: dict[str, Any] = {}
    values = []
    for binding in MODELS.bindings:
        # The engine stays the scheduler: disaggregation and data parallelism need it.
        if binding.spec in {("model", "name"), ("model", "profile"), ("engine",)}:
            continue
        values.append((binding, sample(spec_node(binding.spec))))
        *parents, key = binding.spec
        node = spec
        for parent in parents:
            node = node.setdefault(parent, {})
        node[key] = values[-1][1]
    spec["model"]["name"] = "m"
    # A timeline phase takes set or clear, replicas or count: keep one of each pair (in place, so the
    # value compared below is the one sent).
    (phase,) = spec["faults"]["timeline"]["phases"]
    del phase["clear"], phase["count"]
    # The decode role's models.yml: the disaggregation fields are rendered only into a role's.
    config = parse_models_config(models_yaml(parse_spec("x", NAMESPACE, spec), "decode"), "models.yml").model_dump()
    for binding, value in values:
        if binding.convert(value) is OMIT:
            continue
        actual: Any = config if binding.document else config["models"][0]
        for key in binding.target:
            actual = actual[key]
        assert subset(binding.convert(value), actual), f"spec.{'.'.join(binding.spec)}: {value!r} -> {actual!r}"
    sections = {"weights", "kv_cache", "scheduler", "latency", "efficiency", "faults", "lora", "startup_seconds"}
    sections |= {"kv_transfer", "data_parallel"}
    assert sections <= {binding.target[0] for binding, _ in values}


def test_a_fault_timeline_in_the_spec_reaches_llmsim_with_its_phases() -> None:
    timeline = {
        "start": "admin",
        "seed": 7,
        "phases": [
            {"name": "one-slow", "at": 30, "replicas": [1], "set": {"slowFactor": 3, "rates": {"slow": 1}}},
            {"name": "one-down", "at": 60, "count": 1, "set": {"rates": {"unavailable": 1}}},
            {"name": "one-unhealthy", "at": 70, "replicas": [2], "set": {"unhealthy": True}},
            {"name": "recovered", "at": 90, "clear": True},
        ],
    }
    sim = parse_spec("phased", NAMESPACE, minimal_spec() | {"faults": {"seed": 5, "timeline": timeline}})
    faults = parse_models_config(models_yaml(sim), "models.yml").models[0].faults
    assert faults.seed == 5
    assert faults.timeline is not None
    assert (faults.timeline.start, faults.timeline.seed) == ("admin", 7)
    slow, down, unhealthy, recovered = faults.timeline.phases
    assert (slow.name, slow.at, slow.replicas, slow.count) == ("one-slow", 30.0, [1], None)
    assert slow.set is not None
    assert (slow.set.slow_factor, slow.set.rates.slow) == (3.0, 1.0)
    assert (down.at, down.count, down.set is not None and down.set.rates.unavailable) == (60.0, 1, 1.0)
    assert unhealthy.set is not None
    assert (unhealthy.set.unhealthy, slow.set.unhealthy) == (True, False)
    assert (recovered.at, recovered.clear, recovered.set) == (90.0, True, None)
