"""The CRD: one source of truth, a valid CustomResourceDefinition, a structural schema, examples that pass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from llmsim.config.json_schema import models_json_schema
from llmsim.config.schema import MAX_SLOW_FACTOR, MAX_STALL_MS
from llmsim.llm.loader import parse_responses
from llmsim_operator import crd
from llmsim_operator.crd import custom_resource_definition
from llmsim_operator.defaulting import apply_defaults
from llmsim_operator.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
CRD_COPIES = [
    ROOT / "crds" / "llmsim.io_llmsimulators.yaml",
    ROOT / "charts" / "llmsim-operator" / "crds" / "llmsim.io_llmsimulators.yaml",
]


def version() -> dict[str, Any]:
    (v,) = custom_resource_definition()["spec"]["versions"]
    assert isinstance(v, dict)
    return v


def schema_nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from schema_nodes(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_nodes(node["additionalProperties"], f"{path}{{}}")


def validator() -> jsonschema.Draft4Validator:
    # apiextensions' dialect is OpenAPI v3 / draft 4 (boolean exclusiveMinimum); x-kubernetes-* are ignored.
    return jsonschema.Draft4Validator(version()["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize("path", CRD_COPIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_yaml_copies_equal_the_python_source(path: Path) -> None:
    assert path.exists(), f"{path} missing: run `make generate`"
    assert yaml.safe_load(path.read_text()) == custom_resource_definition(), f"{path} is stale: run `make generate`"


def test_is_a_valid_custom_resource_definition() -> None:
    kubernetes_validate.validate(custom_resource_definition(), "1.28.0", strict=True)


def test_names_and_subresources() -> None:
    spec = custom_resource_definition()["spec"]
    assert spec["group"] == "llmsim.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "LLMSimulator"
    assert spec["names"]["shortNames"] == ["llmsim"]
    v = version()
    assert v["name"] == "v1alpha1"
    assert v["subresources"]["status"] == {}
    assert v["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    columns = [(c["name"], c["jsonPath"]) for c in v["additionalPrinterColumns"]]
    assert columns == [
        ("Model", ".spec.model.name"),
        ("Hardware", ".spec.hardware.profile"),
        ("Engine", ".spec.engine"),
        ("Ready", ".status.ready"),
        ("Prefill", ".status.roles.prefill.ready"),
        ("GPUs", ".status.gpus"),
        ("Age", ".metadata.creationTimestamp"),
    ]
    # Disaggregation and data parallelism in `kubectl get -o wide` only.
    assert [c["name"] for c in v["additionalPrinterColumns"] if c.get("priority")] == ["Prefill", "GPUs"]


def test_schema_is_structural_and_documented() -> None:
    root = version()["schema"]["openAPIV3Schema"]
    for path, node in schema_nodes(root):
        if node.get("x-kubernetes-int-or-string"):
            continue
        assert "type" in node, f"{path or '<root>'} has no type"
        if path.startswith((".spec", ".status")) and path.count("{") == 0:
            assert node.get("description"), f"{path} has no description (kubectl explain)"


def test_defaults_validate_against_their_own_schema() -> None:
    for path, node in schema_nodes(version()["schema"]["openAPIV3Schema"]):
        if "default" in node:
            # kubernetes' Python client sends "" as null, which the API server refuses in a CRD.
            assert node["default"] != "", f"{path}: an empty default"
            errors = list(jsonschema.Draft4Validator(node).iter_errors(node["default"]))
            assert not errors, f"{path}: default {node['default']!r}: {errors[0].message}"


def test_every_cel_rule_is_a_declared_rule_with_its_python_twin() -> None:
    # The operator finds each rule's twin by its CEL text (rules.broken_rule): a rule written into the
    # schema by hand, without a Rule, fails here.
    cel = [
        r["rule"]
        for _, node in schema_nodes(version()["schema"]["openAPIV3Schema"])
        for r in node.get("x-kubernetes-validations", [])
    ]
    assert sorted(cel) == sorted(rule.cel() for rule in crd.RULES)
    assert len(crd.RULES) == 9
    assert {r.message for r in crd.RULES} == {
        r["message"]
        for _, node in schema_nodes(version()["schema"]["openAPIV3Schema"])
        for r in node.get("x-kubernetes-validations", [])
    }


SIMULATOR_EXAMPLES = [p for p in EXAMPLES if yaml.safe_load(p.read_text()).get("kind") == "LLMSimulator"]


@pytest.mark.parametrize("path", SIMULATOR_EXAMPLES, ids=lambda p: p.name)
def test_examples_pass_schema_and_operator_checks(path: Path) -> None:
    obj = yaml.safe_load(path.read_text())
    validator().validate(obj)
    defaulted = apply_defaults(version()["schema"]["openAPIV3Schema"], obj)
    validator().validate(defaulted)
    sim = parse_spec(obj["metadata"]["name"], "default", obj["spec"])
    inline = sim.section("responses").get("inline")
    if inline is not None:
        parse_responses(inline, f"{path.name}: spec.responses.inline")


def test_examples_are_simulators_two_autoscalers_and_a_scrape_job() -> None:
    assert len(SIMULATOR_EXAMPLES) >= 3
    assert {p.name for p in EXAMPLES} - {p.name for p in SIMULATOR_EXAMPLES} == {
        "keda-scaledobject.yaml",
        "hpa-prometheus-adapter.yaml",
        "prometheus-adapter-values.yaml",
        "prometheus-scrape-config.yaml",  # run by e2e/test_4_prometheus.py
    }


def test_autoscaler_examples_scale_the_simulator_on_its_queue() -> None:
    """Both scale the LLMSimulator (scale subresource) on vllm:num_requests_waiting, 5 waiting per replica."""
    examples = ROOT / "deploy" / "examples"
    target = {"apiVersion": "llmsim.io/v1alpha1", "kind": "LLMSimulator", "name": "llama-8b"}
    # KEDA (no KEDA schema here: its fields, checked one by one).
    keda = yaml.safe_load((examples / "keda-scaledobject.yaml").read_text())
    assert (keda["apiVersion"], keda["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    assert keda["spec"]["scaleTargetRef"] == target
    (trigger,) = keda["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["query"] == 'sum(vllm:num_requests_waiting{namespace="default", service="llama-8b"})'
    assert trigger["metadata"]["threshold"] == "5"  # KEDA wants a string
    # prometheus-adapter: a valid autoscaling/v2 HPA on the external metric its rule serves.
    hpa = yaml.safe_load((examples / "hpa-prometheus-adapter.yaml").read_text())
    kubernetes_validate.validate(hpa, "1.28.0", strict=True)
    assert hpa["spec"]["scaleTargetRef"] == target
    (metric,) = hpa["spec"]["metrics"]
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "5"}
    (rule,) = yaml.safe_load((examples / "prometheus-adapter-values.yaml").read_text())["rules"]["external"]
    assert rule["name"]["as"] == metric["external"]["metric"]["name"]
    assert rule["seriesQuery"].startswith("vllm:num_requests_waiting{")


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"model": {"profile": "llama-3.1-8b"}},
        {"model": {"name": ""}},
        {"model": {"name": "m"}, "engine": "gpu"},
        {"model": {"name": "m"}, "replicas": -1},
        {"model": {"name": "m"}, "scheduler": {"gpuMemoryUtilization": 1.5}},
        {"model": {"name": "m"}, "scheduler": {"watermark": 1}},
        {"model": {"name": "m", "parametersBillions": 0}},
        {"model": {"name": "m"}, "service": {"port": 70000}},
        {"model": {"name": "m"}, "monitoring": {"serviceMonitor": {"interval": "soon"}}},
        {"model": {"name": "m"}, "resources": {"limits": {"memory": "lots"}}},
        {"model": {"name": "m"}, "podDisruptionBudget": {"maxUnavailable": "lots"}},
        {"model": {"name": "m"}, "podDisruptionBudget": {"minAvailable": -1}},
        {"model": {"name": "m"}, "faults": {"rates": {"stall": 1.5}}},
        {"model": {"name": "m"}, "faults": {"slowFactor": 0.5}},
        {"model": {"name": "m"}, "startupSeconds": -1},
        {"model": {"name": "m"}, "shutdownTimeoutSeconds": -1},
        {"model": {"name": "m"}, "apiKeySecretRef": {"key": "k"}},
    ],
)
def test_schema_rejects(spec: dict[str, Any]) -> None:
    obj = {"apiVersion": "llmsim.io/v1alpha1", "kind": "LLMSimulator", "metadata": {"name": "x"}, "spec": spec}
    assert not validator().is_valid(obj)


#: models.yml fields an LLMSimulator does not set, and why (everything else is in crd.MODELS_FIELDS).
NOT_IN_THE_CRD = {
    "/version": "the operator writes 1",
    "/models": "one entry per LLMSimulator",
    "/hardware{}.description": "the operator names a custom GPU itself",
    "hardware": "the operator names the entry: the profile, or its custom one",
    "tokenizer.path": "the operator mounts spec.tokenizer.configMapRef and writes the path",
    "kv_events.endpoint": "the operator binds spec.kvEvents.port on every interface",
    "kv_events.topic": "spec.kvEvents.topic, whose default is llm-d's topic rather than llmsim's ''",
    "kv_events.hwm": "not exposed yet",
    "embeddings": "not exposed yet",
    "aliases": "not exposed yet (the vLLM form's --served-model-name sets it)",
    "tensor_parallel_size": "not exposed yet: the operator's pods and capacity are one GPU each",
    "pipeline_parallel_size": "not exposed yet: the operator's pods and capacity are one GPU each",
    "architecture": "comes with the built-in profile; needed only by tensor_parallel_size and pipeline_parallel_size",
    "weights.active_parameters_billions": "comes with the built-in profile (mixture of experts)",
    "weights.experts": "comes with the built-in profile (mixture of experts)",
    "weights.experts_per_token": "comes with the built-in profile (mixture of experts)",
    "kv_transfer.kv_role": "the operator sets each role's (spec.disaggregation: prefill, decode)",
    "kv_transfer.side_channel_host": "the operator names each prefill pod's IP ({pod_ip})",
    "data_parallel.rank": "a pod serves every rank (no pod per rank)",
}


def models_yml_fields() -> set[str]:
    """Every field of models.yml one level into each section, as MODELS_FIELDS names them."""
    schema = models_json_schema()
    defs = schema["$defs"]

    def section(prop: dict[str, Any]) -> dict[str, Any] | None:
        for member in [prop, *prop.get("anyOf", ()), *prop.get("allOf", ())]:
            if "$ref" in member:
                found: dict[str, Any] = defs[member["$ref"].rsplit("/", 1)[-1]]
                return found
        return None

    out = {f"/{key}" for key in schema["properties"] if key != "hardware"}
    out |= {f"/hardware{{}}.{key}" for key in defs["HardwareProfile"]["properties"]}
    for key, prop in defs["ModelConfig"]["properties"].items():
        sub = section(prop)
        out |= {f"{key}.{field}" for field in sub["properties"]} if sub else {key}
    return out


def test_every_models_yml_field_is_in_the_crd_or_says_why_not() -> None:
    placed = set()
    for place in crd.MODELS_FIELDS:
        if place.source.endswith(".*"):
            prefix = place.source.removesuffix("*")
            placed |= {f for f in models_yml_fields() if f.startswith(prefix) and f[len(prefix) :] not in place.exclude}
        else:
            placed |= {f for f in models_yml_fields() if f == place.source or f.startswith(place.source + ".")}

    def listed(field: str) -> bool:
        return any(field == key or field.startswith(key + ".") for key in NOT_IN_THE_CRD)

    missing = {f for f in models_yml_fields() - placed if not listed(f)}
    assert not missing, f"place these in crd.MODELS_FIELDS (or list them in NOT_IN_THE_CRD, with why): {missing}"
    assert not {f for f in placed if listed(f)}
    assert all(any(listed(f) for f in models_yml_fields() if f.startswith(key)) for key in NOT_IN_THE_CRD)


def test_fault_bounds_are_llmsims() -> None:
    # Generated from llmsim's schema (make generate): the CRD refuses what the simulator would.
    faults = version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["faults"]["properties"]
    assert faults["stallMs"]["maximum"] == MAX_STALL_MS
    assert faults["slowFactor"]["maximum"] == MAX_SLOW_FACTOR
