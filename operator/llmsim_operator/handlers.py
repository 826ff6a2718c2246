"""kopf handlers: thin wrappers that call the reconciler and turn its outcome into events and retries.

Handlers are registered into a given registry by :func:`register`, so the timer interval and
the other options come from the CLI rather than from import-time globals.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import kopf

from llmsim_operator import conventions as c
from llmsim_operator.kube import ApiError, Kube, load_configuration
from llmsim_operator.reconciler import Options, Outcome, ReconcileError, controller_name, reconcile, refresh_status
from llmsim_operator.settings import OperatorOptions

#: Retry delays after API failures: 5 s, 10 s, 20 s, ... capped at 5 minutes.
_BACKOFF_BASE, _BACKOFF_CAP = 5.0, 300.0


def backoff(retry: int) -> float:
    return float(min(_BACKOFF_BASE * 2**retry, _BACKOFF_CAP))


def _snapshot(body: kopf.Body) -> dict[str, Any]:
    """A plain, private copy of kopf's live body view."""
    return copy.deepcopy(dict(body))


def _post_outcome(body: kopf.Body, outcome: Outcome, reason: str) -> None:
    if outcome.problem is not None:
        kopf.warn(body, reason=outcome.problem[0], message=outcome.problem[1])
    else:
        # kopf.event, not kopf.info: posting.level is WARNING so that kopf's own log lines never become events.
        message = f"children applied ({reason}), config {outcome.config_hash}"
        kopf.event(body, type="Normal", reason="Reconciled", message=message)
    for warning_reason, message in outcome.warnings:
        kopf.warn(body, reason=warning_reason, message=message)


async def connection_info(kubeconfig: str | None) -> kopf.ConnectionInfo:
    """kopf's credentials, from the same loader as the operator's own client."""
    configuration = await load_configuration(kubeconfig)
    # kubernetes-asyncio >= 33.3 made this a coroutine (it may refresh an in-cluster token).
    maybe_header: Any = configuration.get_api_key_with_prefix("BearerToken")
    header = await maybe_header if inspect.isawaitable(maybe_header) else maybe_header
    scheme, _, token = str(header or "").rpartition(" ")
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        username=configuration.username or None,
        password=configuration.password or None,
    )


def register(registry: kopf.OperatorRegistry, options: OperatorOptions) -> None:
    """Register every handler of the operator into ``registry``."""
    reconcile_options = Options(image=options.simulator_image)
    resource = (c.GROUP, c.VERSION, c.PLURAL)

    @kopf.on.login(id="login", registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return await connection_info(options.kubeconfig)

    @kopf.on.startup(id="connect", registry=registry)
    async def connect(memo: kopf.Memo, **_: Any) -> None:
        memo["kube"] = await Kube.connect(options.kubeconfig)

    @kopf.on.cleanup(id="disconnect", registry=registry)
    async def disconnect(memo: kopf.Memo, **_: Any) -> None:
        kube: Kube | None = memo.get("kube")
        if kube is not None:
            await kube.close()

    @kopf.on.resume(*resource, id="reconcile", registry=registry)
    @kopf.on.create(*resource, id="reconcile", registry=registry)
    @kopf.on.update(*resource, id="reconcile", registry=registry)
    async def reconcile_simulator(
        body: kopf.Body, reason: str, retry: int, memo: kopf.Memo, logger: kopf.Logger, **_: Any
    ) -> None:
        try:
            outcome = await reconcile(memo["kube"], _snapshot(body), reconcile_options)
        except (ReconcileError, ApiError) as exc:
            kopf.warn(body, reason="ApplyFailed", message=str(exc))
            raise kopf.TemporaryError(str(exc), delay=backoff(retry)) from exc
        _post_outcome(body, outcome, str(reason))
        logger.info("reconciled (%s): problem=%s hash=%s", reason, outcome.problem, outcome.config_hash)

    @kopf.timer(
        *resource,
        id="drift-check",
        interval=options.drift_interval,
        initial_delay=options.drift_interval,
        registry=registry,
    )
    async def drift_check(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
        # Level-triggered safety net: re-applies children someone changed or deleted, re-reads responses.
        try:
            await reconcile(memo["kube"], _snapshot(body), reconcile_options)
        except (ReconcileError, ApiError) as exc:
            kopf.warn(body, reason="ApplyFailed", message=str(exc))
            logger.warning("drift check failed: %s", exc)

    @kopf.on.event(
        "apps",
        "v1",
        "deployments",
        labels={c.LABEL_MANAGED_BY: c.MANAGED_BY},
        id="deployment-status",
        registry=registry,
    )
    async def deployment_changed(
        type: str | None, body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any
    ) -> None:
        owner = controller_name(body)
        namespace = body.get("metadata", {}).get("namespace")
        if owner is None or namespace is None:
            return
        kube: Kube = memo["kube"]
        try:
            if type == "DELETED":
                # Someone deleted the Deployment but not its LLMSimulator: recreate it now.
                parent = await kube.get(c.API_VERSION, c.KIND, namespace, owner)
                if parent is not None and not parent["metadata"].get("deletionTimestamp"):
                    await reconcile(kube, parent, reconcile_options)
                return
            await refresh_status(kube, namespace, owner, _snapshot(body), reconcile_options)
        except (ReconcileError, ApiError) as exc:
            # Event handlers are not retried; the next Deployment event or the drift check catches up.
            logger.warning("cannot refresh the status of %s/%s: %s", namespace, owner, exc)
