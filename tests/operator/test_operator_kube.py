"""The operator against a real kube-apiserver + controller-manager (envtest), as its ServiceAccount.

The operator runs as a process (``python -m llmsim_operator run``) authenticated with a token of
the ServiceAccount that ``llmsim-operator manifests`` binds to its ClusterRole, so every scenario
also proves the RBAC is sufficient. There are no kubelets: pods stay Pending, and the status test
marks them Ready through the pods' status subresource, as a kubelet would.

    export KUBEBUILDER_ASSETS="$(hack/envtest-assets.sh)"
    pytest -m kube tests/operator

Without assets these tests FAIL (CI must not skip silently), unless ``LLMSIM_SKIP_KUBE=1``.
"""

from __future__ import annotations

import contextlib
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmsim_operator.conventions import ANNOTATION_CONFIG_HASH, API_VERSION, KIND
from llmsim_operator.crd import SPEC_SCHEMA, custom_resource_definition
from llmsim_operator.defaulting import apply_defaults
from llmsim_operator.kube_version import detect_cel, server_knows_cel
from tests.kube.envtest import EnvTest, EnvTestError, find_assets, free_port
from tests.operator.cluster import (
    ApiException,
    OperatorProcess,
    client,
    condition,
    delete,
    dynamic,
    install_rbac,
    merge_patch,
    parse_models_yml,
    service_account_kubeconfig,
    simulator_body,
    wait_event,
    wait_for,
)

pytestmark = pytest.mark.kube

SIM_IMAGE = "llmsim:envtest"


@pytest.fixture(scope="module")
def envtest() -> Iterator[EnvTest]:
    if os.environ.get("LLMSIM_SKIP_KUBE") == "1":
        pytest.skip("LLMSIM_SKIP_KUBE=1")
    try:
        find_assets()
    except EnvTestError as exc:
        pytest.fail(f"{exc} (or set LLMSIM_SKIP_KUBE=1 to skip the kube tests)", pytrace=False)
    with EnvTest() as env:
        yield env


@pytest.fixture(scope="module")
def api(envtest: EnvTest) -> Iterator[Any]:
    api_client = client.ApiClient(_admin_configuration(envtest))
    yield api_client
    api_client.close()


def _admin_configuration(envtest: EnvTest) -> Any:
    cfg = client.Configuration()
    cfg.host = envtest.server_url
    cfg.ssl_ca_cert = str(envtest.ca_path)
    cfg.api_key = {"authorization": f"Bearer {envtest.token}"}
    return cfg


@pytest.fixture(scope="module")
def dyn(api: Any) -> Any:
    """A dynamic client made after the CRD is established (its discovery sees llmsim.io)."""
    ext = client.ApiextensionsV1Api(api)
    crd = custom_resource_definition()
    ext.create_custom_resource_definition(crd)
    base = dynamic.DynamicClient(api)
    wait_for(
        base,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "",
        crd["metadata"]["name"],
        lambda o: condition(o, "Established").get("status") == "True",
        "the CRD to be established",
    )
    return dynamic.DynamicClient(api)


@pytest.fixture(scope="module")
def operator(
    envtest: EnvTest, api: Any, dyn: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    install_rbac(api)
    tmp = tmp_path_factory.mktemp("operator")
    kubeconfig = service_account_kubeconfig(api, envtest.server_url, envtest.ca_path, tmp / "kubeconfig")
    liveness = f"http://127.0.0.1:{free_port()}/healthz"
    process = OperatorProcess(
        kubeconfig,
        tmp / "operator.log",
        "--simulator-image",
        SIM_IMAGE,
        "--liveness",
        liveness,
    )
    process.liveness = liveness
    process.start()
    yield process
    process.stop()


@pytest.fixture
def namespace(api: Any, operator: OperatorProcess) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def sims(dyn: Any) -> Any:
    return dyn.resources.get(api_version=API_VERSION, kind=KIND)


def create(dyn: Any, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    custom = client.CustomObjectsApi(dyn.client)
    created: dict[str, Any] = custom.create_namespaced_custom_object(
        "llmsim.io", "v1alpha1", namespace, "llmsimulators", simulator_body(name, spec)
    )
    return created


def patch_spec(dyn: Any, namespace: str, name: str, spec: dict[str, Any]) -> None:
    sims(dyn).patch(body={"spec": spec}, name=name, namespace=namespace, content_type="application/merge-patch+json")


def wait_children(dyn: Any, namespace: str, name: str, uid: str) -> dict[str, dict[str, Any]]:
    owned = {}
    for api_version, kind, child in (
        ("v1", "ConfigMap", f"{name}-config"),
        ("apps/v1", "Deployment", name),
        ("v1", "Service", name),
    ):
        obj = wait_for(
            dyn,
            api_version,
            kind,
            namespace,
            child,
            lambda o: o is not None and any(r["uid"] == uid for r in o["metadata"].get("ownerReferences", [])),
            "the operator to create it, owned by the LLMSimulator",
        )
        assert obj is not None
        owned[kind] = obj
    return owned


def status_with(dyn: Any, namespace: str, name: str, what: str, predicate: Any) -> dict[str, Any]:
    obj = wait_for(dyn, API_VERSION, KIND, namespace, name, lambda o: o is not None and predicate(o), what)
    assert obj is not None
    return obj


MINIMAL = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "profile": "llama-3.1-8b"}}


