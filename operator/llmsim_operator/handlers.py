"""kopf handlers: thin wrappers that call the reconciler and turn its outcome into events and retries.

Handlers are registered into a given registry by :func:`register`, so the options come from the
CLI rather than from import-time globals.

What the operator watches, and why (nothing is polled):

- LLMSimulators: an event handler reconciles when the spec's generation is not yet the status's
  observedGeneration (or the last attempt failed; at start-up every one once, quietly); an index
  keeps each one's spec and status (:func:`simulator_view`), so the child watches can render and
  compare without a read. NOTE: not kopf's create/update/resume handlers: those store a diff-base
  annotation (one PATCH, one more watch event per change) that the generation already tells.
- Its children (ConfigMap, Deployment, Service, PodDisruptionBudget, ServiceMonitor, InferencePool,
  InferenceObjective), filtered by
  the managed-by label on the server's side: one index per kind keeps a :class:`ChildView` of each
  (its applied-hash, owner, and for Deployments the status fields), so a reconcile where nothing
  changed applies nothing; an event handler repairs a child deleted or changed by someone else,
  and copies Deployment status into the LLMSimulator's.
- ConfigMaps named by ``spec.responses.configMapRef``: an edit re-renders the simulators using them.
- The two Gateway API Inference Extension CRDs: installed while the operator runs, they make it
  reconcile the simulators whose pool waits for them (discovery is otherwise cached).

kopf fills every index before any handler runs, so at a restart the first reconciles already know
what exists: a fleet that did not change while the operator was away costs no API call, and no
finalizer is needed (children carry owner references: the garbage collector deletes them).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Mapping
from typing import Any, cast

import kopf

from llmsim_operator import conventions as c
from llmsim_operator.inference_pool import CRDS as INFERENCE_CRDS
from llmsim_operator.kube import ApiError, Kube, Object, load_configuration
from llmsim_operator.options import OperatorOptions
from llmsim_operator.reconciler import (
    ChildView,
    Options,
    Outcome,
    ReconcileError,
    child_drifted,
    child_view,
    controller_name,
    known_fleet,
    known_key,
    reconcile,
    refresh_status,
)
from llmsim_operator.status import INFERENCE_POOL

#: Retry delays after API failures: 5 s, 10 s, 20 s, ... capped at 5 minutes.
_BACKOFF_BASE, _BACKOFF_CAP = 5.0, 300.0
#: Seconds the readiness check may take (the pod's probe allows 5).
_PROBE_TIMEOUT = 3.0
#: Seconds an established CRD's API may take to appear in discovery.
_DISCOVERY_WAITS = 15
#: memo key set once kopf has logged in (its watches need those credentials).
_LOGGED_IN = "logged_in"

#: Index of LLMSimulators: (namespace, name) -> :func:`simulator_view`.
SIMULATORS = "simulators"
#: Index of simulators by the responses ConfigMap they read: (namespace, ConfigMap name) -> name.
RESPONSES_REFS = "responses_refs"
#: The children's resources (kopf selectors: versionless means the server's preferred version) and index ids.
CHILDREN: tuple[tuple[tuple[str, ...], str], ...] = (
    (("v1", "configmaps"), "child_configmaps"),
    (("apps", "v1", "deployments"), "child_deployments"),
    (("v1", "services"), "child_services"),
    (("policy", "poddisruptionbudgets"), "child_pdbs"),
    (("monitoring.coreos.com", "v1", "servicemonitors"), "child_servicemonitors"),
    (("inference.networking.k8s.io", "v1", "inferencepools"), "child_inferencepools"),
    (("inference.networking.x-k8s.io", "v1alpha2", "inferenceobjectives"), "child_inferenceobjectives"),
)
MANAGED = {c.LABEL_MANAGED_BY: c.MANAGED_BY}

Key = tuple[str, str]

#: Failures of event-driven repairs go to the log only: kopf's object loggers would also post them as
#: Kubernetes events, into namespaces that may be terminating (refused, and retried by kopf).
logger = logging.getLogger(__name__)


def backoff(retry: int) -> float:
    return float(min(_BACKOFF_BASE * 2**retry, _BACKOFF_CAP))


def simulator_view(body: Mapping[str, Any]) -> Object:
    """What the operator keeps of an LLMSimulator: enough to reconcile it and to write its status."""
    meta = body.get("metadata") or {}
    kept = ("name", "namespace", "uid", "generation", "resourceVersion", "deletionTimestamp")
    return {
        "apiVersion": body.get("apiVersion", c.API_VERSION),
        "kind": body.get("kind", c.KIND),
        "metadata": {k: meta[k] for k in kept if meta.get(k) is not None},
        "spec": body.get("spec") or {},
        "status": body.get("status") or {},
    }


def _not_ours(labels: kopf.Labels, **_: Any) -> bool:
    """A ConfigMap the operator did not make (one a simulator may name in responses.configMapRef)."""
    return labels.get(c.LABEL_MANAGED_BY) != c.MANAGED_BY


def _inference_crd(name: str, **_: Any) -> bool:
    return name in INFERENCE_CRDS


def _one(index: Mapping[Key, Any], key: Key) -> Any:
    """The first value stored under ``key`` in a kopf index, None if none."""
    return next(iter(index.get(key) or ()), None)


def known_children(indexes: Mapping[str, Any], namespace: str, name: str) -> dict[str, ChildView]:
    """The children of ``namespace/name`` that the watches know exist, by kind (and name: :func:`known_key`)."""
    known: dict[str, ChildView] = {}
    for _, index_id in CHILDREN:
        index = indexes.get(index_id)
        for view in (index.get((namespace, name)) or ()) if index is not None else ():
            known[known_key(view.kind, view.name)] = view
    return known


def _post_outcome(obj: Mapping[str, Any], outcome: Outcome, reason: str) -> None:
    """Events only for what changed: a reconcile that wrote nothing stays silent (a restart posts nothing)."""
    # kopf reads only apiVersion, kind and metadata (name, namespace, uid) of the object it posts about.
    body = obj if isinstance(obj, kopf.Body) else kopf.Body(cast(Any, dict(obj)))
    if outcome.problem is not None:
        if outcome.status_written:
            kopf.warn(body, reason=outcome.problem[0], message=outcome.problem[1])
        return
    if outcome.applied and reason != "create":
        # A new LLMSimulator's children are routine (its status says Reconciled): a bulk apply of
        # thousands would post thousands of events. Changes to an existing one are worth one.
        # kopf.event, not kopf.info: posting.level is WARNING so that kopf's own log lines never become events.
        message = f"children applied ({reason}: {', '.join(outcome.applied)}), config {outcome.config_hash}"
        kopf.event(body, type="Normal", reason="Reconciled", message=message)
    if outcome.changed:
        for warning_reason, message in outcome.warnings:
            kopf.warn(body, reason=warning_reason, message=message)


def needs_reconcile(body: Mapping[str, Any]) -> bool:
    """Whether an LLMSimulator's spec was not yet reconciled, or its last reconcile failed to apply."""
    generation = (body.get("metadata") or {}).get("generation")
    status = body.get("status") or {}
    if status.get("observedGeneration") != generation:
        return True
    degraded: Mapping[str, Any] = next((d for d in status.get("conditions") or [] if d.get("type") == "Degraded"), {})
    return degraded.get("status") == "True" and degraded.get("reason") == "ApplyFailed"


