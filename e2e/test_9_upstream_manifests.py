"""Real projects' vLLM manifests, with only the image swapped, on the cluster (docs/vllm-cli.md, "Upstream manifests").

vLLM production-stack's engine Deployment and Service (its Helm chart, rendered from a tutorial's values),
the predictor KServe's controller makes from its vLLM ClusterServingRuntime (the controller is not on
this cluster: e2e/upstream.py builds the Deployment and Service it would), llm-d's inference-scheduling
model server (the llm-d-modelservice chart, rendered from the guide's values: Qwen3-32B at TP 2) and
llm-d's P/D prefill Deployment (its guide's patch over its base, by kubectl kustomize) run on the image
e2e/run.sh built, changed only by e2e/upstream.py's transform: image, GPU, what this cluster lacks.
llm-d's P/D guide serves gpt-oss-120b, which llmsim does not simulate: that pod serves Llama 3.1 8B in
its place, the one change beyond the transform; every other flag of its command line is upstream's.
Each must become Ready through its own probes, answer a chat completion through its Service (the API
server's proxy) or its pod and export vLLM's metrics under the name its manifest serves. All start at
once: their probes' initial delays (15 s to 30 s, upstream's) overlap.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import kubernetes
import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e import upstream
from e2e.cluster import Cluster, deleting_namespace, kubectl, sum_samples, wait_for
from e2e.conftest import WATCHED

pytestmark = pytest.mark.e2e

kube_utils: Any = kubernetes.utils

#: Upstream's startup probes allow minutes (a real model load); llmsim is up in seconds after their delay.
READY_WITHIN = 180.0
KSERVE_MODEL_CONFIGMAP = "qwen-model"


@dataclass(frozen=True)
class Case:
    name: str
    docs: list[dict[str, Any]]
    #: Its Service and port name (the API server's service proxy), or None: the pod proxy.
    service: str | None
    service_port: str
    container_port: int
    #: The model name the manifest serves: responses and metrics carry it.
    served: str


CASES = [
    Case(
        name="production-stack",
        docs=upstream.load(upstream.PRODUCTION_STACK),
        service="vllm-qwen05b-engine-service",
        service_port="service-port",
        container_port=8000,
        served="Qwen/Qwen2.5-0.5B-Instruct",
    ),
    Case(
        name="kserve",
        docs=upstream.kserve_objects(upstream.load(upstream.KSERVE_RUNTIME)[0]),
        service=f"{upstream.KSERVE_ISVC}-predictor",
        service_port="http",
        container_port=upstream.KSERVE_PORT,
        served=upstream.KSERVE_ISVC,
    ),
    # llm-d's guides put their pods behind an InferencePool (no Service): straight to the pod.
    Case(
        name="llm-d-inference-scheduling",
        docs=upstream.load(upstream.LLM_D_INFERENCE_SCHEDULING),
        service=None,
        service_port="",
        container_port=8000,
        served="Qwen/Qwen3-32B",
    ),
    Case(
        name="llm-d-prefill",
        docs=[
            upstream.swap_model(d, upstream.LLM_D_MODEL, upstream.LLM_D_SIMULATED_MODEL)
            for d in upstream.llm_d_prefill()
        ],
        service=None,
        service_port="",
        container_port=8000,
        served=upstream.LLM_D_SIMULATED_MODEL,
    ),
]
#: What llm-d's guides have their users create before applying them: the Hugging Face token's Secret (both
#: guides), and the ServiceAccount of the P/D base kustomization (name "sa"; the chart renders its own).
LLM_D_PREREQUISITES: list[dict[str, Any]] = [
    {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "llm-d-hf-token"},
        "stringData": {"HF_TOKEN": "unused"},
    },
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}},
]


def pod_selector(case: Case) -> str:
    labels = upstream.deployment(case.docs)["spec"]["selector"]["matchLabels"]
    return ",".join(f"{k}={v}" for k, v in labels.items())


@pytest.fixture(scope="module")
def deployed(cluster: Cluster) -> Iterator[str]:
    """A namespace with every case applied (transformed) and Ready."""
    image = os.environ.get("E2E_SIMULATOR_IMAGE", "llmsim:e2e")
    with deleting_namespace(cluster, f"llmsim-upstream-{uuid.uuid4().hex[:6]}") as ns:
        WATCHED.append(ns)
        for prerequisite in [upstream.kserve_model_configmap(KSERVE_MODEL_CONFIGMAP), *LLM_D_PREREQUISITES]:
            kube_utils.create_from_dict(cluster.api, prerequisite, namespace=ns)
        for case in CASES:
            for doc in case.docs:
                obj = upstream.for_this_cluster(doc, image, ns)
                if case.name == "kserve" and obj["kind"] == "Deployment":
                    obj = upstream.kserve_provision(obj, KSERVE_MODEL_CONFIGMAP)
                kube_utils.create_from_dict(cluster.api, obj, namespace=ns)
        for case in CASES:
            name = upstream.deployment(case.docs)["metadata"]["name"]

            def ready(name: str = name) -> bool:
                status = cluster.apps.read_namespaced_deployment_status(name, ns).status
                return (status.ready_replicas or 0) >= 1

            wait_for(f"{case.name}'s Deployment {ns}/{name} Ready", ready, READY_WITHIN, every=2.0)
        yield ns


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_an_upstream_manifest_serves_a_chat_completion_and_vllms_metrics(
    cluster: Cluster, deployed: str, case: Case
) -> None:
    (pod,) = cluster.ready_pods(deployed, pod_selector(case))
    pod_base = cluster.pod_proxy_path(deployed, pod.metadata.name, case.container_port)
    base = (
        pod_base
        if case.service is None
        else f"/api/v1/namespaces/{deployed}/services/{case.service}:{case.service_port}/proxy"
    )
    with cluster.http() as http:
        response = http.post(
            f"{base}/v1/chat/completions",
            json={"model": case.served, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8},
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["model"] == case.served
        assert body["usage"]["completion_tokens"] >= 1
        assert body["choices"][0]["message"]["content"]
        text = http.get(pod_base + "/metrics").text
    metrics = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert sum_samples(metrics, "vllm:request_success_total", model_name=case.served) >= 1
    assert sum_samples(metrics, "vllm:generation_tokens_total", model_name=case.served) >= 1


def test_production_stacks_gpu_only_flag_is_named_in_the_warning(deployed: str) -> None:
    (case,) = [c for c in CASES if c.name == "production-stack"]
    log = kubectl("-n", deployed, "logs", "-l", pod_selector(case), "--tail=200")
    # --enforce-eager turns CUDA graphs off: accepted, without effect, and said so once at startup.
    assert "accepted without effect on the simulation" in log
    assert "--enforce-eager" in log


def test_llm_ds_prefill_pod_answers_a_prefill_leg_as_a_nixl_producer(cluster: Cluster, deployed: str) -> None:
    """The prefill leg llm-d's routing sidecar sends (vLLM's toy proxy's fields): the answer hands the decode
    leg the blocks and where to pull them, from the manifest's own NIXL settings."""
    (case,) = [c for c in CASES if c.name == "llm-d-prefill"]
    (pod,) = cluster.ready_pods(deployed, pod_selector(case))
    leg = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
           "remote_block_ids": None, "remote_host": None, "remote_port": None}  # fmt: skip
    with cluster.http() as http:
        response = http.post(
            cluster.pod_proxy_path(deployed, pod.metadata.name, case.container_port) + "/v1/chat/completions",
            json={
                "model": case.served,
                "messages": [{"role": "user", "content": "Hello"}],
                "max_tokens": 1,
                "kv_transfer_params": leg,
            },
        )
    assert response.status_code == 200, response.text
    params = response.json()["kv_transfer_params"]
    assert params["do_remote_prefill"] is True
    assert params["remote_block_ids"]
    # VLLM_NIXL_SIDE_CHANNEL_HOST is the pod's IP (the manifest's fieldRef); the port is vLLM's default,
    # the manifest's "nixl" containerPort 5600; --tensor-parallel-size=1.
    assert (params["remote_host"], params["remote_port"], params["tp_size"]) == (pod.status.pod_ip, 5600, 1)