def test_apply_creates_owned_children_with_the_rendered_content(dyn: Any, namespace: str) -> None:
    sim = create(dyn, namespace, "llama", MINIMAL)
    uid = sim["metadata"]["uid"]
    # The API server applied the CRD's structural defaults: the ones the operator applies itself.
    assert sim["spec"]["replicas"] == 1
    assert sim["spec"]["scheduler"]["blockSize"] == 16
    assert sim["spec"] == apply_defaults(SPEC_SCHEMA, MINIMAL)
    children = wait_children(dyn, namespace, "llama", uid)

    for obj in children.values():
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["controller"], ref["blockOwnerDeletion"]) == (KIND, "llama", True, True)
        managers = {m["manager"] for m in obj["metadata"]["managedFields"] if m["operation"] == "Apply"}
        assert managers == {"llmsim-operator"}

    models = parse_models_yml(children["ConfigMap"])
    assert models["models"][0]["name"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert models["models"][0]["hardware"] == "h100-80gb"
    template = children["Deployment"]["spec"]["template"]
    assert template["spec"]["containers"][0]["image"] == SIM_IMAGE
    assert children["Service"]["spec"]["ports"][0]["name"] == "http"

    done = status_with(
        dyn,
        namespace,
        "llama",
        "status.observedGeneration",
        lambda o: o.get("status", {}).get("observedGeneration") == 1,
    )
    status = done["status"]
    assert status["kvCacheBlocks"] == int((80 * 2**30 * 0.9 - 8.03e9 * 2) // (131072 * 16))
    assert status["endpoint"] == f"http://llama.{namespace}.svc:8000"
    assert status["configHash"] == template["metadata"]["annotations"][ANNOTATION_CONFIG_HASH]
    assert condition(done, "Degraded") | {"lastTransitionTime": None} == {
        "type": "Degraded",
        "status": "False",
        "reason": "Reconciled",
        "message": "all children applied",
        "lastTransitionTime": None,
    }


@pytest.mark.parametrize(
    "spec",
    [
        {"model": {"name": "m"}, "engine": "gpu"},
        {"model": {"name": "m"}, "replicas": -1},
        {"engine": "fixed"},
        {"model": {"name": "m"}, "scheduler": {"gpuMemoryUtilization": 2}},
    ],
    ids=["engine-enum", "negative-replicas", "model-required", "utilization-above-1"],
)
def test_invalid_cr_is_rejected_by_the_schema(dyn: Any, namespace: str, spec: dict[str, Any]) -> None:
    with pytest.raises(ApiException) as info:
        create(dyn, namespace, "bad", spec)
    assert info.value.status == 422


def test_a_rule_only_cel_enforces_is_reported_in_status(dyn: Any, api: Any, namespace: str) -> None:
    # The scheduler engine without a model size: only a CEL rule forbids it, and 1.20 ignores CEL.
    if int(client.VersionApi(api).get_code().minor.rstrip("+")) >= 25:
        pytest.skip("this API server enforces CEL itself")
    create(dyn, namespace, "nosize", {"model": {"name": "m"}})
    obj = status_with(
        dyn, namespace, "nosize", "Degraded=True", lambda o: condition(o, "Degraded").get("status") == "True"
    )
    degraded = condition(obj, "Degraded")
    assert degraded["reason"] == "InvalidSpec"
    assert "model.profile" in degraded["message"]
    assert wait_event(dyn, namespace, KIND, "nosize", "InvalidSpec")["type"] == "Warning"
    assert dyn.resources.get(api_version="apps/v1", kind="Deployment").get(namespace=namespace).items == []
    # Fixing the spec recovers.
    patch_spec(dyn, namespace, "nosize", {"model": {"profile": "qwen2.5-0.5b"}})
    status_with(dyn, namespace, "nosize", "Degraded=False", lambda o: condition(o, "Degraded").get("status") == "False")


def test_spec_change_changes_the_config_hash_and_the_pod_template(dyn: Any, namespace: str) -> None:
    sim = create(dyn, namespace, "roll", MINIMAL)
    children = wait_children(dyn, namespace, "roll", sim["metadata"]["uid"])
    old_hash = children["Deployment"]["spec"]["template"]["metadata"]["annotations"][ANNOTATION_CONFIG_HASH]
    patch_spec(dyn, namespace, "roll", {"scheduler": {"maxNumSequences": 8}})

    def rolled(o: dict[str, Any] | None) -> bool:
        return o is not None and o["spec"]["template"]["metadata"]["annotations"][ANNOTATION_CONFIG_HASH] != old_hash

    dep = wait_for(dyn, "apps/v1", "Deployment", namespace, "roll", rolled, "a new config hash in the pod template")
    assert dep is not None
    cm = wait_for(
        dyn,
        "v1",
        "ConfigMap",
        namespace,
        "roll-config",
        lambda o: o is not None and "max_num_sequences: 8" in o["data"]["models.yml"],
        "the new models.yml",
    )
    assert cm is not None
    new_hash = dep["spec"]["template"]["metadata"]["annotations"][ANNOTATION_CONFIG_HASH]
    status_with(
        dyn,
        namespace,
        "roll",
        "observedGeneration 2",
        lambda o: o.get("status", {}).get("observedGeneration") == 2 and o["status"]["configHash"] == new_hash,
    )
    # A change to an existing LLMSimulator is worth an event (a creation is not: bulk applies).
    event = wait_event(dyn, namespace, KIND, "roll", "Reconciled")
    assert event["type"] == "Normal"
    assert "update" in event["message"]


def test_scale_subresource_drives_the_deployment(dyn: Any, namespace: str) -> None:
    sim = create(dyn, namespace, "scaled", MINIMAL)
    wait_children(dyn, namespace, "scaled", sim["metadata"]["uid"])
    custom = client.CustomObjectsApi(dyn.client)
    # What `kubectl scale llmsim/scaled --replicas=3` and an HPA do.
    custom.patch_namespaced_custom_object_scale(
        "llmsim.io", "v1alpha1", namespace, "llmsimulators", "scaled", {"spec": {"replicas": 3}}
    )
    wait_for(
        dyn,
        "apps/v1",
        "Deployment",
        namespace,
        "scaled",
        lambda o: o is not None and o["spec"]["replicas"] == 3,
        "replicas 3",
    )
    scale = custom.get_namespaced_custom_object_scale("llmsim.io", "v1alpha1", namespace, "llmsimulators", "scaled")
    assert scale["spec"]["replicas"] == 3
    assert scale["status"]["selector"] == "app.kubernetes.io/name=llmsim,app.kubernetes.io/instance=scaled"


def test_status_reflects_the_deployment(dyn: Any, namespace: str) -> None:
    sim = create(dyn, namespace, "ready", MINIMAL | {"replicas": 2})
    wait_children(dyn, namespace, "ready", sim["metadata"]["uid"])
    selector = "app.kubernetes.io/instance=ready"
    pods = wait_for_pods(dyn, namespace, selector, 2)
    status_with(dyn, namespace, "ready", "0/2 ready", lambda o: o.get("status", {}).get("ready") == "0/2")
    # Play kubelet: mark the pods Running and Ready; ReplicaSet -> Deployment -> LLMSimulator status.
    for pod in pods:
        ready = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        merge_patch(dyn, "v1", "Pod", namespace, pod, ready, subresource="status")
    obj = status_with(dyn, namespace, "ready", "Ready=True", lambda o: condition(o, "Ready").get("status") == "True")
    assert obj["status"]["readyReplicas"] == 2
    assert obj["status"]["ready"] == "2/2"
    assert condition(obj, "Ready")["reason"] == "ReplicasReady"


def wait_for_pods(dyn: Any, namespace: str, selector: str, count: int) -> list[str]:
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    names: set[str] = {p.metadata.name for p in pods.get(namespace=namespace, label_selector=selector).items}
    if len(names) < count:
        for event in pods.watch(namespace=namespace, label_selector=selector, timeout=90):
            if event["type"] == "ADDED":
                names.add(event["raw_object"]["metadata"]["name"])
            if len(names) >= count:
                break
    assert len(names) >= count, f"only {len(names)} pods appeared"
    return sorted(names)


def test_delete_garbage_collects_the_children(dyn: Any, namespace: str) -> None:
    sim = create(dyn, namespace, "gone", MINIMAL)
    wait_children(dyn, namespace, "gone", sim["metadata"]["uid"])
    sims(dyn).delete(name="gone", namespace=namespace)
    for api_version, kind, child in (
        ("v1", "ConfigMap", "gone-config"),
        ("apps/v1", "Deployment", "gone"),
        ("v1", "Service", "gone"),
    ):
        wait_for(dyn, api_version, kind, namespace, child, lambda o: o is None, "garbage collection")


def test_deleted_or_edited_children_come_back(dyn: Any, namespace: str) -> None:
    # The operator has no timer: every repair below comes from the watch event of the child.
    sim = create(dyn, namespace, "drift", MINIMAL)
    children = wait_children(dyn, namespace, "drift", sim["metadata"]["uid"])
    for api_version, kind in (("apps/v1", "Deployment"), ("v1", "Service")):
        delete(dyn, api_version, kind, namespace, "drift")
        old_uid = children[kind]["metadata"]["uid"]

        def replaced(o: dict[str, Any] | None, old_uid: str = old_uid) -> bool:
            return o is not None and o["metadata"]["uid"] != old_uid

        wait_for(dyn, api_version, kind, namespace, "drift", replaced, f"a new {kind}")
    # Editing the ConfigMap or the Deployment by hand: the edit's event brings the operator's version back.
    merge_patch(dyn, "v1", "ConfigMap", namespace, "drift-config", {"data": {"models.yml": "tampered"}})
    wait_for(
        dyn,
        "v1",
        "ConfigMap",
        namespace,
        "drift-config",
        lambda o: o is not None and o["data"]["models.yml"] != "tampered",
        "the ConfigMap's repair",
    )
    tampered = {"spec": {"template": {"spec": {"containers": [{"name": "llmsim", "image": "someone:else"}]}}}}
    merge_patch(dyn, "apps/v1", "Deployment", namespace, "drift", tampered)
    wait_for(
        dyn,
        "apps/v1",
        "Deployment",
        namespace,
        "drift",
        lambda o: o is not None and o["spec"]["template"]["spec"]["containers"][0]["image"] == SIM_IMAGE,
        "the Deployment's repair",
    )


def _versions(dyn: Any, namespace: str) -> dict[str, str]:
    """resourceVersion of every LLMSimulator and child in ``namespace``, by kind/name."""
    out = {}
    for api_version, kind in ((API_VERSION, KIND), ("v1", "ConfigMap"), ("apps/v1", "Deployment"), ("v1", "Service")):
        for item in dyn.resources.get(api_version=api_version, kind=kind).get(namespace=namespace).items:
            out[f"{kind}/{item.metadata.name}"] = item.metadata.resourceVersion
    return out


def _settled_versions(dyn: Any, namespace: str) -> dict[str, str]:
    """:func:`_versions` once they stopped changing (the last status updates of a rollout have landed)."""
    previous = _versions(dyn, namespace)
    for _ in range(30):
        time.sleep(2)
        current = _versions(dyn, namespace)
        if current == previous:
            return current
        previous = current
    raise AssertionError(f"objects in {namespace} kept changing for a minute")


def test_a_restart_where_nothing_changed_writes_nothing(dyn: Any, namespace: str, operator: OperatorProcess) -> None:
    names = ["quiet-0", "quiet-1", "quiet-2"]
    for name in names:
        sim = create(dyn, namespace, name, MINIMAL | {"replicas": 0})
        wait_children(dyn, namespace, name, sim["metadata"]["uid"])
    for name in names:
        status_with(dyn, namespace, name, "Ready", lambda o: condition(o, "Ready").get("status") == "True")
    before = _settled_versions(dyn, namespace)
    events = dyn.resources.get(api_version="v1", kind="Event").get(namespace=namespace).items
    operator.stop()
    operator.start()
    # Once a simulator created after the restart has converged, the resumes of the others have run
    # (kopf resumes every object it lists before it sees later events).
    late = create(dyn, namespace, "after-restart", MINIMAL | {"replicas": 0})
    wait_children(dyn, namespace, "after-restart", late["metadata"]["uid"])
    status_with(dyn, namespace, "after-restart", "Ready", lambda o: condition(o, "Ready").get("status") == "True")
    after = _settled_versions(dyn, namespace)
    assert {k: v for k, v in after.items() if "after-restart" not in k} == before  # not one write
    # No new events: the resumes changed nothing, and a creation posts none.
    seen = {e.metadata.uid for e in events}
    new = dyn.resources.get(api_version="v1", kind="Event").get(namespace=namespace).items
    assert [e.involvedObject.name for e in new if e.metadata.uid not in seen] == []


def test_operator_restarted_mid_way_converges(dyn: Any, namespace: str, operator: OperatorProcess) -> None:
    sim = create(dyn, namespace, "restart", MINIMAL)
    wait_children(dyn, namespace, "restart", sim["metadata"]["uid"])
    status_with(
        dyn, namespace, "restart", "observedGeneration 1", lambda o: o.get("status", {}).get("observedGeneration") == 1
    )
    operator.stop()
    try:
        patch_spec(dyn, namespace, "restart", {"replicas": 4, "scheduler": {"blockSize": 32}})
        delete(dyn, "v1", "Service", namespace, "restart")
        late = create(dyn, namespace, "late", MINIMAL)  # created while the operator is down
    finally:
        operator.start()
    wait_for(
        dyn,
        "apps/v1",
        "Deployment",
        namespace,
        "restart",
        lambda o: o is not None and o["spec"]["replicas"] == 4,
        "replicas 4",
    )
    wait_for(dyn, "v1", "Service", namespace, "restart", lambda o: o is not None, "the Service to be recreated")
    cm = wait_for(
        dyn,
        "v1",
        "ConfigMap",
        namespace,
        "restart-config",
        lambda o: o is not None and "block_size: 32" in o["data"]["models.yml"],
        "block_size 32",
    )
    assert cm is not None
    status_with(
        dyn, namespace, "restart", "observedGeneration 2", lambda o: o.get("status", {}).get("observedGeneration") == 2
    )
    wait_children(dyn, namespace, "late", late["metadata"]["uid"])


def test_external_autoscaler_keeps_the_replicas(dyn: Any, namespace: str) -> None:
    sim = create(dyn, namespace, "hpa", MINIMAL | {"replicas": 2})
    wait_children(dyn, namespace, "hpa", sim["metadata"]["uid"])
    wait_for(
        dyn,
        "apps/v1",
        "Deployment",
        namespace,
        "hpa",
        lambda o: o is not None and o["spec"]["replicas"] == 2,
        "replicas 2",
    )
    patch_spec(dyn, namespace, "hpa", {"autoscaling": {"external": True}, "replicas": 9})
    status_with(
        dyn, namespace, "hpa", "observedGeneration 2", lambda o: o.get("status", {}).get("observedGeneration") == 2
    )
    deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
    assert deployments.get(name="hpa", namespace=namespace).spec.replicas == 2  # neither reset to 1 nor set to 9
    # The autoscaler scales the Deployment; the operator's watch of it must leave that alone.
    merge_patch(dyn, "apps/v1", "Deployment", namespace, "hpa", {"spec": {"replicas": 5}}, subresource="scale")
    tampered = merge_patch(dyn, "v1", "ConfigMap", namespace, "hpa-config", {"data": {"models.yml": "x"}})
    wait_for(
        dyn,
        "v1",
        "ConfigMap",
        namespace,
        "hpa-config",
        lambda o: (
            o is not None
            and o["metadata"]["resourceVersion"] != tampered["metadata"]["resourceVersion"]
            and o["data"]["models.yml"] != "x"
        ),
        "the ConfigMap's repair",
    )
    assert deployments.get(name="hpa", namespace=namespace).spec.replicas == 5


def test_service_monitor_follows_the_spec_when_the_api_exists(api: Any, dyn: Any, namespace: str) -> None:
    ext = client.ApiextensionsV1Api(api)
    sm_crd = yaml.safe_load(SERVICE_MONITOR_CRD)
    try:
        ext.create_custom_resource_definition(sm_crd)
    except ApiException as exc:
        if exc.status != 409:
            raise
    fresh = dynamic.DynamicClient(api)
    wait_for(fresh, "apiextensions.k8s.io/v1", "CustomResourceDefinition", "", sm_crd["metadata"]["name"],
             lambda o: condition(o, "Established").get("status") == "True", "the ServiceMonitor CRD")  # fmt: skip
    spec = MINIMAL | {"monitoring": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}}
    sim = create(fresh, namespace, "monitored", spec)
    sm = wait_for(
        fresh,
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        namespace,
        "monitored",
        lambda o: o is not None,
        "the ServiceMonitor",
    )
    assert sm is not None
    assert sm["metadata"]["ownerReferences"][0]["uid"] == sim["metadata"]["uid"]
    assert sm["metadata"]["labels"]["release"] == "prom"
    patch_spec(fresh, namespace, "monitored", {"monitoring": {"serviceMonitor": {"enabled": False}}})
    wait_for(
        fresh, "monitoring.coreos.com/v1", "ServiceMonitor", namespace, "monitored", lambda o: o is None, "its deletion"
    )


def test_pod_disruption_budget_on_a_1_20_server(dyn: Any, namespace: str) -> None:
    # 1.20 serves PodDisruptionBudgets as policy/v1beta1 only; the operator picks that version.
    spec = MINIMAL | {"replicas": 2, "podDisruptionBudget": {"enabled": True}}
    sim = create(dyn, namespace, "budget", spec)
    pdb = wait_for(dyn, "policy/v1beta1", "PodDisruptionBudget", namespace, "budget", lambda o: o is not None,
                   "the PodDisruptionBudget")  # fmt: skip
    assert pdb is not None
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/name": "llmsim", "app.kubernetes.io/instance": "budget"}
    }
    assert pdb["metadata"]["ownerReferences"][0]["uid"] == sim["metadata"]["uid"]
    patch_spec(dyn, namespace, "budget", {"replicas": 1})
    wait_for(dyn, "policy/v1beta1", "PodDisruptionBudget", namespace, "budget", lambda o: o is None,
             "its deletion at one replica")  # fmt: skip


