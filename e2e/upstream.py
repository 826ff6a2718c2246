"""Real projects' vLLM manifests (e2e/data/upstream/), and the one transform that runs them on llmsim's image.

Each stored file is an upstream manifest, verbatim; its header names the repository, path and
commit. :func:`for_this_cluster` changes only what docs/vllm-cli.md ("Upstream manifests") lists:
the image, the GPU requests, and what this cluster lacks (a GPU runtime class and GPU nodes, a
volume provisioner, a registry to pull from, CPUs sized for a GPU host). Everything else, the vLLM
command line first, reaches the cluster as upstream wrote it; tests/commands/test_upstream_manifests.py
checks that the transform touches nothing else and that llmsim's vLLM parser accepts each command line.
"""

from __future__ import annotations

import copy
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

UPSTREAM = Path(__file__).parent / "data" / "upstream"
PRODUCTION_STACK = UPSTREAM / "production-stack" / "engine-qwen05b.yaml"
LLM_D_DECODE = UPSTREAM / "llm-d" / "patch-decode.yaml"
LLM_D_PREFILL = UPSTREAM / "llm-d" / "patch-prefill.yaml"
LLM_D_PREFILL_BASE = UPSTREAM / "llm-d" / "prefill-deployment.yaml"
#: llm-d's inference-scheduling guide's model server (its Helm chart, rendered): Qwen3-32B at TP 2, served as is.
LLM_D_INFERENCE_SCHEDULING = UPSTREAM / "llm-d" / "inference-scheduling-decode.yaml"
#: llm-d's P/D guide serves a model llmsim does not simulate (docs/vllm-cli.md says why none is guessed):
#: its e2e run serves this one in its place, the one change beyond the transform.
LLM_D_MODEL = "openai/gpt-oss-120b"
LLM_D_SIMULATED_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
KSERVE_RUNTIME = UPSTREAM / "kserve" / "kserve-vllmserver.yaml"
#: What KServe's storage initializer would have downloaded for storageUri hf://Qwen/Qwen2.5-0.5B-Instruct:
#: here only the checkpoint's config.json (the model card's), which is all vLLM's flags need of it.
KSERVE_MODEL_CONFIG = UPSTREAM / "kserve" / "Qwen2.5-0.5B-Instruct-config.json"
#: The InferenceService whose predictor the runtime becomes; KServe fills the runtime's {{.Name}} with it.
KSERVE_ISVC = "qwen"
#: Where KServe mounts the downloaded model (its DefaultModelLocalMountPath).
KSERVE_MODEL_DIR = "/mnt/models"
#: The port KServe's vLLM runtime serves on (its --port=8080).
KSERVE_PORT = 8080

#: The vLLM entry points a manifest may run (both answered by the image's shims, deploy/vllm-shim/).
_API_SERVER = ["-m", "vllm.entrypoints.openai.api_server"]
#: What one pod may ask of this cluster's one node (2 CPUs, 24 GiB, shared by every e2e test): upstream
#: sizes its requests for a GPU host's CPUs and memory, which a request above this never gets here.
POD_CPUS = 2.0
POD_MEMORY_GIB = 4.0
#: Resources a GPU node has and this cluster does not.
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")


def load(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of one stored manifest (its header comment aside)."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [d for d in docs if d.get("kind") == "Deployment"]
    return found


def container_argv(container: dict[str, Any]) -> list[str]:
    """The process a container runs: its command, then its args."""
    return [str(a) for a in (*container.get("command", []), *container.get("args", []))]


def vllm_flags(argv: list[str]) -> list[str]:
    """vLLM's arguments in a container's command line: what follows ``vllm serve`` or
    ``python -m vllm.entrypoints.openai.api_server``."""
    if argv[:2] == ["vllm", "serve"] or (argv[0].endswith("/vllm") and argv[1:2] == ["serve"]):
        return argv[2:]
    if argv[0] in ("python", "python3") and argv[1:3] == _API_SERVER:
        return argv[3:]
    raise ValueError(f"not a vLLM server's command line: {argv}")


def kserve_objects(runtime: dict[str, Any], isvc: str = KSERVE_ISVC) -> list[dict[str, Any]]:
    """The Deployment and Service KServe's controller makes (raw deployment mode) for an InferenceService
    ``isvc`` of this runtime: the runtime's container with {{.Name}} filled in, the model volume its
    storage initializer fills mounted at /mnt/models, its predictor Service (port 80 to the container's).

    KServe's controller is not on this cluster: this is the pod spec it would produce, by hand.
    """
    spec = runtime["spec"]
    (container,) = copy.deepcopy(spec["containers"])
    container["args"] = [a.replace("{{.Name}}", isvc) for a in container.get("args", [])]
    container.setdefault("ports", [{"name": "http1", "containerPort": KSERVE_PORT, "protocol": "TCP"}])
    container.setdefault("volumeMounts", []).append(
        {"name": "kserve-provision-location", "mountPath": KSERVE_MODEL_DIR, "readOnly": True}
    )
    name = f"{isvc}-predictor"
    labels = {"app": f"isvc.{name}", "serving.kserve.io/inferenceservice": isvc}
    pod: dict[str, Any] = {
        "containers": [container],
        "volumes": [*copy.deepcopy(spec.get("volumes", [])), {"name": "kserve-provision-location", "emptyDir": {}}],
    }
    if "hostIPC" in spec:
        pod["hostIPC"] = spec["hostIPC"]
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "labels": labels, "annotations": dict(spec.get("annotations", {}))},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": f"isvc.{name}"}},
                "template": {"metadata": {"labels": labels}, "spec": pod},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "selector": {"app": f"isvc.{name}"},
                "ports": [{"name": "http", "port": 80, "targetPort": KSERVE_PORT, "protocol": "TCP"}],
            },
        },
    ]


