"""kopf handlers: thin wrappers that call the reconciler and turn its outcome into events and retries.

Handlers are registered into a given registry by :func:`register`, so the timer interval and
the other options come from the CLI rather than from import-time globals.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from typing import Any

import kopf

from llmsim_operator import conventions as c
from llmsim_operator.kube import ApiError, Kube, load_configuration
from llmsim_operator.options import OperatorOptions
from llmsim_operator.reconciler import Options, Outcome, ReconcileError, controller_name, reconcile, refresh_status

#: Retry delays after API failures: 5 s, 10 s, 20 s, ... capped at 5 minutes.
_BACKOFF_BASE, _BACKOFF_CAP = 5.0, 300.0
#: Seconds the readiness check may take (the pod's probe allows 5).
_PROBE_TIMEOUT = 3.0
#: memo key set once kopf has logged in (its watches need those credentials).
_LOGGED_IN = "logged_in"


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
    # Where the readiness check lists LLMSimulators: the served namespaces (when named plainly,
    # so a namespace-scoped Role suffices), else the whole cluster.
    plain = options.namespaces and not any(set(ns) & set("*?[]!") for ns in options.namespaces)
    probed_namespaces: tuple[str | None, ...] = options.namespaces if plain else (None,)
    resource = (c.GROUP, c.VERSION, c.PLURAL)

    @kopf.on.login(id="login", registry=registry)
    async def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
        info = await connection_info(options.kubeconfig)
        memo[_LOGGED_IN] = True
        return info

    @kopf.on.probe(id="api", registry=registry)
    async def api_ready(memo: kopf.Memo, **_: Any) -> str:
        # Behind kopf's /healthz, the readiness probe: a failure here answers 500 and the pod is not Ready.
        # PermanentError, not a plain exception: kopf would retry that one for a minute inside the probe.
        if not memo.get(_LOGGED_IN):
            raise kopf.PermanentError("kopf has not logged in to the API server yet")
        try:
            for namespace in probed_namespaces:
                await asyncio.wait_for(memo["kube"].can_list(c.API_VERSION, c.KIND, namespace), _PROBE_TIMEOUT)
        except (ApiError, TimeoutError) as exc:
            raise kopf.PermanentError(f"cannot list {c.PLURAL}.{c.GROUP}: {exc or 'timeout'}") from None
        return "ok"

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
