"""Smoke tests of the envtest control plane (etcd + kube-apiserver + kube-controller-manager).

Needs the assets from ``hack/envtest-assets.sh``::

    export KUBEBUILDER_ASSETS="$(hack/envtest-assets.sh)"
    pytest -m kube tests/kube

Without the assets these tests FAIL (CI must not skip silently), unless
``LLMSIM_SKIP_KUBE=1`` is set.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import kubernetes
import pytest

from tests.kube.envtest import EnvTest, EnvTestError, find_assets

pytestmark = pytest.mark.kube

# The client's type hints differ between releases (none before v35): use it untyped.
client: Any = kubernetes.client
config: Any = kubernetes.config
ApiException: Any = kubernetes.client.ApiException

T = TypeVar("T")


def _poll(what: str, fn: Callable[[], T | None], timeout: float = 90.0, interval: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = fn()
        if result is not None and result is not False:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(scope="module")
def envtest() -> Iterator[EnvTest]:
    if os.environ.get("LLMSIM_SKIP_KUBE") == "1":
        pytest.skip("LLMSIM_SKIP_KUBE=1")
    missing = ""
    try:
        find_assets()
    except EnvTestError as exc:
        missing = str(exc)
    if missing:
        pytest.fail(f"{missing} (or set LLMSIM_SKIP_KUBE=1 to skip the kube tests)", pytrace=False)
    with EnvTest() as env:
        yield env


@pytest.fixture(scope="module")
def api(envtest: EnvTest) -> Iterator[Any]:
    api_client = config.new_client_from_config(config_file=str(envtest.kubeconfig_path))
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture
def namespace(api: Any) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def test_kubeconfig_and_version(envtest: EnvTest, api: Any) -> None:
    assert envtest.kubeconfig_path.is_file()
    assert envtest.server_url.startswith("https://127.0.0.1:")
    assert envtest.ca_path.is_file()
    assert envtest.token
    info = client.VersionApi(api).get_code()
    assert info.major == "1"
    assert info.minor.startswith("20")


def test_deployment_gets_replicaset(api: Any, namespace: str) -> None:
    apps = client.AppsV1Api(api)
    labels = {"app": "smoke"}
    dep = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="smoke"),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="registry.invalid/none:0")]),
            ),
        ),
    )
    created = apps.create_namespaced_deployment(namespace, dep)

    def owned_replicaset() -> Any:
        for rs in apps.list_namespaced_replica_set(namespace).items:
            for ref in rs.metadata.owner_references or []:
                if ref.kind == "Deployment" and ref.uid == created.metadata.uid:
                    return rs
        return None

    rs = _poll("a ReplicaSet owned by the Deployment", owned_replicaset)
    assert rs.spec.replicas == 1
    assert rs.spec.selector.match_labels["app"] == "smoke"


def test_garbage_collector_deletes_dependent(api: Any, namespace: str) -> None:
    core = client.CoreV1Api(api)
    owner = core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"), data={"k": "v"}),
    )
    ref = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid)
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="dependent", owner_references=[ref]),
            data={"k": "v"},
        ),
    )
    core.delete_namespaced_config_map("owner", namespace, body=client.V1DeleteOptions(propagation_policy="Background"))

    def dependent_gone() -> bool:
        try:
            core.read_namespaced_config_map("dependent", namespace)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    _poll("the garbage collector to delete the dependent ConfigMap", dependent_gone)


def test_server_side_apply(api: Any, namespace: str) -> None:
    core = client.CoreV1Api(api)
    manager = "llmsim-smoke"

    def apply(data: dict[str, str]) -> Any:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "applied", "namespace": namespace},
            "data": data,
        }
        return core.patch_namespaced_config_map(
            "applied",
            namespace,
            body,
            field_manager=manager,
            _content_type="application/apply-patch+yaml",
        )

    apply({"a": "1"})
    apply({"a": "2", "b": "3"})
    got = core.read_namespaced_config_map("applied", namespace)
    assert got.data == {"a": "2", "b": "3"}
    managers = {(m.manager, m.operation) for m in got.metadata.managed_fields or []}
    assert (manager, "Apply") in managers


def test_custom_resource_round_trip(api: Any, namespace: str) -> None:
    # Guards the build recipe: with the reflect2 that 1.20 vendors, a Go >= 1.18 kube-apiserver
    # faults on the first custom-resource write (hack/envtest-assets.sh swaps in reflect2 1.0.2).
    group, plural = "smoke.llmsim.io", "widgets"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
                        }
                    },
                }
            ],
        },
    }
    client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    custom = client.CustomObjectsApi(api)

    def established() -> bool:
        got = client.ApiextensionsV1Api(api).read_custom_resource_definition(f"{plural}.{group}")
        return any(c.type == "Established" and c.status == "True" for c in got.status.conditions or [])

    _poll("the CRD to be established", established)
    body = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}}

    def create() -> Any:
        try:
            return custom.create_namespaced_custom_object(group, "v1", namespace, plural, body)
        except ApiException as exc:
            if exc.status == 404:  # discovery not caught up yet
                return None
            raise

    _poll("the custom resource to be created", create)
    got = custom.get_namespaced_custom_object(group, "v1", namespace, plural, "w")
    assert got["spec"] == {"size": 3}
