"""`llmsim-operator manifests` / `crd`, least-privilege RBAC, the Helm chart's static files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from llmsim_operator.cli import main
from llmsim_operator.crd import custom_resource_definition
from llmsim_operator.manifests import cluster_role, install_manifests

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "llmsim-operator"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    assert main(list(argv)) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d is not None]


def test_crd_command_prints_the_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "crd") == [custom_resource_definition()]


def test_manifests_install_everything_crd_first(capsys: pytest.CaptureFixture[str]) -> None:
    docs = run_cli(capsys, "manifests", "--namespace", "ops", "--image", "op:1", "--simulator-image", "sim:2")
    kinds = [d["kind"] for d in docs]
    assert kinds == [
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
    ]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.28.0", strict=True)
    by_kind = {d["kind"]: d for d in docs}
    assert by_kind["Namespace"]["metadata"]["name"] == "ops"
    binding = by_kind["ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llmsim-operator", "namespace": "ops"}]
    assert binding["roleRef"]["name"] == by_kind["ClusterRole"]["metadata"]["name"]
    dep = by_kind["Deployment"]
    assert dep["metadata"]["namespace"] == "ops"
    assert dep["spec"]["replicas"] == 1
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "llmsim-operator"
    (container,) = pod["containers"]
    assert container["image"] == "op:1"
    assert container["args"][:2] == ["run", "--all-namespaces"]
    assert "sim:2" in container["args"]
    # Ready only when kopf's /healthz probe handler passes; alive as long as kopf's health server runs.
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["livenessProbe"]["tcpSocket"] == {"port": "health"}
    assert "--liveness" in container["args"]
    assert container["args"][container["args"].index("--liveness") + 1].endswith(":8080/healthz")
    # kopf's identity comes from the pod name, never from getpass (uid 65532 has no passwd entry).
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_cluster_role_is_least_privilege() -> None:
    rules = cluster_role()["rules"]
    flat = grants(rules)
    assert not any("*" in part for grant in flat for part in grant)
    # Never: secrets, pods, RBAC, deletes of the config (the garbage collector deletes the children; the
    # operator deletes only a Deployment or Service of the form an LLMSimulator switched away from).
    resources = {r for _, r, _ in flat}
    assert resources.isdisjoint({"secrets", "pods", "roles", "clusterroles", "rolebindings", "nodes"})
    assert ("", "configmaps", "delete") not in flat
    # What the operator does need.
    assert {
        ("llmsim.io", "llmsimulators", "watch"),
        ("llmsim.io", "llmsimulators/status", "update"),
        ("", "configmaps", "patch"),
        ("", "services", "patch"),
        ("apps", "deployments", "patch"),
        ("apps", "deployments", "watch"),
        ("", "events", "create"),
    } <= flat


def test_chart_static_files_parse() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "llmsim-operator"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["rbac"]["create"] is True
    assert values["watchNamespaces"] == []


def test_deploy_yaml_equals_the_manifests_command() -> None:
    path = ROOT / "deploy" / "llmsim-operator.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs == install_manifests(), "deploy/llmsim-operator.yaml is stale: run `make generate`"


def test_dockerfiles_run_non_root_with_the_documented_entrypoints() -> None:
    sim = (ROOT / "Dockerfile").read_text().splitlines()
    assert "FROM python:3.11-slim" in sim
    assert "USER 65532:65532" in sim
    assert "EXPOSE 8000" in sim
    assert sim[-1] == 'ENTRYPOINT ["llmsim", "serve"]'
    op = (ROOT / "Dockerfile.operator").read_text().splitlines()
    assert "USER 65532:65532" in op
    assert 'ENTRYPOINT ["llmsim-operator"]' in op