def _reason(view: Mapping[str, Any]) -> str:
    """create (never reconciled), update (a newer spec than the status's), or resume."""
    observed = (view.get("status") or {}).get("observedGeneration")
    if observed is None:
        return "create"
    return "update" if observed != view["metadata"].get("generation") else "resume"


_TASKS: set[asyncio.Task[None]] = set()


def _spawn(coro: Any) -> None:
    """Run ``coro`` as a task kept alive until it ends (the loop holds tasks only weakly)."""
    task = asyncio.get_running_loop().create_task(coro)
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


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
    async def connect(memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
        memo["kube"] = await Kube.connect(options.kubeconfig)
        logger.info("llmsim-operator connected")

    @kopf.on.cleanup(id="disconnect", registry=registry)
    async def disconnect(memo: kopf.Memo, **_: Any) -> None:
        kube: Kube | None = memo.get("kube")
        if kube is not None:
            await kube.close()

    # Indexes are coroutines: kopf runs a plain function in a thread, a hop per event at scale.
    @kopf.index(*resource, id=SIMULATORS, registry=registry)
    async def simulators(body: kopf.Body, namespace: str | None, name: str, **_: Any) -> dict[Key, Object]:
        return {(str(namespace), name): simulator_view(body)}

    @kopf.index(*resource, id=RESPONSES_REFS, registry=registry)
    async def responses_refs(spec: kopf.Spec, namespace: str | None, name: str, **_: Any) -> dict[Key, str]:
        ref = ((spec.get("responses") or {}).get("configMapRef") or {}).get("name")
        return {(str(namespace), str(ref)): name} if ref else {}

    async def index_child(body: kopf.Body, namespace: str | None, **_: Any) -> dict[Key, ChildView]:
        view = child_view(body)
        owner = controller_name(body)
        return {(str(namespace), owner): view} if view is not None and owner is not None else {}

    for selector, index_id in CHILDREN:
        kopf.index(*selector, id=index_id, labels=MANAGED, registry=registry)(index_child)

    async def reconcile_from_index(
        kube: Kube, parent: Object, indexes: Mapping[str, Any], force: frozenset[str], why: str
    ) -> None:
        meta = parent["metadata"]
        known = known_children(indexes, meta["namespace"], meta["name"])
        try:
            outcome = await reconcile(kube, parent, reconcile_options, known, force)
        except (ReconcileError, ApiError) as exc:
            # Event handlers are not retried: the next event of this child or of the LLMSimulator retries.
            logger.warning("cannot repair %s/%s (%s): %s", meta["namespace"], meta["name"], why, exc)
            return
        if outcome.changed:
            _post_outcome(parent, outcome, why)
            logger.info("repaired %s/%s (%s): applied=%s", meta["namespace"], meta["name"], why, outcome.applied)

    # Retries of failed reconciles, by (namespace, name): kopf does not retry event handlers.
    retries: dict[Key, asyncio.TimerHandle] = {}
    # LLMSimulators reconciled once by this process (the initial listing reconciles each once).
    seen: set[str] = set()

    async def reconcile_now(
        kube: Kube, key: Key, body: Mapping[str, Any], indexes: Mapping[str, Any], retry: int, log: logging.Logger
    ) -> None:
        pending = retries.pop(key, None)
        if pending is not None:
            pending.cancel()
        view = simulator_view(body)
        known = known_children(indexes, *key)
        reason = _reason(view)
        seen.add(str(view["metadata"].get("uid")))
        try:
            # After a spec change an unwanted optional child that is not known is looked for (one read).
            outcome = await reconcile(kube, view, reconcile_options, known, confirm_absent=reason == "update")
        except (ReconcileError, ApiError) as exc:
            kopf.warn(kopf.Body(cast(Any, dict(view))), reason="ApplyFailed", message=str(exc))
            delay = backoff(retry)
            log.warning("reconcile of %s/%s failed, retrying in %.0f s: %s", *key, delay, exc)
            retries[key] = asyncio.get_running_loop().call_later(
                delay, lambda: _spawn(retry_later(kube, key, indexes, retry + 1, log))
            )
            return
        _post_outcome(view, outcome, reason)
        if outcome.changed:
            log.info("reconciled %s/%s (%s): applied=%s hash=%s", *key, reason, outcome.applied, outcome.config_hash)

    async def retry_later(kube: Kube, key: Key, indexes: Mapping[str, Any], retry: int, log: logging.Logger) -> None:
        retries.pop(key, None)
        parent: Object | None = _one(indexes[SIMULATORS], key)
        if parent is not None and not parent["metadata"].get("deletionTimestamp"):
            await reconcile_now(kube, key, kube.fresher(parent), indexes, retry, log)

    @kopf.on.event(*resource, id="reconcile", registry=registry)
    async def reconcile_simulator(
        type: str | None, body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **kwargs: Any
    ) -> None:
        key = (str(namespace), name)
        meta = body.get("metadata", {})
        if type == "DELETED" or meta.get("deletionTimestamp"):
            pending = retries.pop(key, None)
            if pending is not None:
                pending.cancel()
            seen.discard(str(meta.get("uid")))
            return
        kube: Kube = memo["kube"]
        body = cast(kopf.Body, kube.fresher(cast(Object, body)))  # an event older than our last status write
        if not (type is None and str(meta.get("uid")) not in seen):
            # Not the first sight: only an unobserved spec, or a failure with no retry pending (the
            # status write that recorded a failure must not retry it at once, the timer will).
            observed = (body.get("status") or {}).get("observedGeneration") == meta.get("generation")
            if not needs_reconcile(body) or (observed and key in retries):
                return
        await reconcile_now(kube, key, body, kwargs, 0, logger)

    async def child_changed(type: str, body: kopf.Body, namespace: str | None, memo: kopf.Memo, **kwargs: Any) -> None:
        view = child_view(body)
        owner = controller_name(body)
        if view is None or owner is None or namespace is None:
            return
        parent: Object | None = _one(kwargs[SIMULATORS], (namespace, owner))
        if parent is None or parent["metadata"].get("uid") != view.owner_uid:
            return  # its LLMSimulator is gone: the garbage collector takes the child
        if parent["metadata"].get("deletionTimestamp"):
            return
        kube: Kube = memo["kube"]
        parent = kube.fresher(parent)
        if type == "DELETED":
            # Someone deleted a child but not its LLMSimulator: the index no longer has it, so it is applied.
            await reconcile_from_index(kube, parent, kwargs, frozenset(), f"{view.kind} deleted")
            return
        try:
            # Our own apply's echo, or a Deployment's status update: nothing of ours can have drifted.
            if not kube.as_applied(body) and await child_drifted(kube, parent, body, reconcile_options):
                await reconcile_from_index(kube, parent, kwargs, frozenset({view.kind}), f"{view.kind} changed")
            elif view.kind == "Deployment" and not kube.is_echo(body):
                # (The echo of our own apply: the reconcile that applied it writes the status from it.)
                # Every role's Deployment, as the watches know them (a disaggregated fleet has two).
                fleet = known_fleet(owner, parent.get("spec") or {}, known_children(kwargs, namespace, owner))
                await refresh_status(kube, namespace, owner, fleet, reconcile_options, current=parent)
        except (ReconcileError, ApiError) as exc:
            logger.warning("cannot follow %s %s/%s: %s", view.kind, namespace, view.name, exc)

    for selector, index_id in CHILDREN:
        kopf.on.event(*selector, id=f"{index_id}-changed", labels=MANAGED, registry=registry)(child_changed)

    @kopf.on.event(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        id="inference-crds",
        when=_inference_crd,
        registry=registry,
    )
    async def inference_crd_changed(
        type: str | None, body: kopf.Body, name: str, memo: kopf.Memo, **kwargs: Any
    ) -> None:
        # An InferencePool/InferenceObjective CRD installed (or removed) while the operator runs:
        # discovery is cached, so forget it and reconcile the simulators whose pool is not in place.
        if type is None:
            return  # the initial listing: discovery answers the first reconciles
        kube: Kube = memo["kube"]
        established = any(
            cond.get("type") == "Established" and cond.get("status") == "True"
            for cond in (body.get("status") or {}).get("conditions") or []
        )
        if type == "DELETED" or not established:
            kube.forget_api(INFERENCE_CRDS[name])
            return
        # Established comes a moment before discovery lists the new resource: wait for discovery.
        group_version, plural = INFERENCE_CRDS[name], name.partition(".")[0]
        for _ in range(_DISCOVERY_WAITS):
            if await kube.api_exists(group_version, plural, refresh=True):
                break
            await asyncio.sleep(1.0)
        for store in list(kwargs[SIMULATORS].values()):
            for parent in list(store):
                if "inferencePool" not in (parent.get("spec") or {}) or parent["metadata"].get("deletionTimestamp"):
                    continue
                conditions = (parent.get("status") or {}).get("conditions") or []
                if any(d.get("type") == INFERENCE_POOL and d.get("status") == "True" for d in conditions):
                    continue
                await reconcile_from_index(kube, kube.fresher(parent), kwargs, frozenset(), f"CRD {name}")

    @kopf.on.event(
        "v1",
        "configmaps",
        id="responses-changed",
        when=_not_ours,
        registry=registry,
    )
    async def responses_changed(
        type: str | None, name: str, namespace: str | None, memo: kopf.Memo, **kwargs: Any
    ) -> None:
        # The initial listing (type None) is the resume handlers' business; edits and deletions are ours.
        if type is None:
            return
        key = (str(namespace), name)
        for simulator in kwargs[RESPONSES_REFS].get(key) or ():
            parent = _one(kwargs[SIMULATORS], (key[0], simulator))
            if parent is not None and not parent["metadata"].get("deletionTimestamp"):
                await reconcile_from_index(memo["kube"], parent, kwargs, frozenset(), f"ConfigMap {name}")
