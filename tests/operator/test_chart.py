"""The Helm chart, rendered by Helm: same CRD, RBAC and operator pod as `llmsim-operator manifests`.

Helm v4's own engine (``helm-python-sdk``: Helm's Go SDK as a shared library in the wheel, no helm
binary, nothing downloaded) renders the chart as ``helm template`` would, for the default values and
each combination values.yaml documents; Helm validates the values against values.schema.json on the
way, ``helm lint --strict`` checks the chart, and every rendered object is checked against the
OpenAPI schemas of the oldest and newest Kubernetes that kubernetes-validate vendors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from llmsim_operator.cli import _parser
from llmsim_operator.manifests import install_manifests

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "charts" / "llmsim-operator"
DASHBOARD = CHART_DIR / "dashboards" / "llmsim.json"
RELEASE = "llmsim-operator"
NAMESPACE = "llmsim-system"
# The oldest and the newest Kubernetes whose schemas kubernetes-validate ships. The chart's objects
# are older than both ends (apps/v1, rbac/v1, core/v1), so the versions between add nothing.
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.utils.latest_version())
# helm lint's range: from the oldest Kubernetes the chart installs on (Chart.yaml's kubeVersion).
LINT_KUBE_VERSIONS = ("1.20.0", kubernetes_validate.utils.latest_version())

# Each combination values.yaml documents, with a name for the test ids.
COMBINATIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "watch-namespaces": {"watchNamespaces": ["team-a", "team-b"], "simulatorImage": "sim:1"},
    "image": {"image": {"repository": "registry.example/op", "tag": "2.0.0", "pullPolicy": "Always"}},
    "no-rbac-no-sa-no-dashboard": {
        "rbac": {"create": False},
        "serviceAccount": {"create": False, "name": "ops"},
        "dashboard": {"enabled": False},
    },
    "named-service-account": {"serviceAccount": {"create": True, "name": "llmsim"}},
    "dashboard-elsewhere": {
        "dashboard": {"namespace": "monitoring", "annotations": {"grafana_folder": "LLM"}, "labelValue": "yes"}
    },
    "pod-placement": {
        "podAnnotations": {"example.com/team": "llm"},
        "nodeSelector": {"kubernetes.io/arch": "amd64"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ci"]}]}]
                }
            }
        },
    },
    "resources-and-port": {
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": 1, "memory": "512Mi"}},
        "livenessPort": 9090,
    },
}


def chart() -> helm.Chart:
    return helm.Chart.load(CHART_DIR)


def render(values: dict[str, Any] | None = None, release: str = RELEASE) -> dict[str, str]:
    """``helm template``: template file name (``deployment.yaml``) -> rendered text."""
    out = chart().render(values or {}, name=release, namespace=NAMESPACE, is_install=True)
    prefix = f"{CHART_DIR.name}/templates/"
    assert all(path.startswith(prefix) for path in out), list(out)
    return {path.removeprefix(prefix): text for path, text in out.items()}


def manifests(values: dict[str, Any] | None = None, release: str = RELEASE) -> list[dict[str, Any]]:
    """Every object the chart's templates render (NOTES.txt aside)."""
    out: list[dict[str, Any]] = []
    for name, text in render(values, release).items():
        if name.endswith((".yaml", ".yml")):
            out += [doc for doc in yaml.safe_load_all(text) if doc]
    return out


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {o["kind"]: o for o in objects}
    assert len(out) == len(objects), "one object per kind expected"
    return out


def test_the_chart_crd_is_the_crd_file_and_manifests_crd() -> None:
    # Byte for byte; test_crd.py checks that crds/ is what `llmsim-operator crd` prints.
    assert (CHART_DIR / "crds" / "llmsim.io_llmsimulators.yaml").read_bytes() == (
        ROOT / "crds" / "llmsim.io_llmsimulators.yaml"
    ).read_bytes()
    # And Helm loads it as the chart's CRD, the one `llmsim-operator manifests` installs.
    (crd,) = chart().crds
    assert yaml.safe_load(crd["data"]) == install_manifests()[0]


def test_the_chart_refuses_clusters_older_than_the_operator_supports() -> None:
    # Helm checks kubeVersion at install time; lint and offline rendering do not.
    assert chart().metadata["kubeVersion"] == ">=1.20.0-0"


@pytest.mark.parametrize("kube_version", LINT_KUBE_VERSIONS)
def test_helm_lint_strict_finds_nothing(kube_version: str) -> None:
    for values in COMBINATIONS.values():
        report = helm.lint(CHART_DIR, values, strict=True, namespace=NAMESPACE, kube_version=f"v{kube_version}")
        assert report["errors"] == []
        # Severity 1 is info ("icon is recommended"); 2 and 3 are warnings and errors.
        assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("name", COMBINATIONS)
