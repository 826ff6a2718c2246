"""The InferencePool and InferenceObjectives: rendered from the Deployments, applied where served."""

from __future__ import annotations

import copy
from typing import Any

from llmsim_operator.inference_pool import objective_name, pool_selector, render_pool, serving_ports
from llmsim_operator.reconciler import ChildView, Options, child_view, known_key, reconcile
from tests.operator.builders import NAMESPACE, UID, minimal_spec, simulator
from tests.operator.fake_kube import FakeKube

OPTIONS = Options(image="sim:test", now=lambda: "2025-01-01T00:00:00Z")
SIM = ("llmsim.io/v1alpha1", "LLMSimulator", NAMESPACE, "llama")
POOL = ("inference.networking.k8s.io/v1", "InferencePool", NAMESPACE, "llama")
POOLS = ("inference.networking.k8s.io/v1", "inferencepools")
OBJECTIVES = ("inference.networking.x-k8s.io/v1alpha2", "inferenceobjectives")
PICKER = {"name": "epp", "kind": "Service", "port": {"number": 9002}, "failureMode": "FailOpen"}
OWNER = {"apiVersion": "llmsim.io/v1alpha1", "kind": "LLMSimulator", "name": "llama", "uid": UID, "controller": True}


def deployment(selector: dict[str, str], *ports: tuple[str, int]) -> dict[str, Any]:
    container = {"name": "simulator", "ports": [{"name": n, "containerPort": p} for n, p in ports]}
    return {"spec": {"selector": {"matchLabels": selector}, "template": {"spec": {"containers": [container]}}}}


def test_target_ports_are_the_ports_named_http_and_http_n() -> None:
    dp = deployment({"a": "1"}, ("http", 8000), ("http-1", 8001), ("kv-events", 5557), ("https", 8443), ("http-x", 1))
    assert serving_ports(dp) == [8000, 8001]


def test_the_selector_is_what_every_serving_deployment_selects_by() -> None:
    base = {"app.kubernetes.io/name": "llmsim", "app.kubernetes.io/instance": "llama"}
    prefill = deployment({**base, "llm-d.ai/role": "prefill"}, ("http", 8000))
    decode = deployment({**base, "llm-d.ai/role": "decode"}, ("http", 8000), ("http-1", 8001))
    assert pool_selector([prefill]) == {**base, "llm-d.ai/role": "prefill"}
    assert pool_selector([prefill, decode]) == base
    pool = render_pool("llama", NAMESPACE, {"model": {"name": "m"}, "inferencePool": {}}, OWNER, [prefill, decode])
    assert pool is not None
    assert pool.pool["spec"] == {"selector": {"matchLabels": base}, "targetPorts": [{"number": 8000}, {"number": 8001}]}


def test_objectives_for_the_model_and_its_adapters() -> None:
    spec = {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "lora": {"adapters": [{"name": "sql-lora", "path": "/a"}]},
        "inferencePool": {
            "endpointPickerRef": PICKER,
            "objectives": [{"priority": 10}, {"model": "sql-lora", "priority": -1}, {"model": "gone"}],
        },
    }
    pool = render_pool("llama", NAMESPACE, spec, OWNER, [deployment({"a": "1"}, ("http", 8000))])
    assert pool is not None
    assert pool.pool["spec"]["endpointPickerRef"] == PICKER
    assert [(o["metadata"]["name"], o["spec"]) for o in pool.objectives] == [
        (
            "meta-llama-llama-3-1-8b-instruct",
            {
                "poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "llama"},
                "priority": 10,
            },
        ),
        (
            "sql-lora",
            {
                "poolRef": {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "llama"},
                "priority": -1,
            },
        ),
    ]
    assert pool.problem is not None
    assert "'gone' is not served" in pool.problem
    assert all(o["metadata"]["ownerReferences"] == [OWNER] for o in (pool.pool, *pool.objectives))


def test_objective_names_are_dns_1123() -> None:
    assert objective_name("Qwen/Qwen2.5-0.5B_Instruct") == "qwen-qwen2-5-0-5b-instruct"
    assert objective_name("---") == "model"


def known(kube: FakeKube) -> dict[str, ChildView]:
    views = (child_view(obj) for obj in kube.objects.values() if obj["kind"] != "LLMSimulator")
    return {known_key(v.kind, v.name): v for v in views if v is not None}


def condition(kube: FakeKube, type_: str) -> dict[str, Any] | None:
    return next((c for c in kube.status_of("llama", NAMESPACE).get("conditions", []) if c["type"] == type_), None)


async def test_without_the_api_the_status_says_so_and_nothing_is_created() -> None:
    kube = FakeKube()
    kube.add(simulator(spec={**minimal_spec(), "inferencePool": {"endpointPickerRef": PICKER}}))
    await reconcile(kube, kube.objects[SIM], OPTIONS, known(kube))
    assert not [o for o in kube.objects.values() if o["kind"].startswith("Inference")]
    cond = condition(kube, "InferencePool")
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("False", "APINotServed")
    assert (condition(kube, "Degraded") or {}).get("status") == "False"  # not a failure: an optional API

    kube.served.add(POOLS)  # the CRD installed since
    await reconcile(kube, kube.objects[SIM], OPTIONS, known(kube))
    pool = kube.objects[POOL]
    deployment = kube.objects[("apps/v1", "Deployment", NAMESPACE, "llama")]
    assert pool["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    cond = condition(kube, "InferencePool")
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", "Created")


async def test_objectives_follow_the_spec_and_a_dropped_pool_is_deleted() -> None:
    kube = FakeKube()
    kube.served |= {POOLS, OBJECTIVES}
    spec = {**minimal_spec(), "inferencePool": {"objectives": [{"priority": 5}, {"name": "batch", "priority": -5}]}}
    kube.add(simulator(spec=spec))
    await reconcile(kube, kube.objects[SIM], OPTIONS, known(kube))
    names = sorted(o["metadata"]["name"] for o in kube.objects.values() if o["kind"] == "InferenceObjective")
    assert names == ["batch", "meta-llama-llama-3-1-8b-instruct"]

    # A reconcile where nothing changed applies nothing (the objectives are known by name).
    applied = len(kube.applied)
    await reconcile(kube, copy.deepcopy(kube.objects[SIM]), OPTIONS, known(kube))
    assert len(kube.applied) == applied

    one = copy.deepcopy(kube.objects[SIM])
    one["spec"]["inferencePool"]["objectives"] = [{"name": "batch"}]
    one["metadata"]["generation"] = 2
    await reconcile(kube, one, OPTIONS, known(kube))
    assert [o["metadata"]["name"] for o in kube.objects.values() if o["kind"] == "InferenceObjective"] == ["batch"]

    none = copy.deepcopy(one)
    del none["spec"]["inferencePool"]
    none["metadata"]["generation"] = 3
    await reconcile(kube, none, OPTIONS, known(kube))
    assert not [o for o in kube.objects.values() if o["kind"].startswith("Inference")]
    assert condition(kube, "InferencePool") is None
