"""The operator installed from the release's packaged Helm chart by Helm's own engine, as a chart user would,
then uninstalled.

The chart is the ``llmsim-operator-VERSION.tgz`` that e2e/run.sh had hack/release.sh package into
``$E2E_DIST`` (and checked against its SHA256SUMS), the archive a release publishes; only the images
are set by values, to the e2e ones (built locally, on no registry).

helm-python-sdk is Helm v4's Go SDK as a library: ``Config.install`` is ``helm install``, with the
chart's crds/ folder, values.schema.json and kubeVersion check, and ``wait`` is Helm's own
readiness wait. The release goes into a namespace of its own with ``watchNamespaces`` set to it;
the operator run.sh installed into llmsim-system (it serves every namespace) is scaled to zero
meanwhile and restored after, so whatever reconciles the LLMSimulator here is the chart's operator.

The CRD is cluster-scoped and shared with every other e2e test: it is already installed, and Helm
never deletes crds/ on uninstall (Helm's documented CRD policy); the last test checks it is the same
object (same uid) before the install and after the uninstall.

Helm 4 installs crds/ by server-side apply, which Kubernetes before 1.25 refuses for our CRD
(``x-kubernetes-validations: field not declared in schema``: the CEL rules, which those versions do
not know). There the test installs as a user of such a cluster must, with Helm 4's
``--server-side=false``: crds/ is then created as Helm 3 did, and a CRD that exists is skipped.
helm-python-sdk 0.2's ``Config.install`` does not expose that flag, so ``install`` below makes the
same call with the one option added (its native layer takes it: ``server_side_apply``).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
from helm_python import _native

from e2e.cluster import OPERATOR_NAMESPACE, ApiException, Cluster, client, deleting_namespace, wait_for
from e2e.conftest import WATCHED

pytestmark = pytest.mark.e2e

RELEASE = "llmsim-chart"
#: The chart's names for this release (_helpers.tpl: release name, then the chart's, unless one holds the other).
FULLNAME = f"{RELEASE}-llmsim-operator"
RELEASE_SELECTOR = f"app.kubernetes.io/name=llmsim-operator,app.kubernetes.io/instance={RELEASE}"
CRD = "llmsimulators.llmsim.io"
PRIMARY = "llmsim-operator"
#: Helm's wait, in seconds (a failure bound: the operator is Ready in seconds here).
HELM_TIMEOUT = 180
SIMULATOR = "from-chart"
MODEL = "chart-model"
SPEC: dict[str, Any] = {"model": {"name": MODEL}, "engine": "instant", "replicas": 1}


def image_values(image: str) -> dict[str, str]:
    """The chart's ``image`` values for a reference ``[registry/]repository:tag``."""
    repository, _, tag = image.rpartition(":")
    assert repository, f"{image} has no tag"
    assert "/" not in tag, f"{image} has no tag"
    return {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"}


def not_found(read: Any, *args: Any) -> bool:
    try:
        read(*args)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def before_cel(cluster: Cluster) -> bool:
    """The server is older than 1.25, the first Kubernetes that knows a CRD's x-kubernetes-validations."""
    version = client.VersionApi(cluster.api).get_code()
    return (int(version.major), int(version.minor.rstrip("+"))) < (1, 25)


def packaged_chart() -> Path:
    """The release's chart archive in ``$E2E_DIST`` (e2e/run.sh builds it)."""
    dist = os.environ.get("E2E_DIST")
    if not dist:
        pytest.fail(
            "E2E_DIST is not set: run this through e2e/run.sh, which builds the release artifacts", pytrace=False
        )
    archives = sorted(Path(dist).glob("llmsim-operator-*.tgz"))
    assert len(archives) == 1, f"{dist} should hold one chart archive, holds {[a.name for a in archives]}"
    return archives[0]


def install(
    config: helm.Config, name: str, values: dict[str, Any], *, namespace: str, server_side: bool
) -> dict[str, Any]:
    """``helm install NAME $E2E_DIST/llmsim-operator-VERSION.tgz -n NAMESPACE --wait=watcher
    --server-side=SERVER_SIDE``: Config.install's call, plus ``server_side_apply``."""
    options = {
        "namespace": namespace,
        "wait": "watcher",
        "timeout_seconds": HELM_TIMEOUT,
        "server_side_apply": server_side,
    }
    # Chart.load takes a .tgz as `helm install` does; the chart is held until the call returns (its
    # handle is freed with it).
    chart = helm.Chart.load(packaged_chart())
    payload = _native.call_string(
        "helm_install",
        config._raw(),
        _native.HANDLE(0),  # no cancellation context
        chart._raw(),
        None,  # the chart is the loaded one, not a reference
        name,
        json.dumps(values),
        json.dumps(options),
    )
    release: dict[str, Any] = json.loads(payload)
    return release


@pytest.fixture(scope="module")
def chart_namespace(cluster: Cluster) -> Iterator[str]:
    with deleting_namespace(cluster, f"llmsim-chart-{uuid.uuid4().hex[:6]}") as name:
        WATCHED.append(name)
        yield name


@pytest.fixture(scope="module")
def crd_uid(cluster: Cluster) -> str:
    """The shared CRD's uid before Helm sees it (run.sh installed it from the release's install.yaml)."""
    uid: str = client.ApiextensionsV1Api(cluster.api).read_custom_resource_definition(CRD).metadata.uid
    return uid


@pytest.fixture(scope="module")
def primary_paused(cluster: Cluster, crd_uid: str) -> Iterator[None]:
    """The llmsim-system operator at zero replicas for this module, then back, Ready."""

    def scale(replicas: int) -> None:
        cluster.apps.patch_namespaced_deployment_scale(PRIMARY, OPERATOR_NAMESPACE, {"spec": {"replicas": replicas}})

    scale(0)
    try:
        wait_for(
            "the llmsim-system operator's pods gone",
            lambda: (
                not cluster.core.list_namespaced_pod(
                    OPERATOR_NAMESPACE, label_selector="app.kubernetes.io/name=llmsim-operator"
                ).items
            ),
        )
        yield
    finally:
        scale(1)

        def available() -> bool:
            status = cluster.apps.read_namespaced_deployment(PRIMARY, OPERATOR_NAMESPACE).status
            return bool(status.ready_replicas == 1 and status.updated_replicas == 1 and status.replicas == 1)

        wait_for("the llmsim-system operator Ready again", available)


@pytest.fixture(scope="module")
def helm_config(cluster: Cluster, chart_namespace: str) -> Iterator[helm.Config]:
    with helm.Config(kubeconfig_path=cluster.kubeconfig, namespace=chart_namespace) as config:
        yield config


@pytest.fixture(scope="module")
def release(
    cluster: Cluster, helm_config: helm.Config, chart_namespace: str, primary_paused: None
) -> Iterator[dict[str, Any]]:
    values = {
        "image": image_values(os.environ.get("E2E_OPERATOR_IMAGE", "llmsim-operator:e2e")),
        "simulatorImage": os.environ.get("E2E_SIMULATOR_IMAGE", "llmsim:e2e"),
        "watchNamespaces": [chart_namespace],
    }
    installed = install(helm_config, RELEASE, values, namespace=chart_namespace, server_side=not before_cel(cluster))
    try:
        yield installed
    finally:
        # The last test uninstalls; this only cleans up after a failure before it.
        helm_config.uninstall(RELEASE, ignore_not_found=True, wait="watcher", timeout=HELM_TIMEOUT)


def test_helm_installs_the_chart_and_its_operator_turns_ready(
    cluster: Cluster, chart_namespace: str, release: dict[str, Any]
) -> None:
    assert release["name"] == RELEASE
    assert release["status"] == "deployed"
    assert release["revision"] == 1
    deployment = cluster.apps.read_namespaced_deployment(FULLNAME, chart_namespace)
    assert deployment.status.ready_replicas == 1
    (container,) = deployment.spec.template.spec.containers
    assert container.image == os.environ.get("E2E_OPERATOR_IMAGE", "llmsim-operator:e2e")
    assert f"--namespace={chart_namespace}" in container.args
    # The only operator running: the llmsim-system one is paused.
    assert cluster.core.list_namespaced_pod(OPERATOR_NAMESPACE).items == []


def test_the_charts_operator_makes_an_llmsimulator_ready_and_it_answers(
    cluster: Cluster, chart_namespace: str, release: dict[str, Any]
) -> None:
    cluster.create_simulator(chart_namespace, SIMULATOR, SPEC)
    obj = cluster.wait_ready(chart_namespace, SIMULATOR, SPEC["replicas"])
    assert obj["status"]["endpoint"] == f"http://{SIMULATOR}.{chart_namespace}.svc:8000"
    with cluster.http() as http:
        models = http.get(cluster.service_url(chart_namespace, SIMULATOR) + "/v1/models")
    assert models.status_code == 200, models.text
    assert [m["id"] for m in models.json()["data"]] == [MODEL]
    # Gone before the operator goes: no finalizer holds it, and the garbage collector removes its
    # children by their owner references (test_5_lifecycle checks that; here it would only add the
    # collector's delay, tens of seconds on this cluster).
    cluster.custom.delete_namespaced_custom_object("llmsim.io", "v1alpha1", chart_namespace, "llmsimulators", SIMULATOR)
    assert cluster.simulator(chart_namespace, SIMULATOR) is None


def test_uninstall_removes_the_operator_and_keeps_the_shared_crd(
    cluster: Cluster, chart_namespace: str, helm_config: helm.Config, release: dict[str, Any], crd_uid: str
) -> None:
    helm_config.uninstall(RELEASE, wait="watcher", timeout=HELM_TIMEOUT)
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    for what, read, args in (
        ("Deployment", cluster.apps.read_namespaced_deployment, (FULLNAME, chart_namespace)),
        ("ServiceAccount", cluster.core.read_namespaced_service_account, (FULLNAME, chart_namespace)),
        ("dashboard ConfigMap", cluster.core.read_namespaced_config_map, (f"{FULLNAME}-dashboard", chart_namespace)),
        ("ClusterRole", rbac.read_cluster_role, (FULLNAME,)),
        ("ClusterRoleBinding", rbac.read_cluster_role_binding, (FULLNAME,)),
    ):
        assert not_found(read, *args), f"the {what} {FULLNAME} outlived helm uninstall"
    wait_for(
        "the chart's operator pod gone",
        lambda: not cluster.core.list_namespaced_pod(chart_namespace, label_selector=RELEASE_SELECTOR).items,
    )
    # Helm's record of the release (a Secret per revision) is gone too.
    assert helm_config.list(all_states=True) == []
    assert cluster.core.list_namespaced_secret(chart_namespace, label_selector="owner=helm").items == []
    # The CRD of crds/ is the one run.sh installed, untouched by install and uninstall alike.
    crd = client.ApiextensionsV1Api(cluster.api).read_custom_resource_definition(CRD)
    assert crd.metadata.uid == crd_uid
    assert crd.metadata.deletion_timestamp is None