def test_every_rendered_object_is_valid_kubernetes(name: str) -> None:
    objects = manifests(COMBINATIONS[name])
    assert objects
    for obj in objects:
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


def test_defaults_render_every_object() -> None:
    assert sorted(o["kind"] for o in manifests()) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "ServiceAccount",
    ]


def test_rbac_is_the_same_as_manifests() -> None:
    chart_objects = by_kind(manifests())
    plain = by_kind(install_manifests())
    assert chart_objects["ClusterRole"]["rules"] == plain["ClusterRole"]["rules"]
    binding = chart_objects["ClusterRoleBinding"]
    assert binding["roleRef"] == {**plain["ClusterRoleBinding"]["roleRef"], "name": RELEASE}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": chart_objects["ServiceAccount"]["metadata"]["name"], "namespace": NAMESPACE}
    ]


def test_watching_named_namespaces_adds_listing_namespaces_to_the_rules() -> None:
    # kopf resolves served namespaces by listing and watching Namespace objects, also for plain names:
    # forbidden, it retries (about 45 s) before falling back to the names, serving nothing meanwhile.
    chart_rules = by_kind(manifests(COMBINATIONS["watch-namespaces"]))["ClusterRole"]["rules"]
    plain_rules = by_kind(install_manifests())["ClusterRole"]["rules"]
    extra = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}
    assert chart_rules == [*plain_rules, extra]
    assert extra not in by_kind(manifests())["ClusterRole"]["rules"]


def test_operator_pod_is_the_same_as_manifests() -> None:
    chart_pod = by_kind(manifests())["Deployment"]["spec"]["template"]["spec"]
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


def test_release_name_sets_the_names() -> None:
    objects = by_kind(manifests(release="ci"))
    assert objects["Deployment"]["metadata"]["name"] == "ci-llmsim-operator"
    assert objects["ClusterRoleBinding"]["roleRef"]["name"] == objects["ClusterRole"]["metadata"]["name"]
    assert objects["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"] == "ci-llmsim-operator"
    assert objects["Deployment"]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_watch_namespaces_and_values_reach_the_pod() -> None:
    values = COMBINATIONS["watch-namespaces"]
    deployment = by_kind(manifests(values))["Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = _parser().parse_args(container["args"])
    assert (args.namespace, args.simulator_image) == (["team-a", "team-b"], "sim:1")
    assert "serving team-a, team-b" in render(values)["NOTES.txt"]
    assert "serving all namespaces" in render()["NOTES.txt"]


def test_image_values_reach_the_container() -> None:
    deployment = by_kind(manifests(COMBINATIONS["image"]))["Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert (container["image"], container["imagePullPolicy"]) == ("registry.example/op:2.0.0", "Always")
    (default,) = by_kind(manifests())["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert default["image"] == f"ghcr.io/llmsim/llmsim-operator:{chart().metadata['appVersion']}"


def test_switches_leave_objects_out() -> None:
    objects = by_kind(manifests(COMBINATIONS["no-rbac-no-sa-no-dashboard"]))
    assert set(objects) == {"Deployment"}
    assert objects["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"] == "ops"


def test_pod_placement_values_reach_the_pod() -> None:
    values = COMBINATIONS["pod-placement"]
    template = by_kind(manifests(values))["Deployment"]["spec"]["template"]
    assert template["metadata"]["annotations"] == values["podAnnotations"]
    for key in ("nodeSelector", "tolerations", "affinity"):
        assert template["spec"][key] == values[key], key


def test_resources_and_port_reach_the_container() -> None:
    values = COMBINATIONS["resources-and-port"]
    (container,) = by_kind(manifests(values))["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["resources"] == values["resources"]
    assert container["ports"][0]["containerPort"] == 9090
    assert _parser().parse_args(container["args"]).liveness == "http://0.0.0.0:9090/healthz"


def test_dashboard_config_map_for_grafanas_sidecar() -> None:
    cm = by_kind(manifests(COMBINATIONS["dashboard-elsewhere"]))["ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "yes"
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "LLM"}
    assert json.loads(cm["data"]["llmsim-fleet.json"]) == json.loads(DASHBOARD.read_text())


def test_values_schema_accepts_the_defaults_and_every_combination() -> None:
    for values in COMBINATIONS.values():
        chart().validate_schema(chart().merge_values(values))


@pytest.mark.parametrize(
    "override",
    [
        {"image": {"pullPolicy": "Sometimes"}},
        {"driftInterval": 60},  # gone with the drift timer: children are repaired on their events
        {"livenessPort": 70000},
        {"watchNamespaces": ["Team_A"]},
        {"dashbord": {"enabled": False}},  # a typo must not pass silently
        {"rbac": {"create": "yes"}},
    ],
)
def test_helm_refuses_values_the_schema_rejects(override: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(override)