SERVICE_MONITOR_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""


def test_liveness_endpoint_answers(operator: OperatorProcess) -> None:
    # By now the operator has served every scenario above, so its probe server is up.
    with urllib.request.urlopen(operator.liveness, timeout=10) as response:
        assert response.status == 200


#: Breaks getpass as it breaks for uid 65532 without a passwd entry (kopf's crash before the image had one).
NO_PASSWD_ENTRY = """
import getpass
def _no_user():
    raise KeyError("getpwuid(): uid not found: 65532")
getpass.getuser = _no_user
"""


def health_status(url: str) -> int:
    """HTTP status of kopf's /healthz, 0 while nothing listens."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def statuses_for(process: OperatorProcess, seconds: float) -> list[int]:
    """kopf's /healthz answers, once a second, from the first answer on for ``seconds``."""
    deadline = time.monotonic() + 60
    while (first := health_status(process.liveness)) == 0:
        assert time.monotonic() < deadline, f"{process.liveness} never answered:\n{process.log_tail()}"
        time.sleep(0.5)
    seen = [first]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(1)
        seen.append(health_status(process.liveness))
    return seen


@pytest.fixture
def second_operator(
    envtest: EnvTest, api: Any, operator: OperatorProcess, tmp_path: Path
) -> Iterator[Callable[[str], OperatorProcess]]:
    """Start another operator, serving one empty namespace, as a given ServiceAccount of llmsim-system.

    After the module's operator fixture, which installs the namespace and the RBAC of `manifests`.
    """
    started: list[OperatorProcess] = []
    core = client.CoreV1Api(api)

    def start(account: str) -> OperatorProcess:
        with contextlib.suppress(ApiException):
            core.create_namespaced_service_account("llmsim-system", {"metadata": {"name": account}})
        kubeconfig = service_account_kubeconfig(
            api, envtest.server_url, envtest.ca_path, tmp_path / f"{account}.kubeconfig", account=account
        )
        liveness = f"http://127.0.0.1:{free_port()}/healthz"
        process = OperatorProcess(
            kubeconfig, tmp_path / f"{account}.log", "-n", "readiness-probe", "--liveness", liveness,
            prelude=NO_PASSWD_ENTRY,
        )  # fmt: skip
        process.liveness = liveness
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def test_operator_starts_without_a_passwd_entry_and_turns_ready(
    second_operator: Callable[[str], OperatorProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    process = second_operator("llmsim-operator")
    seen = statuses_for(process, 12)
    assert process.process is not None
    assert process.process.poll() is None, process.log_tail()
    assert seen[-1] == 200, f"{seen}\n{process.log_tail()}"
    assert "getpwuid" not in Path(process.log_path).read_text()


def test_operator_without_rbac_stays_not_ready(second_operator: Callable[[str], OperatorProcess]) -> None:
    # A ServiceAccount with no role: kopf starts, but cannot list (or watch) LLMSimulators.
    process = second_operator("llmsim-nobody")
    seen = statuses_for(process, 12)
    assert set(seen) == {500}, f"{seen}\n{process.log_tail()}"
    log = Path(process.log_path).read_text(errors="replace")
    assert "cannot list llmsimulators.llmsim.io" in log, process.log_tail()
    assert "forbidden" in log.lower()


def test_kube_version_detection_and_server_side_apply_on_a_1_20_server(
    envtest: EnvTest, api: Any, dyn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(envtest.kubeconfig_path))
    # hack/envtest-assets.sh stamps its build v1.20.2; a copy of the local cluster's build says v0.0.0,
    # and then its OpenAPI decides. Either way: no CEL on 1.20.
    cel, why = detect_cel()
    assert not cel
    assert why in ("server 1.20", "server version unknown; its OpenAPI lacks x-kubernetes-validations")
    assert server_knows_cel() is False
    crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")

    def apply(body: dict[str, Any]) -> None:
        crds.server_side_apply(body=body, field_manager="llmsim-tests", force_conflicts=True)

    # What a 1.20 server does: it refuses the unknown field under server-side apply ...
    with pytest.raises(ApiException) as refused:
        apply(custom_resource_definition())
    assert "x-kubernetes-validations" in str(refused.value.body)
    # ... and takes what `llmsim-operator manifests --kube-version auto` prints for it.
    apply(custom_resource_definition(cel=False))


def test_discovery_is_asked_once_per_process(operator: OperatorProcess) -> None:
    # Every scenario above reconciled: policy/v1 (PodDisruptionBudget versions) was asked once per
    # operator start; monitoring.coreos.com/v1 at most twice (once more when a ServiceMonitor was
    # wanted and the API had not been served: its CRD was installed meanwhile).
    log = Path(operator.log_path).read_text(errors="replace")
    starts = log.count("llmsim-operator connected")
    assert starts >= 3, operator.log_tail()  # the fixture's start and the two restarts above
    assert log.count("API discovery: policy/v1 ") == starts
    assert log.count("API discovery: monitoring.coreos.com/v1 ") <= 2 * starts


def test_operator_log_has_no_permission_errors(operator: OperatorProcess) -> None:
    # Every scenario above ran as the ServiceAccount; a missing verb shows up as "forbidden".
    # (Events into a namespace being deleted are refused too: that is not RBAC.)
    log = Path(operator.log_path).read_text(errors="replace").splitlines()
    denied = [line for line in log if "forbidden" in line.lower() and "being terminated" not in line]
    assert denied == []


def test_faults_lifecycle_and_keys_reach_the_pods(dyn: Any, namespace: str) -> None:
    from tests.operator.builders import faults_spec

    spec = faults_spec()
    del spec["adminKeySecretRef"]["key"]  # the API server fills in the default key
    sim = create(dyn, namespace, "flaky", spec)
    assert sim["spec"]["adminKeySecretRef"] == {"name": "ops-keys", "key": "admin-key"}
    assert sim["spec"]["faults"]["rates"]["stall"] == 0.1
    children = wait_children(dyn, namespace, "flaky", sim["metadata"]["uid"])
    models = parse_models_yml(children["ConfigMap"])
    assert models["startup_seconds"] == 45
    assert models["models"][0]["faults"]["rates"]["abort_mid_stream"] == 0.02
    pod = children["Deployment"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 30
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/ping"
    env = {e["name"]: e["valueFrom"] for e in container["env"]}
    assert env["LLMSIM_API_KEY"] == {"secretKeyRef": {"name": "llama-keys", "key": "api-key"}}
    assert env["LLMSIM_ADMIN_KEY"] == {"secretKeyRef": {"name": "ops-keys", "key": "admin-key"}}
    assert env["LLMSIM_POD_NAME"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}


def test_a_fault_rate_above_one_is_rejected_by_the_schema(dyn: Any, namespace: str) -> None:
    with pytest.raises(ApiException) as info:
        create(dyn, namespace, "bad", {"model": {"name": "m"}, "faults": {"rates": {"crash": 1.5}}})
    assert info.value.status == 422


PD = MINIMAL | {"replicas": 2, "disaggregation": {"prefill": {"replicas": 1}}, "dataParallel": {"size": 2}}


def _mark_ready(dyn: Any, namespace: str, selector: str, count: int) -> None:
    """Play kubelet for ``count`` pods matching ``selector``."""
    for pod in wait_for_pods(dyn, namespace, selector, count):
        ready = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        merge_patch(dyn, "v1", "Pod", namespace, pod, ready, subresource="status")


def test_a_disaggregated_fleet_has_a_deployment_service_and_status_per_role(dyn: Any, namespace: str) -> None:
    sim = create(dyn, namespace, "pd", PD)
    uid = sim["metadata"]["uid"]

    def owned(o: dict[str, Any] | None) -> bool:
        return o is not None and any(r["uid"] == uid for r in o["metadata"].get("ownerReferences", []))

    for role, replicas in (("prefill", 1), ("decode", 2)):
        dep = wait_for(dyn, "apps/v1", "Deployment", namespace, f"pd-{role}", owned, f"the {role} Deployment")
        assert dep is not None
        assert dep["spec"]["replicas"] == replicas
        assert dep["spec"]["template"]["metadata"]["labels"]["llm-d.ai/role"] == role
        svc = wait_for(dyn, "v1", "Service", namespace, f"pd-{role}", owned, f"the {role} Service")
        assert svc is not None
        assert svc["spec"]["selector"]["llm-d.ai/role"] == role
    cm = wait_for(dyn, "v1", "ConfigMap", namespace, "pd-config", owned, "the ConfigMap")
    assert cm is not None
    assert yaml.safe_load(cm["data"]["models-prefill.yml"])["models"][0]["kv_transfer"]["kv_role"] == "kv_producer"
    assert yaml.safe_load(cm["data"]["models-decode.yml"])["models"][0]["kv_transfer"]["kv_role"] == "kv_consumer"
    # No Service over both roles.
    services = dyn.resources.get(api_version="v1", kind="Service").get(namespace=namespace).items
    assert sorted(s.metadata.name for s in services) == ["pd-decode", "pd-prefill"]

    _mark_ready(dyn, namespace, "app.kubernetes.io/instance=pd,llm-d.ai/role=prefill", 1)
    _mark_ready(dyn, namespace, "app.kubernetes.io/instance=pd,llm-d.ai/role=decode", 2)
    # Reconciled (the endpoints) and Ready (the pods): two writers, either may come first.
    obj = status_with(
        dyn,
        namespace,
        "pd",
        "Ready=True, generation 1 reconciled",
        lambda o: condition(o, "Ready").get("status") == "True" and o["status"].get("observedGeneration") == 1,
    )
    status = obj["status"]
    assert (status["ready"], status["replicas"]) == ("2/2", 2)
    assert status["roles"]["prefill"] == {
        "endpoint": f"http://pd-prefill.{namespace}.svc:8000",
        "replicas": 1,
        "readyReplicas": 1,
        "ready": "1/1",
    }
    assert status["roles"]["decode"]["endpoint"] == f"http://pd-decode.{namespace}.svc:8000"
    assert status["gpus"] == (1 + 2) * 2
    assert "endpoint" not in status

    # kubectl scale (the scale subresource) scales decode; prefill is patched.
    custom = client.CustomObjectsApi(dyn.client)
    custom.patch_namespaced_custom_object_scale(
        "llmsim.io", "v1alpha1", namespace, "llmsimulators", "pd", {"spec": {"replicas": 3}}
    )
    patch_spec(dyn, namespace, "pd", {"disaggregation": {"prefill": {"replicas": 2}}})
    for role, replicas in (("decode", 3), ("prefill", 2)):

        def scaled(o: dict[str, Any] | None, n: int = replicas) -> bool:
            return o is not None and o["spec"]["replicas"] == n

        wait_for(dyn, "apps/v1", "Deployment", namespace, f"pd-{role}", scaled, f"{role} replicas {replicas}")
    scale = custom.get_namespaced_custom_object_scale("llmsim.io", "v1alpha1", namespace, "llmsimulators", "pd")
    assert (
        scale["status"]["selector"]
        == "app.kubernetes.io/name=llmsim,app.kubernetes.io/instance=pd,llm-d.ai/role=decode"
    )

    # Back to the aggregated form: its Deployment and Service come, the roles' go.
    patch_spec(dyn, namespace, "pd", {"disaggregation": None})
    wait_for(dyn, "apps/v1", "Deployment", namespace, "pd", owned, "the aggregated Deployment")
    wait_for(dyn, "v1", "Service", namespace, "pd", owned, "the aggregated Service")
    for kind, api_version in (("Deployment", "apps/v1"), ("Service", "v1")):
        for role in ("prefill", "decode"):
            wait_for(dyn, api_version, kind, namespace, f"pd-{role}", lambda o: o is None, f"the {role} {kind} gone")
    obj = status_with(dyn, namespace, "pd", "the aggregated endpoint", lambda o: "endpoint" in o.get("status", {}))
    assert obj["status"]["endpoint"] == f"http://pd.{namespace}.svc:8000"
    assert "roles" not in obj["status"]


def test_disaggregation_on_an_engine_without_a_kv_cache_is_refused(dyn: Any, api: Any, namespace: str) -> None:
    spec = {"model": {"name": "m"}, "engine": "fixed", "disaggregation": {}}
    if int(client.VersionApi(api).get_code().minor.rstrip("+")) >= 25:
        with pytest.raises(ApiException) as info:
            create(dyn, namespace, "nokv", spec)
        assert info.value.status == 422
        return
    # 1.20 has no CEL: the operator's own check refuses it.
    create(dyn, namespace, "nokv", spec)
    obj = status_with(
        dyn, namespace, "nokv", "Degraded=True", lambda o: condition(o, "Degraded").get("status") == "True"
    )
    degraded = condition(obj, "Degraded")
    assert (degraded["reason"], degraded["message"]) == (
        "InvalidSpec",
        "disaggregation needs engine: scheduler (the other engines have no KV cache to hand over)",
    )
    assert dyn.resources.get(api_version="apps/v1", kind="Deployment").get(namespace=namespace).items == []
