"""Install manifests for plain kubectl: CRD, namespace, least-privilege RBAC and the operator Deployment.

The RBAC rules are the operator's whole footprint; each says why it is needed.
"""

from __future__ import annotations

from typing import Any

from llmsim_operator import conventions as c
from llmsim_operator.crd import custom_resource_definition

Manifest = dict[str, Any]

OPERATOR_NAME = "llmsim-operator"
DEFAULT_NAMESPACE = "llmsim-system"
LIVENESS_PORT = 8080

#: (apiGroups, resources, verbs, why): every permission the operator uses, and nothing else.
RULES: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], str], ...] = (
    ((c.GROUP,), (c.PLURAL,), ("get", "list", "watch", "patch"), "watch LLMSimulators; kopf's annotations"),
    ((c.GROUP,), (f"{c.PLURAL}/status",), ("get", "update"), "status, replaced with resourceVersion checks"),
    # OwnerReferencesPermissionEnforcement: blockOwnerDeletion needs update on the owner's finalizers.
    ((c.GROUP,), (f"{c.PLURAL}/finalizers",), ("update",), "owner references with blockOwnerDeletion"),
    # Server-side apply is a PATCH, but creating an absent object that way is also authorized as create.
    # Children are watched (list, watch): a deleted or edited one is repaired on its event, no polling.
    (("",), ("configmaps",), ("get", "list", "watch", "create", "patch"), "apply and watch the config; responses refs"),
    (
        ("",),
        ("services",),
        ("list", "watch", "create", "patch", "delete"),
        "apply and watch the Services; delete the other form's (aggregated, prefill/decode)",
    ),
    (
        ("apps",),
        ("deployments",),
        ("get", "list", "watch", "create", "patch", "delete"),
        "apply; status from the watch; delete the other form's",
    ),
    (
        ("monitoring.coreos.com",),
        ("servicemonitors",),
        ("get", "list", "watch", "create", "patch", "delete"),
        "optional ServiceMonitor",
    ),
    (
        ("policy",),
        ("poddisruptionbudgets",),
        ("get", "list", "watch", "create", "patch", "delete"),
        "optional PodDisruptionBudget",
    ),
    (
        ("inference.networking.k8s.io",),
        ("inferencepools",),
        ("get", "list", "watch", "create", "patch", "delete"),
        "optional InferencePool",
    ),
    (
        ("inference.networking.x-k8s.io",),
        ("inferenceobjectives",),
        ("get", "list", "watch", "create", "patch", "delete"),
        "optional InferenceObjectives",
    ),
    (("", "events.k8s.io"), ("events",), ("create", "patch"), "kopf posts events"),
    (("apiextensions.k8s.io",), ("customresourcedefinitions",), ("list", "watch"), "kopf notices CRD changes"),
)


def cluster_role() -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": OPERATOR_NAME, "labels": _labels()},
        "rules": [
            {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}
            for groups, resources, verbs, _ in RULES
        ],
    }


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": OPERATOR_NAME, "app.kubernetes.io/part-of": "llmsim"}


def operator_deployment(namespace: str, image: str, simulator_image: str) -> Manifest:
    labels = {"app.kubernetes.io/name": OPERATOR_NAME}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": OPERATOR_NAME, "namespace": namespace, "labels": _labels()},
        "spec": {
            # One replica, standalone: kopf peering is off, so a second replica would double-handle.
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": {**labels, "app.kubernetes.io/part-of": "llmsim"}},
                "spec": {
                    "serviceAccountName": OPERATOR_NAME,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": c.RUN_AS_USER,
                        "runAsGroup": c.RUN_AS_USER,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "operator",
                            "image": image,
                            "args": [
                                "run",
                                "--all-namespaces",
                                "--liveness",
                                f"http://0.0.0.0:{LIVENESS_PORT}/healthz",
                                "--simulator-image",
                                simulator_image,
                            ],
                            "env": [
                                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            ],
                            "ports": [{"name": "health", "containerPort": LIVENESS_PORT, "protocol": "TCP"}],
                            # Ready: kopf logged in and the API serves (and lets it list) LLMSimulators,
                            # checked by the operator's probe handler behind kopf's /healthz.
                            "readinessProbe": {
                                "httpGet": {"path": "/healthz", "port": "health"},
                                "periodSeconds": 10,
                                "timeoutSeconds": 5,
                                "failureThreshold": 3,
                            },
                            # Alive: kopf's health server accepts connections (kopf exits when a core task
                            # dies). Not /healthz: an API-server outage must not restart the operator.
                            "livenessProbe": {
                                "tcpSocket": {"port": "health"},
                                "initialDelaySeconds": 10,
                                "periodSeconds": 20,
                                "failureThreshold": 3,
                            },
                            # Memory grows with the fleet (kopf's per-object state and the operator's
                            # indexes): ~240 MiB peak at 1,000 LLMSimulators measured (restart and
                            # namespace deletion included); docs/operator.md has the limit per fleet size.
                            "resources": {
                                "requests": {"cpu": "50m", "memory": "256Mi"},
                                "limits": {"memory": "512Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                        }
                    ],
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    }


def install_manifests(
    namespace: str = DEFAULT_NAMESPACE,
    image: str = c.DEFAULT_OPERATOR_IMAGE,
    simulator_image: str = c.DEFAULT_SIMULATOR_IMAGE,
    *,
    cel: bool = True,
) -> list[Manifest]:
    """Everything ``kubectl apply -f`` needs, CRD first (without its CEL rules when ``cel`` is False)."""
    return [
        custom_resource_definition(cel=cel),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": _labels()}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": OPERATOR_NAME, "namespace": namespace, "labels": _labels()},
        },
        cluster_role(),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": OPERATOR_NAME, "labels": _labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": OPERATOR_NAME},
            "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_NAME, "namespace": namespace}],
        },
        operator_deployment(namespace, image, simulator_image),
    ]
