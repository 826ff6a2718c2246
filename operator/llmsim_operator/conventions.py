"""Names the operator shares with the cluster: API group, labels, annotations, field manager."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GROUP = "llmsim.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "LLMSimulator"
PLURAL = "llmsimulators"
SINGULAR = "llmsimulator"
SHORT_NAMES = ("llmsim",)

#: Server-side apply field manager of every child object.
FIELD_MANAGER = "llmsim-operator"
#: Second manager that only co-owns a Deployment's replicas while handing them to an autoscaler.
HANDOVER_FIELD_MANAGER = "llmsim-operator-handover"
#: Prefix of kopf's own annotations (progress, last-handled configuration) and of our finalizer.
PERSISTENCE_PREFIX = GROUP

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
APP_NAME = "llmsim"
MANAGED_BY = "llmsim-operator"

#: Pod-template annotation holding the hash of the ConfigMap data: a config change rolls the pods.
ANNOTATION_CONFIG_HASH = f"{GROUP}/config-hash"

#: Paths inside the simulator container; the image's entrypoint is ``llmsim serve``.
CONFIG_DIR = "/etc/llmsim"
MODELS_KEY = "models.yml"
RESPONSES_KEY = "responses.yml"
CONTAINER_PORT = 8000
CONTAINER_NAME = "llmsim"
#: KV-cache events: vLLM's default PUB port, and the topic llm-d's indexer parses (kv@<pod-ip>@<model>).
KV_EVENTS_PORT = 5557
KV_EVENTS_TOPIC = "kv@{pod_ip}@{model}"
#: llm-d's pod role label (its endpoint picker and routing sidecar read it): prefill | decode | both.
ROLE_LABEL = "llm-d.ai/role"
#: The roles of a disaggregated fleet, each its own Deployment, Service and models.yml; the last one
#: is the role the scale subresource (spec.replicas) drives.
PREFILL, DECODE = "prefill", "decode"
DISAGGREGATED_ROLES = (PREFILL, DECODE)
#: Role of an aggregated fleet's one Deployment (no role label).
AGGREGATED = ""
#: Where a kubernetes.io/tls Secret (tls.crt, tls.key) is mounted in the simulator container.
TLS_DIR = "/etc/llmsim-tls"
#: NIXL's side-channel port (vLLM's VLLM_NIXL_SIDE_CHANNEL_PORT default); data-parallel rank r adds r.
SIDE_CHANNEL_PORT = 5600
#: Where a tokenizer ConfigMap is mounted in the simulator container.
TOKENIZER_DIR = "/etc/llmsim-tokenizer"
TOKENIZER_FILE = "tokenizer.json"
#: Non-root uid/gid of the simulator image (distroless "nonroot").
RUN_AS_USER = 65532

#: llmsim.__version__, which the operator may not import; tests/test_version.py keeps them equal.
RELEASE_VERSION = "0.1.0"
DEFAULT_SIMULATOR_IMAGE = f"ghcr.io/llmsim/llmsim:{RELEASE_VERSION}"
DEFAULT_OPERATOR_IMAGE = f"ghcr.io/llmsim/llmsim-operator:{RELEASE_VERSION}"


def selector_labels(name: str, role: str = AGGREGATED) -> dict[str, str]:
    """Labels that select one simulator's pods, or one role's (immutable in a Deployment: never add to them)."""
    labels = {LABEL_NAME: APP_NAME, LABEL_INSTANCE: name}
    return {**labels, ROLE_LABEL: role} if role else labels


def common_labels(name: str, role: str = AGGREGATED) -> dict[str, str]:
    """Labels on every child object (a role's children also carry the role)."""
    return {**selector_labels(name, role), LABEL_COMPONENT: "simulator", LABEL_MANAGED_BY: MANAGED_BY}


def selector_string(name: str, role: str = AGGREGATED) -> str:
    """``selector_labels`` in label-selector syntax (``status.selector``, read by the scale subresource)."""
    return ",".join(f"{k}={v}" for k, v in selector_labels(name, role).items())


def roles(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The roles a spec deploys, each its own Deployment: prefill and decode, or the one aggregated fleet."""
    return DISAGGREGATED_ROLES if spec.get("disaggregation") is not None else (AGGREGATED,)


def scaled_role(spec: Mapping[str, Any]) -> str:
    """The role spec.replicas (the scale subresource) counts: decode when disaggregated."""
    return roles(spec)[-1]


def role_name(name: str, role: str) -> str:
    """Name of a role's Deployment and Service: ``<name>-prefill``, ``<name>-decode``, or ``<name>``."""
    return f"{name}-{role}" if role else name


def models_key(role: str) -> str:
    """The ConfigMap key of a role's models.yml."""
    return f"models-{role}.yml" if role else MODELS_KEY


def configmap_name(name: str) -> str:
    return f"{name}-config"
