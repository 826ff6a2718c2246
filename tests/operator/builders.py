"""Small LLMSimulator specs and objects for the operator tests."""

from __future__ import annotations

import copy
from typing import Any

from llmsim_operator.conventions import API_VERSION, KIND

NAMESPACE = "team-a"
UID = "0b5c2f3e-1111-4222-8333-944455556666"


def minimal_spec() -> dict[str, Any]:
    """The smallest useful spec: a served name and a built-in model profile."""
    return {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "profile": "llama-3.1-8b"}}


def full_spec() -> dict[str, Any]:
    """A spec touching every section."""
    return {
        "model": {
            "name": "custom-13b",
            "parametersBillions": 13.0,
            "bytesPerParameter": 1,
            "kvBytesPerToken": 409600,
            "contextLength": 8192,
        },
        "hardware": {"hbmGiB": 48, "memoryBandwidthGBps": 864, "peakTFLOPS": 362},
        "engine": "scheduler",
        "scheduler": {"maxBatchTokens": 4096, "maxNumSequences": 64, "blockSize": 32, "gpuMemoryUtilization": 0.85},
        "latency": {"stepOverheadMs": 1.5},
        "efficiency": {"compute": 0.6, "memory": 0.8},
        "legacyMetrics": True,
        "responses": {"inline": "version: 1\nresponses: []\n"},
        "replicas": 3,
        "image": "registry.example/llmsim:dev",
        "imagePullPolicy": "IfNotPresent",
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": 2, "memory": "1Gi"}},
        "podTemplate": {
            "labels": {"inference-pool": "llama", "app.kubernetes.io/name": "user-tries-to-override"},
            "annotations": {"team": "a"},
            "nodeSelector": {"kubernetes.io/arch": "amd64"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "sim", "effect": "NoSchedule"}],
        },
        "service": {"type": "NodePort", "port": 9000},
        "monitoring": {"serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prom"}}},
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": "34%"},
    }


def faults_spec() -> dict[str, Any]:
    """Fault injection, a slow start, a shutdown grace and keys from Secrets."""
    return {
        "model": {"name": "flaky", "profile": "qwen2.5-0.5b"},
        "hardware": {"profile": "l4-24gb"},
        "faults": {
            "seed": 42,
            "rates": {"rateLimit": 0.05, "serverError": 0.01, "abortMidStream": 0.02, "stall": 0.1, "crash": 0.001},
            "stallMs": 2500,
            "slowFactor": 4,
            "headerOverride": True,
        },
        "startupSeconds": 45,
        "shutdownTimeoutSeconds": 20,
        "apiKeySecretRef": {"name": "llama-keys"},
        "adminKeySecretRef": {"name": "ops-keys", "key": "token"},
    }


def simulator(name: str = "llama", spec: dict[str, Any] | None = None, generation: int = 1) -> dict[str, Any]:
    """An LLMSimulator object as the API server returns it (before the operator writes status)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": UID,
            "generation": generation,
            "resourceVersion": "1",
        },
        "spec": copy.deepcopy(spec if spec is not None else minimal_spec()),
    }


def disaggregated_spec() -> dict[str, Any]:
    """A P/D fleet with two data-parallel ranks per pod behind external load balancing, over TLS."""
    return {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "profile": "llama-3.1-8b"},
        "replicas": 3,
        "disaggregation": {
            "prefill": {"replicas": 2},
            "link": {"bandwidthGbps": 25, "latencyMs": 1},
            "abortRequestTimeoutSeconds": 60,
        },
        "dataParallel": {"size": 2, "loadBalancing": "external"},
        "tls": {"secretName": "llama-tls"},
        "monitoring": {"serviceMonitor": {"enabled": True}},
        "podDisruptionBudget": {"enabled": True},
    }
