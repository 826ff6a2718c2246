"""The Helm chart, rendered without helm: same CRD, RBAC and operator pod as `llmsim-operator manifests`.

No helm binary exists on these machines, so ``tests/support/helm_template.py`` renders the chart's
templates (the Go-template subset they use, with Helm's semantics; anything else raises).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml

from llmsim_operator.cli import _parser
from llmsim_operator.manifests import install_manifests
from tests.support.helm_template import Chart

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "charts" / "llmsim-operator"
CHART = Chart(CHART_DIR)
DASHBOARD = CHART_DIR / "dashboards" / "llmsim.json"


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {o["kind"]: o for o in objects}
    assert len(out) == len(objects), "one object per kind expected"
    return out


def test_the_chart_crd_is_the_crd_file() -> None:
    # Byte for byte; test_crd.py checks that crds/ is what `llmsim-operator crd` prints.
    assert (CHART_DIR / "crds" / "llmsim.io_llmsimulators.yaml").read_bytes() == (
        ROOT / "crds" / "llmsim.io_llmsimulators.yaml"
    ).read_bytes()


def test_every_rendered_object_is_valid_kubernetes() -> None:
    objects = CHART.manifests()
    assert sorted(o["kind"] for o in objects) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "ServiceAccount",
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, "1.28.0", strict=True)


def test_rbac_is_the_same_as_manifests() -> None:
    chart = by_kind(CHART.manifests())
    plain = by_kind(install_manifests())
    assert chart["ClusterRole"]["rules"] == plain["ClusterRole"]["rules"]
    binding = chart["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == chart["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": chart["ServiceAccount"]["metadata"]["name"], "namespace": "llmsim-system"}
    ]


def test_operator_pod_is_the_same_as_manifests() -> None:
    chart_pod = by_kind(CHART.manifests())["Deployment"]["spec"]["template"]["spec"]
    plain_pod = by_kind(install_manifests())["Deployment"]["spec"]["template"]["spec"]
    assert chart_pod["securityContext"] == plain_pod["securityContext"]
    assert chart_pod["volumes"] == plain_pod["volumes"]
    (chart_c,) = chart_pod["containers"]
    (plain_c,) = plain_pod["containers"]
    for key in ("readinessProbe", "livenessProbe", "securityContext", "ports", "env", "volumeMounts", "resources"):
        assert chart_c[key] == plain_c[key], key
    # The arguments, as the operator itself parses them (the chart writes --flag=value).
    chart_args, plain_args = _parser().parse_args(chart_c["args"]), _parser().parse_args(plain_c["args"])
    for option in ("command", "namespace", "liveness", "peering"):
        assert getattr(chart_args, option) == getattr(plain_args, option), option


def test_watch_namespaces_and_values_reach_the_pod() -> None:
    values = {"watchNamespaces": ["team-a", "team-b"], "driftInterval": 15, "simulatorImage": "sim:1"}
    deployment = by_kind(CHART.manifests(values))["Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = _parser().parse_args(container["args"])
    assert (args.namespace, args.drift_interval, args.simulator_image) == (["team-a", "team-b"], 15.0, "sim:1")
    assert "serving team-a, team-b" in CHART.render(values)["NOTES.txt"]


def test_switches_leave_objects_out() -> None:
    values = {
        "rbac": {"create": False},
        "serviceAccount": {"create": False, "name": "ops"},
        "dashboard": {"enabled": False},
    }
    objects = by_kind(CHART.manifests(values))
    assert set(objects) == {"Deployment"}
    assert objects["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"] == "ops"


def test_dashboard_config_map_for_grafanas_sidecar() -> None:
    values = {"dashboard": {"namespace": "monitoring", "annotations": {"grafana_folder": "LLM"}}}
    cm = by_kind(CHART.manifests(values))["ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "LLM"}
    assert json.loads(cm["data"]["llmsim-fleet.json"]) == json.loads(DASHBOARD.read_text())


def schema_validator() -> jsonschema.Draft7Validator:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_values_schema_accepts_the_defaults() -> None:
    schema_validator().validate(yaml.safe_load((CHART_DIR / "values.yaml").read_text()))


@pytest.mark.parametrize(
    "override",
    [
        {"image": {"pullPolicy": "Sometimes"}},
        {"driftInterval": 0},
        {"driftInterval": "60s"},
        {"livenessPort": 70000},
        {"watchNamespaces": ["Team_A"]},
        {"dashbord": {"enabled": False}},  # a typo must not pass silently
        {"rbac": {"create": "yes"}},
    ],
)
def test_values_schema_rejects(override: dict[str, Any]) -> None:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    for key, value in override.items():
        values[key] = {**values[key], **value} if isinstance(value, dict) and key in values else value
    assert not schema_validator().is_valid(values)
