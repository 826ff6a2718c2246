"""Pure functions from a resolved spec to the child manifests (plain dicts, ready for server-side apply).

Every object names only the fields the operator owns: server-side apply removes a field the
operator stops sending, and leaves alone what others (an autoscaler, kubectl) own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmsim_operator import conventions as c
from llmsim_operator.simulator_config import config_hash, kv_events_port
from llmsim_operator.spec import SimulatorSpec

Manifest = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Owner:
    """The LLMSimulator that owns the children (for owner references)."""

    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        # controller + blockOwnerDeletion: foreground deletion of the LLMSimulator waits for its children.
        return {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True, slots=True)
class Children:
    config_map: Manifest
    deployment: Manifest
    service: Manifest
    # None: not wanted by the spec (whether the API exists is checked at apply time).
    service_monitor: Manifest | None
    # None: not wanted, or the fleet has at most one replica. Rendered as policy/v1; the reconciler
    # sends it as policy/v1beta1 to API servers before 1.21.
    pod_disruption_budget: Manifest | None
    config_hash: str


def _metadata(sim: SimulatorSpec, owner: Owner, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": sim.namespace,
        "labels": {**(labels or {}), **c.common_labels(sim.name)},
        "ownerReferences": [owner.reference()],
    }


def render_config_map(sim: SimulatorSpec, owner: Owner, data: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(sim, owner, c.configmap_name(sim.name)),
        "data": dict(data),
    }


def _probe(path: str) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}}


#: Seconds the pod gets after spec.shutdownTimeoutSeconds: aborted streams' last writes and the exit.
SHUTDOWN_MARGIN_S = 10


def _env(sim: SimulatorSpec) -> list[dict[str, Any]]:
    """The pod's identity (Downward API: the x-llmsim-pod / x-llmsim-namespace headers) and the keys (Secrets)."""
    env: list[dict[str, Any]] = [
        {"name": "LLMSIM_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "LLMSIM_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    for name, field in (("LLMSIM_API_KEY", "apiKeySecretRef"), ("LLMSIM_ADMIN_KEY", "adminKeySecretRef")):
        ref = sim.spec.get(field)
        if ref:
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": ref["name"], "key": ref["key"]}}})
    return env


def _container(sim: SimulatorSpec, image: str, with_responses: bool) -> dict[str, Any]:
    args = ["--config", f"{c.CONFIG_DIR}/{c.MODELS_KEY}"]
    if with_responses:
        args += ["--responses", f"{c.CONFIG_DIR}/{c.RESPONSES_KEY}"]
    args += ["--host", "0.0.0.0", "--port", str(c.CONTAINER_PORT)]
    shutdown_timeout = int(sim.spec.get("shutdownTimeoutSeconds") or 0)
    if shutdown_timeout:
        args += ["--shutdown-timeout", str(shutdown_timeout)]
    container: dict[str, Any] = {
        "name": c.CONTAINER_NAME,
        "image": sim.spec.get("image") or image,
        "args": args,
        "env": _env(sim),
        "ports": [{"name": "http", "containerPort": c.CONTAINER_PORT, "protocol": "TCP"}],
        # Ready once the simulated model load is done (/health 503 until then, and while shutting down);
        # alive as long as the process answers (/ping), so a long startupSeconds never gets the pod killed.
        # Liveness counts only once /ping first answers: a process starting slowly on a busy node
        # (Python imports, config checks) gets up to two minutes instead of being killed mid-start.
        "startupProbe": {**_probe("/ping"), "periodSeconds": 2, "failureThreshold": 60},
        "readinessProbe": {**_probe("/health"), "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**_probe("/ping"), "periodSeconds": 10, "failureThreshold": 3},
        "resources": sim.section("resources"),
        # Restricted Pod Security profile.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": c.CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    if "imagePullPolicy" in sim.spec:
        container["imagePullPolicy"] = sim.spec["imagePullPolicy"]
    events_port = kv_events_port(sim)
    if events_port is not None:
        container["ports"].append({"name": "kv-events", "containerPort": events_port, "protocol": "TCP"})
        # The events' topic names the pod by its IP (kv@<pod-ip>@<model>).
        container["env"] = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    if sim.section("tokenizer"):
        container["volumeMounts"].append({"name": "tokenizer", "mountPath": c.TOKENIZER_DIR, "readOnly": True})
    return container


def _tokenizer_volume(sim: SimulatorSpec) -> dict[str, Any]:
    ref = sim.section("tokenizer")["configMapRef"]
    items = [{"key": ref.get("key", c.TOKENIZER_FILE), "path": c.TOKENIZER_FILE}]
    return {"name": "tokenizer", "configMap": {"name": ref["name"], "items": items}}


def render_deployment(
    sim: SimulatorSpec, owner: Owner, data: dict[str, str], image: str, replicas: int | None
) -> Manifest:
    """The simulator Deployment; ``replicas`` None leaves the field to an autoscaler."""
    pod_extras = sim.section("podTemplate")
    annotations = {
        **pod_extras.get("annotations", {}),
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(c.CONTAINER_PORT),
        "prometheus.io/path": "/metrics",
        c.ANNOTATION_CONFIG_HASH: config_hash(data),
    }
    pod_spec: dict[str, Any] = {
        # NOTE: no Service environment variables: a Service named "llmsim" would inject LLMSIM_PORT
        # (tcp://...), which the simulator reads as its own --port.
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": int(sim.spec.get("shutdownTimeoutSeconds") or 0) + SHUTDOWN_MARGIN_S,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": c.RUN_AS_USER,
            "runAsGroup": c.RUN_AS_USER,
            "fsGroup": c.RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(sim, image, c.RESPONSES_KEY in data)],
        "volumes": [
            {"name": "config", "configMap": {"name": c.configmap_name(sim.name)}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        ],
    }
    if sim.section("tokenizer"):
        pod_spec["volumes"].append(_tokenizer_volume(sim))
    if pod_extras.get("nodeSelector"):
        pod_spec["nodeSelector"] = dict(pod_extras["nodeSelector"])
    if pod_extras.get("tolerations"):
        pod_spec["tolerations"] = [dict(t) for t in pod_extras["tolerations"]]
    spec: dict[str, Any] = {
        "selector": {"matchLabels": c.selector_labels(sim.name)},
        "revisionHistoryLimit": 3,
        "template": {
            "metadata": {
                "labels": {**pod_extras.get("labels", {}), **c.common_labels(sim.name)},
                "annotations": annotations,
            },
            "spec": pod_spec,
        },
    }
    if replicas is not None:
        spec = {"replicas": replicas, **spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(sim, owner, sim.name),
        "spec": spec,
    }


def render_service(sim: SimulatorSpec, owner: Owner) -> Manifest:
    svc = sim.section("service")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(sim, owner, sim.name),
        "spec": {
            "type": svc["type"],
            "selector": c.selector_labels(sim.name),
            "ports": [{"name": "http", "port": svc["port"], "targetPort": "http", "protocol": "TCP"}],
        },
    }


def render_service_monitor(sim: SimulatorSpec, owner: Owner) -> Manifest | None:
    monitor = sim.section("monitoring").get("serviceMonitor") or {}
    if not monitor.get("enabled"):
        return None
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _metadata(sim, owner, sim.name, labels=monitor.get("labels")),
        "spec": {
            "selector": {"matchLabels": c.selector_labels(sim.name)},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": monitor["interval"]}],
        },
    }


def render_pod_disruption_budget(sim: SimulatorSpec, owner: Owner, replicas: int | None) -> Manifest | None:
    """The PodDisruptionBudget, when enabled and the fleet has more than one replica (None: an autoscaler's)."""
    budget = sim.section("podDisruptionBudget")
    if not budget.get("enabled") or (replicas is not None and replicas <= 1):
        return None
    if "minAvailable" in budget:
        limit = {"minAvailable": budget["minAvailable"]}
    else:
        limit = {"maxUnavailable": budget.get("maxUnavailable", 1)}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(sim, owner, sim.name),
        "spec": {"selector": {"matchLabels": c.selector_labels(sim.name)}, **limit},
    }


def desired_replicas(sim: SimulatorSpec) -> int | None:
    """spec.replicas, or None when an external autoscaler owns the Deployment's replicas."""
    if sim.section("autoscaling").get("external"):
        return None
    return int(sim.spec["replicas"])


def render_children(sim: SimulatorSpec, owner: Owner, data: dict[str, str], image: str) -> Children:
    """Every child of one LLMSimulator; ``data`` is the ConfigMap data (see :func:`.simulator_config.config_data`)."""
    replicas = desired_replicas(sim)
    return Children(
        config_map=render_config_map(sim, owner, data),
        deployment=render_deployment(sim, owner, data, image, replicas),
        service=render_service(sim, owner),
        service_monitor=render_service_monitor(sim, owner),
        pod_disruption_budget=render_pod_disruption_budget(sim, owner, replicas),
        config_hash=config_hash(data),
    )


def endpoint(sim: SimulatorSpec) -> str:
    """In-cluster base URL of the simulator's API (the Service's DNS name)."""
    return f"http://{sim.name}.{sim.namespace}.svc:{sim.section('service')['port']}"