def kserve_model_configmap(name: str) -> dict[str, Any]:
    """A ConfigMap holding the checkpoint's config.json: the storage initializer's download, on a cluster
    that cannot reach Hugging Face."""
    config = json.loads(KSERVE_MODEL_CONFIG.read_text())
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"config.json": json.dumps(config, indent=2)}}  # fmt: skip


def llm_d_prefill() -> list[dict[str, Any]]:
    """llm-d's prefill Deployment as its guide builds it: kustomize's strategic merge of the guide's patch
    over the base (``kubectl kustomize``, the kustomize the guide's ``kubectl apply -k`` runs)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "base.yaml").write_text(LLM_D_PREFILL_BASE.read_text())
        (work / "patch.yaml").write_text(LLM_D_PREFILL.read_text())
        (work / "kustomization.yaml").write_text("resources: [base.yaml]\npatches:\n  - path: patch.yaml\n")
        built = subprocess.run(["kubectl", "kustomize", tmp], capture_output=True, text=True, check=True, timeout=60)
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc]


def swap_model(doc: dict[str, Any], model: str, served_instead: str) -> dict[str, Any]:
    """``doc`` with its containers' model argument ``model`` replaced by ``served_instead``."""
    out = copy.deepcopy(doc)
    for container in out["spec"]["template"]["spec"]["containers"]:
        container["args"] = [served_instead if a == model else a for a in container.get("args", [])]
    return out


def _cpus(quantity: Any) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


#: Kubernetes' binary and decimal memory suffixes, in GiB.
_MEMORY_UNITS = {"Ki": 2**-20, "Mi": 2**-10, "Gi": 1.0, "Ti": 2**10, "K": 1e3 / 2**30, "M": 1e6 / 2**30,
                 "G": 1e9 / 2**30, "T": 1e12 / 2**30}  # fmt: skip


def _gib(quantity: Any) -> float:
    text = str(quantity)
    for unit in sorted(_MEMORY_UNITS, key=len, reverse=True):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * _MEMORY_UNITS[unit]
    return float(text) / 2**30


def for_this_cluster(doc: dict[str, Any], image: str, namespace: str) -> dict[str, Any]:
    """``doc`` as this cluster runs it: llmsim's image, no GPU, nothing this cluster lacks; the rest untouched."""
    out = copy.deepcopy(doc)
    out["metadata"]["namespace"] = namespace
    if out.get("kind") != "Deployment":
        return out
    # One pod each: upstream's replica counts size a fleet (llm-d's guide: 8 prefill pods).
    out["spec"]["replicas"] = 1
    pod = out["spec"]["template"]["spec"]
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        container["image"] = image
        # Built into the node's containerd, in no registry: "Always" would try to pull it.
        if container.get("imagePullPolicy") == "Always":
            container["imagePullPolicy"] = "IfNotPresent"
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            section = resources.get(kind) or {}
            for gpu in GPU_RESOURCES:
                section.pop(gpu, None)
            if "cpu" in section and _cpus(section["cpu"]) > POD_CPUS:
                del section["cpu"]
            if "memory" in section and _gib(section["memory"]) > POD_MEMORY_GIB:
                del section["memory"]
    # GPU nodes: their runtime class, node selection and taints.
    for key in ("runtimeClassName", "nodeSelector", "tolerations"):
        pod.pop(key, None)
    if "affinity" in pod:
        pod["affinity"].pop("nodeAffinity", None)
        if not pod["affinity"]:
            del pod["affinity"]
    # No volume provisioner, no model cache on the node: the cache starts empty, as on a new node.
    for volume in pod.get("volumes", []):
        for source in ("persistentVolumeClaim", "hostPath"):
            if volume.pop(source, None) is not None:
                volume["emptyDir"] = {}
    return out


def kserve_provision(doc: dict[str, Any], configmap: str) -> dict[str, Any]:
    """The predictor with its model volume holding ``configmap`` (the checkpoint's config.json) instead of
    what KServe's storage initializer downloads from Hugging Face, which this cluster cannot reach."""
    out = copy.deepcopy(doc)
    for volume in out["spec"]["template"]["spec"]["volumes"]:
        if volume["name"] == "kserve-provision-location":
            volume.pop("emptyDir", None)
            volume["configMap"] = {"name": configmap}
    return out
