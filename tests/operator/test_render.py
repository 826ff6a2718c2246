"""Rendering spec -> children: golden files, Kubernetes OpenAPI validation, and the rules that matter.

Regenerate the goldens with ``UPDATE_GOLDEN=1 pytest tests/operator/test_render.py`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from llmsim_operator import conventions as c
from llmsim_operator.documents import dump_all
from llmsim_operator.render import Children, Owner, render_children
from llmsim_operator.simulator_config import config_data, config_hash
from llmsim_operator.spec import parse_spec
from tests.operator.builders import NAMESPACE, UID, disaggregated_spec, faults_spec, full_spec, minimal_spec

GOLDEN = Path(__file__).parent / "golden"
K8S_VERSION = "1.28.0"
IMAGE = "ghcr.io/llmsim/llmsim:test"

CASES: dict[str, dict[str, Any]] = {
    "minimal": minimal_spec(),
    "full": full_spec(),
    "fixed-external-autoscaler": {
        "model": {"name": "fixed-model"},
        "engine": "fixed",
        "latency": {"ttftOverheadMs": 20, "prefillTokensPerSecond": 20000, "itlMs": 15},
        "autoscaling": {"external": True},
    },
    "faults-lifecycle-keys": faults_spec(),
    "disaggregated-dp-tls": disaggregated_spec(),
}


def render(spec: dict[str, Any], responses: str | None = None, name: str = "llama") -> Children:
    sim = parse_spec(name, NAMESPACE, spec)
    if responses is None and "inline" in sim.section("responses"):
        responses = sim.section("responses")["inline"]
    return render_children(sim, Owner(name, UID), config_data(sim, responses), IMAGE)


def objects(children: Children) -> list[dict[str, Any]]:
    out = [children.config_map, *children.deployments, *children.services]
    optional = [children.service_monitor, children.pod_disruption_budget]
    return out + [o for o in optional if o is not None]


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    text = dump_all(objects(render(CASES[case])))
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} differs: review, then UPDATE_GOLDEN=1"


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_core_object_is_valid_kubernetes(case: str) -> None:
    for obj in objects(render(CASES[case])):
        if obj["kind"] == "ServiceMonitor":
            continue  # a prometheus-operator CRD, not in the Kubernetes schemas
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_children_are_owned_by_the_simulator_and_labelled() -> None:
    for obj in objects(render(full_spec())):
        meta = obj["metadata"]
        assert meta["namespace"] == NAMESPACE
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "llmsim.io/v1alpha1",
                "kind": "LLMSimulator",
                "name": "llama",
                "uid": UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "llmsim-operator"
        assert meta["labels"]["app.kubernetes.io/instance"] == "llama"


def test_deployment_runs_llmsim_serve_on_the_config() -> None:
    dep = render(minimal_spec()).deployment
    pod = dep["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["args"] == ["--config", "/etc/llmsim/models.yml", "--host", "0.0.0.0", "--port", "8000"]
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    # Ready once the simulated load is done; alive whenever the process answers (never killed while loading).
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/ping", "port": "http"}
    assert {"name": "config", "configMap": {"name": "llama-config"}} in pod["volumes"]
    assert pod["enableServiceLinks"] is False


def test_inline_responses_add_the_responses_flag() -> None:
    (container,) = render(full_spec()).deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][2:4] == ["--responses", "/etc/llmsim/responses.yml"]
    assert container["image"] == "registry.example/llmsim:dev"


def test_pods_meet_the_restricted_pod_security_profile() -> None:
    pod = render(minimal_spec()).deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["readOnlyRootFilesystem"] is True
    assert "hostNetwork" not in pod
    assert "hostPID" not in pod
    assert all("hostPath" not in v for v in pod["volumes"])


def test_config_hash_annotation_follows_the_config() -> None:
    a = render(minimal_spec())
    b = render(minimal_spec() | {"scheduler": {"maxNumSequences": 8}})
    c_ = render(minimal_spec(), responses="responses: []\n")
    hashes = [x.deployment["spec"]["template"]["metadata"]["annotations"][c.ANNOTATION_CONFIG_HASH] for x in (a, b, c_)]
    assert hashes == [config_hash(x.config_map["data"]) for x in (a, b, c_)]
    assert len(set(hashes)) == 3
    # Replicas are not part of the config: scaling never rolls the pods.
    d = render(minimal_spec() | {"replicas": 5})
    assert d.config_hash == a.config_hash
    assert d.deployment["spec"]["template"] == a.deployment["spec"]["template"]


def test_pod_template_extras_merge_and_operator_labels_win() -> None:
    tpl = render(full_spec()).deployment["spec"]["template"]
    assert tpl["metadata"]["labels"]["inference-pool"] == "llama"
    assert tpl["metadata"]["labels"]["app.kubernetes.io/name"] == "llmsim"
    assert tpl["metadata"]["annotations"]["team"] == "a"
    assert tpl["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert tpl["metadata"]["annotations"]["prometheus.io/port"] == "8000"
    assert tpl["spec"]["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    assert tpl["spec"]["tolerations"][0]["key"] == "dedicated"


def test_selector_is_a_subset_of_the_pod_labels() -> None:
    dep = render(full_spec()).deployment
    selector = dep["spec"]["selector"]["matchLabels"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert selector == {"app.kubernetes.io/name": "llmsim", "app.kubernetes.io/instance": "llama"}
    assert selector.items() <= labels.items()


def test_replicas_follow_the_spec_unless_an_autoscaler_owns_them() -> None:
    assert render(minimal_spec() | {"replicas": 4}).deployment["spec"]["replicas"] == 4
    external = render(minimal_spec() | {"replicas": 4, "autoscaling": {"external": True}})
    assert "replicas" not in external.deployment["spec"]


def test_service_has_a_named_http_port() -> None:
    svc = render(full_spec()).service
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 9000, "targetPort": "http", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == {"app.kubernetes.io/name": "llmsim", "app.kubernetes.io/instance": "llama"}


def test_service_monitor_only_when_enabled() -> None:
    assert render(minimal_spec()).service_monitor is None
    sm = render(full_spec()).service_monitor
    assert sm is not None
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]


@pytest.mark.parametrize(
    ("budget", "replicas", "expected"),
    [
        ({"enabled": True}, 2, {"maxUnavailable": 1}),
        ({"enabled": True, "minAvailable": "50%"}, 4, {"minAvailable": "50%"}),
        ({"enabled": True, "maxUnavailable": 2}, 1, None),  # one pod: a budget would only block drains
        ({"enabled": True}, 0, None),
        ({"enabled": False}, 5, None),
        ({}, 5, None),
    ],
)
def test_pod_disruption_budget_only_for_fleets(
    budget: dict[str, Any], replicas: int, expected: dict[str, Any] | None
) -> None:
    pdb = render(minimal_spec() | {"replicas": replicas, "podDisruptionBudget": budget}).pod_disruption_budget
    if expected is None:
        assert pdb is None
        return
    assert pdb is not None
    kubernetes_validate.validate(pdb, K8S_VERSION, strict=True)
    assert pdb["spec"] == {"selector": {"matchLabels": c.selector_labels("llama")}, **expected}
    assert pdb["metadata"]["name"] == "llama"


def test_an_external_autoscaler_keeps_the_budget() -> None:
    spec = minimal_spec() | {"autoscaling": {"external": True}, "podDisruptionBudget": {"enabled": True}}
    assert render(spec).pod_disruption_budget is not None


def test_pods_know_their_name_and_namespace_through_the_downward_api() -> None:
    (container,) = render(minimal_spec()).deployment["spec"]["template"]["spec"]["containers"]
    assert container["env"] == [
        {"name": "LLMSIM_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "LLMSIM_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]


def test_keys_come_from_secrets() -> None:
    (container,) = render(faults_spec()).deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["valueFrom"] for e in container["env"]}
    assert env["LLMSIM_API_KEY"] == {"secretKeyRef": {"name": "llama-keys", "key": "api-key"}}
    assert env["LLMSIM_ADMIN_KEY"] == {"secretKeyRef": {"name": "ops-keys", "key": "token"}}
    # The keys never land in the ConfigMap or the args.
    rendered = dump_all(objects(render(faults_spec())))
    assert "LLMSIM_API_KEY" in rendered
    assert "--api-key" not in rendered


def test_the_grace_period_covers_the_shutdown_timeout() -> None:
    default = render(minimal_spec()).deployment["spec"]["template"]["spec"]
    assert default["terminationGracePeriodSeconds"] == 10  # vLLM's default: abort at once, then 10 s to exit
    assert "--shutdown-timeout" not in default["containers"][0]["args"]
    graceful = render(minimal_spec() | {"shutdownTimeoutSeconds": 45}).deployment["spec"]["template"]["spec"]
    assert graceful["terminationGracePeriodSeconds"] == 55
    assert graceful["containers"][0]["args"][-2:] == ["--shutdown-timeout", "45"]
