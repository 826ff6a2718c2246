"""InferencePool and InferenceObjectives against a real kube-apiserver (envtest) with the upstream GIE CRDs.

The operator starts before the GIE CRDs exist (the status says so, nothing is created); once they
are installed it creates the pool without a restart. The pool's selector is checked against the
pods the controller-manager creates for the Deployment (no kubelet: they stay Pending, which does
not matter to a label selector).

    export KUBEBUILDER_ASSETS="$(hack/envtest-assets.sh)"
    pytest tests/operator/test_inference_pool_kube.py
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmsim_operator.conventions import API_VERSION, KIND
from llmsim_operator.crd import custom_resource_definition
from tests.kube.envtest import EnvTest, EnvTestError, find_assets
from tests.operator.cluster import (
    OperatorProcess,
    client,
    condition,
    dynamic,
    install_rbac,
    service_account_kubeconfig,
    simulator_body,
    wait_for,
)
from tests.operator.gie import gie_crds

pytestmark = pytest.mark.kube

POOL_API, OBJECTIVE_API = "inference.networking.k8s.io/v1", "inference.networking.x-k8s.io/v1alpha2"
PICKER = {"name": "epp", "kind": "Service", "port": {"number": 9002}}
SPEC = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "profile": "llama-3.1-8b"},
    "replicas": 2,
    "inferencePool": {"endpointPickerRef": PICKER, "objectives": [{"priority": 10}]},
}


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
    cfg = client.Configuration()
    cfg.host = envtest.server_url
    cfg.ssl_ca_cert = str(envtest.ca_path)
    cfg.api_key = {"authorization": f"Bearer {envtest.token}"}
    api_client = client.ApiClient(cfg)
    yield api_client
    api_client.close()


def established(api: Any, crd: dict[str, Any], kubeconfig: Path | None = None) -> None:
    if kubeconfig is None:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    else:
        # kubectl, as users install them: the typed client would send GIE's `default: ""` as null.
        kubectl = str(find_assets() / "kubectl")
        subprocess.run(
            [kubectl, "--kubeconfig", str(kubeconfig), "create", "-f", "-"],
            input=json.dumps(crd),
            text=True,
            check=True,
        )
    wait_for(
        dynamic.DynamicClient(api),
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "",
        crd["metadata"]["name"],
        lambda o: condition(o, "Established").get("status") == "True",
        "the CRD to be established",
    )


@pytest.fixture(scope="module")
def operator(envtest: EnvTest, api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    established(api, custom_resource_definition(cel=False))
    install_rbac(api)
    tmp = tmp_path_factory.mktemp("operator")
    kubeconfig = service_account_kubeconfig(api, envtest.server_url, envtest.ca_path, tmp / "kubeconfig")
    process = OperatorProcess(kubeconfig, tmp / "operator.log", "--simulator-image", "llmsim:envtest")
    process.start()
    yield process
    process.stop()


def pod_names(api: Any, namespace: str, selector: dict[str, str]) -> set[str]:
    label_selector = ",".join(f"{k}={v}" for k, v in selector.items())
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=label_selector).items
    return {p.metadata.name for p in pods if p.metadata.deletion_timestamp is None}


def test_pool_after_the_crds_arrive_selects_exactly_the_fleet_and_goes_with_it(
    api: Any, envtest: EnvTest, operator: OperatorProcess
) -> None:
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    custom = client.CustomObjectsApi(api)
    for name, spec in (("llama", SPEC), ("other", {**SPEC, "inferencePool": None, "replicas": 1})):
        body = simulator_body(name, {k: v for k, v in spec.items() if v is not None})
        custom.create_namespaced_custom_object("llmsim.io", "v1alpha1", namespace, "llmsimulators", body)
    dyn = dynamic.DynamicClient(api)

    # No GIE CRDs yet: the status says so.
    waiting = wait_for(
        dyn,
        API_VERSION,
        KIND,
        namespace,
        "llama",
        lambda o: condition(o, "InferencePool").get("reason") == "APINotServed",
        "the InferencePool condition to say the API is not served",
    )
    assert condition(waiting, "InferencePool")["status"] == "False"
    assert condition(waiting, "Degraded")["status"] == "False"

    for crd in gie_crds():  # installed while the operator runs
        established(api, crd, envtest.kubeconfig_path)
    dyn = dynamic.DynamicClient(api)  # fresh discovery
    pool = wait_for(dyn, POOL_API, "InferencePool", namespace, "llama", lambda o: o is not None, "the InferencePool")
    objective = wait_for(
        dyn,
        OBJECTIVE_API,
        "InferenceObjective",
        namespace,
        "meta-llama-llama-3-1-8b-instruct",
        lambda o: o is not None,
        "the InferenceObjective",
    )
    assert pool is not None
    assert objective is not None
    assert objective["spec"]["poolRef"]["name"] == "llama"
    assert objective["spec"]["priority"] == 10
    assert pool["spec"]["endpointPickerRef"]["name"] == "epp"
    assert pool["spec"]["endpointPickerRef"]["port"] == {"number": 9002}
    done = wait_for(
        dyn,
        API_VERSION,
        KIND,
        namespace,
        "llama",
        lambda o: condition(o, "InferencePool").get("status") == "True",
        "the InferencePool condition to turn True",
    )
    assert condition(done, "InferencePool")["reason"] == "Created"

    # The selector picks exactly the Deployment's pods: the controller-manager's ReplicaSet makes 2.
    deployment = client.AppsV1Api(api).read_namespaced_deployment("llama", namespace)
    fleet: set[str] = set()
    for _ in range(60):
        fleet = pod_names(api, namespace, deployment.spec.selector.match_labels)
        if len(fleet) == 2:
            break
        time.sleep(1)
    assert len(fleet) == 2
    assert pod_names(api, namespace, pool["spec"]["selector"]["matchLabels"]) == fleet
    assert pod_names(api, namespace, {"app.kubernetes.io/instance": "other"})  # the other fleet has pods
    container = deployment.spec.template.spec.containers[0]
    http = sorted(p.container_port for p in container.ports if p.name == "http" or p.name.startswith("http-"))
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == http == [8000]

    # Deleted with its LLMSimulator (owner references; no finalizer).
    custom.delete_namespaced_custom_object("llmsim.io", "v1alpha1", namespace, "llmsimulators", "llama")
    wait_for(dyn, POOL_API, "InferencePool", namespace, "llama", lambda o: o is None, "the pool to be collected")
    wait_for(
        dyn,
        OBJECTIVE_API,
        "InferenceObjective",
        namespace,
        "meta-llama-llama-3-1-8b-instruct",
        lambda o: o is None,
        "the objective to be collected",
    )
