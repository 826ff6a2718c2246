"""kopf settings, derived from the operator options (:mod:`.options`) at startup."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from llmsim_operator import conventions as c
from llmsim_operator.options import OperatorOptions

#: Child resources watched with a server-side label selector (kopf selectors, as in handlers.CHILDREN).
CHILD_SELECTORS: tuple[tuple[str, str] | tuple[str, str, str], ...] = (
    ("apps", "v1", "deployments"),
    ("v1", "services"),
    ("policy", "poddisruptionbudgets"),
    ("monitoring.coreos.com", "v1", "servicemonitors"),
    ("inference.networking.k8s.io", "v1", "inferencepools"),
    ("inference.networking.x-k8s.io", "v1alpha2", "inferenceobjectives"),
)


def configure(settings: kopf.OperatorSettings, options: OperatorOptions) -> None:
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
    if options.identity:
        settings.posting.reporting_instance = options.identity
    # The children's watches ask the server for ours only (ConfigMaps: all, for responses.configMapRef).
    # (kopf >= 1.38 filters on the server; older ones receive every object and the handlers' labels filter.)
    selector = f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY}"
    label_selectors: Any = getattr(settings.watching, "label_selectors", None)
    for resource in CHILD_SELECTORS if label_selectors is not None else ():
        label_selectors[resource] = selector
    settings.peering.standalone = options.peering is None
    if options.peering is not None:
        settings.peering.name = options.peering
        settings.peering.mandatory = True
