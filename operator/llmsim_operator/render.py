"""Pure functions from a resolved spec to the child manifests (plain dicts, ready for server-side apply).

Every object names only the fields the operator owns: server-side apply removes a field the
operator stops sending, and leaves alone what others (an autoscaler, kubectl) own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmsim_operator import conventions as c
from llmsim_operator.simulator_config import config_hash, kv_events_port, side_channel_ports
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
    # One per role (prefill, decode), or the one aggregated fleet's; the last is the one spec.replicas drives.
    deployments: tuple[Manifest, ...]
    # One per role, as the Deployments.
    services: tuple[Manifest, ...]
    # None: not wanted by the spec (whether the API exists is checked at apply time).
    service_monitor: Manifest | None
    # None: not wanted, or the fleet has at most one replica. Rendered as policy/v1; the reconciler
    # sends it as policy/v1beta1 to API servers before 1.21.
    pod_disruption_budget: Manifest | None
    config_hash: str

    @property
    def deployment(self) -> Manifest:
        """The Deployment spec.replicas (the scale subresource) drives: decode when disaggregated."""
        return self.deployments[-1]

    @property
    def service(self) -> Manifest:
        """The Service of that role."""
        return self.services[-1]

    def named(self, kind: str, name: str) -> Manifest | None:
        """The child of ``kind`` named ``name``, None if not rendered."""
        candidates: tuple[Manifest | None, ...] = {
            "ConfigMap": (self.config_map,),
            "Deployment": self.deployments,
            "Service": self.services,
            "ServiceMonitor": (self.service_monitor,),
            "PodDisruptionBudget": (self.pod_disruption_budget,),
        }.get(kind, ())
        return next((m for m in candidates if m is not None and m["metadata"]["name"] == name), None)


def _metadata(
    sim: SimulatorSpec, owner: Owner, name: str, labels: dict[str, str] | None = None, role: str = c.AGGREGATED
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": sim.namespace,
        "labels": {**(labels or {}), **c.common_labels(sim.name, role)},
        "ownerReferences": [owner.reference()],
    }


def render_config_map(sim: SimulatorSpec, owner: Owner, data: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(sim, owner, c.configmap_name(sim.name)),
        "data": dict(data),
    }


def _probe(sim: SimulatorSpec, path: str) -> dict[str, Any]:
    # Rank 0's port: under external load balancing every rank is a server of the same process, started
    # with it, so rank 0's /health stands for the pod (a container has one readiness probe).
    get = {"path": path, "port": "http"}
    return {"httpGet": {**get, "scheme": "HTTPS"} if sim.section("tls") else get}


def _scheme(sim: SimulatorSpec) -> str:
    return "https" if sim.section("tls") else "http"


def port_name(rank: int) -> str:
    """Container and Service port name of data-parallel rank ``rank``: ``http``, ``http-1``, ... (InferencePool targetPorts name them)."""
    return "http" if rank == 0 else f"http-{rank}"


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


def _container(sim: SimulatorSpec, image: str, with_responses: bool, role: str) -> dict[str, Any]:
    args = ["--config", f"{c.CONFIG_DIR}/{c.models_key(role)}"]
    if with_responses:
        args += ["--responses", f"{c.CONFIG_DIR}/{c.RESPONSES_KEY}"]
    args += ["--host", "0.0.0.0", "--port", str(c.CONTAINER_PORT)]
    shutdown_timeout = int(sim.spec.get("shutdownTimeoutSeconds") or 0)
    if shutdown_timeout:
        args += ["--shutdown-timeout", str(shutdown_timeout)]
    if sim.section("tls"):
        args += ["--ssl-certfile", f"{c.TLS_DIR}/tls.crt", "--ssl-keyfile", f"{c.TLS_DIR}/tls.key"]
    ports = [
        {"name": port_name(r), "containerPort": c.CONTAINER_PORT + r, "protocol": "TCP"} for r in range(sim.rank_ports)
    ]
    container: dict[str, Any] = {
        "name": c.CONTAINER_NAME,
        "image": sim.spec.get("image") or image,
        "args": args,
        "env": _env(sim),
        "ports": ports,
        # Ready once the simulated model load is done (/health 503 until then, and while shutting down);
        # alive as long as the process answers (/ping), so a long startupSeconds never gets the pod killed.
        # Liveness counts only once /ping first answers: a process starting slowly on a busy node
        # (Python imports, config checks) gets up to two minutes instead of being killed mid-start.
        "startupProbe": {**_probe(sim, "/ping"), "periodSeconds": 2, "failureThreshold": 60},
        "readinessProbe": {**_probe(sim, "/health"), "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**_probe(sim, "/ping"), "periodSeconds": 10, "failureThreshold": 3},
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
        # Each data-parallel rank publishes on the port + its rank (vLLM moves the endpoint the same way).
        for rank in range(sim.data_parallel_size):
            name = "kv-events" if rank == 0 else f"kv-events-{rank}"
            container["ports"].append({"name": name, "containerPort": events_port + rank, "protocol": "TCP"})
    for rank, port in enumerate(side_channel_ports(sim, role)):
        name = "side-channel" if rank == 0 else f"side-channel-{rank}"
        container["ports"].append({"name": name, "containerPort": port, "protocol": "TCP"})
    if events_port is not None or role == c.PREFILL:
        # The events' topic (kv@<pod-ip>@<model>) and a prefill pod's side-channel host name the pod by its IP.
        container["env"].append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if sim.section("tokenizer"):
        container["volumeMounts"].append({"name": "tokenizer", "mountPath": c.TOKENIZER_DIR, "readOnly": True})
    if sim.section("tls"):
        container["volumeMounts"].append({"name": "tls", "mountPath": c.TLS_DIR, "readOnly": True})
    return container


def _tokenizer_volume(sim: SimulatorSpec) -> dict[str, Any]:
    ref = sim.section("tokenizer")["configMapRef"]
    items = [{"key": ref.get("key", c.TOKENIZER_FILE), "path": c.TOKENIZER_FILE}]
    return {"name": "tokenizer", "configMap": {"name": ref["name"], "items": items}}


def render_deployment(
    sim: SimulatorSpec,
    owner: Owner,
    data: dict[str, str],
    image: str,
    replicas: int | None,
    role: str = c.AGGREGATED,
) -> Manifest:
    """The simulator Deployment of ``role``; ``replicas`` None leaves the field to an autoscaler."""
    pod_extras = sim.section("podTemplate")
    annotations = {
        **pod_extras.get("annotations", {}),
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(c.CONTAINER_PORT),
        "prometheus.io/path": "/metrics",
        c.ANNOTATION_CONFIG_HASH: config_hash(data),
    }
    if sim.section("tls"):
        annotations["prometheus.io/scheme"] = "https"
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
        "containers": [_container(sim, image, c.RESPONSES_KEY in data, role)],
        "volumes": [
            {"name": "config", "configMap": {"name": c.configmap_name(sim.name)}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        ],
    }
    if sim.section("tokenizer"):
        pod_spec["volumes"].append(_tokenizer_volume(sim))
    if sim.section("tls"):
        # Readable by the pod's fsGroup only (the key is a secret).
        secret = {"secretName": sim.section("tls")["secretName"], "defaultMode": 0o440}
        pod_spec["volumes"].append({"name": "tls", "secret": secret})
    if pod_extras.get("nodeSelector"):
        pod_spec["nodeSelector"] = dict(pod_extras["nodeSelector"])
    if pod_extras.get("tolerations"):
        pod_spec["tolerations"] = [dict(t) for t in pod_extras["tolerations"]]
    spec: dict[str, Any] = {
        "selector": {"matchLabels": c.selector_labels(sim.name, role)},
        "revisionHistoryLimit": 3,
        "template": {
            "metadata": {
                "labels": {**pod_extras.get("labels", {}), **c.common_labels(sim.name, role)},
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
        "metadata": _metadata(sim, owner, c.role_name(sim.name, role), role=role),
        "spec": spec,
    }


def render_service(sim: SimulatorSpec, owner: Owner, role: str = c.AGGREGATED) -> Manifest:
    """The Service of ``role``'s pods: one port per data-parallel rank's API port (``http``, ``http-1``, ...)."""
    svc = sim.section("service")
    ports = [
        {"name": port_name(r), "port": svc["port"] + r, "targetPort": port_name(r), "protocol": "TCP"}
        for r in range(sim.rank_ports)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(sim, owner, c.role_name(sim.name, role), role=role),
        "spec": {"type": svc["type"], "selector": c.selector_labels(sim.name, role), "ports": ports},
    }


def render_service_monitor(sim: SimulatorSpec, owner: Owner) -> Manifest | None:
    monitor = sim.section("monitoring").get("serviceMonitor") or {}
    if not monitor.get("enabled"):
        return None
    endpoint: dict[str, Any] = {"path": "/metrics", "interval": monitor["interval"]}
    if sim.section("tls"):
        # The certificate names whatever its issuer chose, not the pod IPs Prometheus scrapes.
        endpoint.update(scheme="https", tlsConfig={"insecureSkipVerify": True})
    # Every role's Service (a disaggregated fleet has no Service over both roles); an external-LB pod's
    # ranks each serve only their own engine's /metrics.
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _metadata(sim, owner, sim.name, labels=monitor.get("labels")),
        "spec": {
            "selector": {"matchLabels": c.selector_labels(sim.name)},
            "endpoints": [{"port": port_name(r), **endpoint} for r in range(sim.rank_ports)],
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


def desired_replicas(sim: SimulatorSpec, role: str = c.AGGREGATED) -> int | None:
    """A role's pods: spec.replicas for the scaled role (None when an external autoscaler owns them),
    disaggregation.prefill.replicas for prefill."""
    if role == c.PREFILL:
        return int(sim.section("disaggregation").get("prefill", {}).get("replicas", 1))
    if sim.section("autoscaling").get("external"):
        return None
    return int(sim.spec["replicas"])


def render_children(sim: SimulatorSpec, owner: Owner, data: dict[str, str], image: str) -> Children:
    """Every child of one LLMSimulator; ``data`` is the ConfigMap data (see :func:`.simulator_config.config_data`)."""
    replicas = {role: desired_replicas(sim, role) for role in sim.roles}
    counts = [r for r in replicas.values() if r is not None]
    # The budget covers every pod: None (an autoscaler's) if any role's count is.
    fleet = sum(counts) if len(counts) == len(replicas) else None
    return Children(
        config_map=render_config_map(sim, owner, data),
        deployments=tuple(render_deployment(sim, owner, data, image, replicas[r], r) for r in sim.roles),
        services=tuple(render_service(sim, owner, r) for r in sim.roles),
        service_monitor=render_service_monitor(sim, owner),
        pod_disruption_budget=render_pod_disruption_budget(sim, owner, fleet),
        config_hash=config_hash(data),
    )


def endpoint(sim: SimulatorSpec, role: str = c.AGGREGATED) -> str:
    """In-cluster base URL of a role's API (its Service's DNS name)."""
    name = c.role_name(sim.name, role)
    return f"{_scheme(sim)}://{name}.{sim.namespace}.svc:{sim.section('service')['port']}"
