"""How the operator runs: its options (from the CLI) and the kopf settings derived from them."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import kopf

from llmsim_operator import conventions as c


@dataclass(frozen=True, slots=True)
class OperatorOptions:
    """Options of ``llmsim-operator run``."""

    # Namespaces to serve; empty with ``all_namespaces`` False is rejected by the CLI.
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = True
    # kopf peering name, None for standalone (the default: one replica, no peering CRDs needed).
    peering: str | None = None
    # e.g. http://0.0.0.0:8080/healthz; None disables the liveness endpoint.
    liveness: str | None = None
    simulator_image: str = c.DEFAULT_SIMULATOR_IMAGE
    # Seconds between drift checks (re-apply of every child, re-read of referenced ConfigMaps).
    drift_interval: float = 60.0
    # kubeconfig for the operator's own client; None: in-cluster, then $KUBECONFIG / ~/.kube/config.
    kubeconfig: str | None = None
    # Seconds before the API server closes a watch; the client gives up a bit later.
    # An int: kopf sends it verbatim as timeoutSeconds, and "300.0" is a 400 Bad Request.
    watch_server_timeout: int = 300


def configure(settings: kopf.OperatorSettings, options: OperatorOptions, instance: str = "") -> None:
    """Apply the operator's conventions to kopf's settings (called at startup)."""
    # Own annotation prefix, so kopf's bookkeeping reads llmsim.io/* and never clashes with another kopf operator.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=c.PERSISTENCE_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=c.PERSISTENCE_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{c.PERSISTENCE_PREFIX}/finalizer"
    # Watches that end on the server's side before the client's timeout notices a dead connection.
    settings.watching.server_timeout = options.watch_server_timeout
    settings.watching.client_timeout = options.watch_server_timeout + 30
    settings.watching.connect_timeout = 30
    # Kubernetes events for what the handlers post and for warnings, not for every INFO log line.
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = c.MANAGED_BY
    if instance:
        settings.posting.reporting_instance = instance
    settings.peering.standalone = options.peering is None
    if options.peering is not None:
        settings.peering.name = options.peering
        settings.peering.mandatory = True