def test_llm_ds_inference_scheduling_pod_serves_qwen3_32b_on_two_simulated_gpus(
    cluster: Cluster, deployed: str
) -> None:
    """The rendered command line reached the server whole: the model's own context, and the KV cache
    its --tensor-parallel-size 2 and --gpu-memory-utilization=0.95 leave on each simulated H100 80GB."""
    (case,) = [c for c in CASES if c.name == "llm-d-inference-scheduling"]
    (pod,) = cluster.ready_pods(deployed, pod_selector(case))
    base = cluster.pod_proxy_path(deployed, pod.metadata.name, case.container_port)
    with cluster.http() as http:
        models = http.get(f"{base}/v1/models").json()["data"]
        text = http.get(f"{base}/metrics").text
    # No --max-model-len: vLLM serves config.json's max_position_embeddings.
    assert [(m["id"], m["max_model_len"]) for m in models] == [("Qwen/Qwen3-32B", 40960)]
    (labels,) = [
        s.labels for f in text_string_to_metric_families(text) for s in f.samples if s.name == "vllm:cache_config_info"
    ]
    # vLLM's num_gpu_blocks, per rank: (HBM x utilisation - half of the 32.8 B bf16 weights) / 16-token blocks
    # of 4 of the 8 KV heads (64 layers, head_dim 128, K and V in bf16).
    per_gpu = 0.95 * 80 * 2**30 - 32.8e9 * 2 / 2
    block = 64 * 4 * 128 * 2 * 2 * 16
    assert (labels["gpu_memory_utilization"], labels["num_gpu_blocks"]) == ("0.95", str(math.floor(per_gpu / block)))
