"""Options of ``llmsim-operator run``, as the CLI parses them (no kopf here: ``manifests`` must not need it)."""

from __future__ import annotations

from dataclasses import dataclass

from llmsim_operator import conventions as c


@dataclass(frozen=True, slots=True)
class OperatorOptions:
    """Options of ``llmsim-operator run``."""

    # Namespaces to serve; empty with ``all_namespaces`` False is rejected by the CLI.
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = True
    # kopf peering name, None for standalone (the default: one replica, no peering CRDs needed).
    peering: str | None = None
    # e.g. http://0.0.0.0:8080/healthz; None disables the health endpoint.
    liveness: str | None = None
    simulator_image: str = c.DEFAULT_SIMULATOR_IMAGE
    # kubeconfig for the operator's own client; None: in-cluster, then $KUBECONFIG / ~/.kube/config.
    kubeconfig: str | None = None
    # Seconds before the API server closes a watch; the client gives up a bit later.
    # An int: kopf sends it verbatim as timeoutSeconds, and "300.0" is a 400 Bad Request.
    watch_server_timeout: int = 300
    # kopf's identity of this operator instance (peering, logs): the pod name in a cluster.
    identity: str = ""
