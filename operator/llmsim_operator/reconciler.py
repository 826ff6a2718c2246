"""One level-triggered reconcile: render every child from the spec, apply what differs, write the status.

Called by the kopf handlers (create, update, resume) and by the watches of the children (a child
deleted or changed by someone else). It is idempotent and, given what the watches know, quiet:
every child carries the hash of the manifest last applied to it, so a reconcile where nothing
changed applies nothing and writes no status. Status is replaced on the status subresource
guarded by resourceVersion, so the two writers never lose each other's updates.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from llmsim_operator import conventions as c
from llmsim_operator.inference_pool import (
    OBJECTIVE_API,
    OBJECTIVE_PLURAL,
    POOL_API,
    POOL_PLURAL,
    PoolChildren,
    render_pool,
)
from llmsim_operator.kube import ApiError, KubeApi, Object, namespace_gone
from llmsim_operator.render import Children, Owner, endpoint, render_children
from llmsim_operator.simulator_config import config_data
from llmsim_operator.spec import InvalidSpec, SimulatorSpec, parse_spec
from llmsim_operator.status import INFERENCE_POOL, Condition, Fleet, Reconciled, reconciled_status, with_deployment

logger = logging.getLogger(__name__)

MONITORING_API = "monitoring.coreos.com/v1"
#: PodDisruptionBudget: policy/v1 from Kubernetes 1.21, policy/v1beta1 (same fields we use) before.
POLICY_APIS = ("policy/v1", "policy/v1beta1")
_STATUS_ATTEMPTS = 5
#: On every child: the hash of the manifest the operator last applied to it. A reconcile whose
#: rendered manifest has the same hash skips the apply (no write where nothing changed).
ANNOTATION_APPLIED_HASH = f"{c.GROUP}/applied-hash"


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Options:
    """Operator-wide settings the reconcile needs."""

    # Simulator image used when spec.image is empty.
    image: str = c.DEFAULT_SIMULATOR_IMAGE
    now: Callable[[], str] = utc_now


@dataclass(slots=True)
class Outcome:
    """What a reconcile did, for events and logs."""

    # (reason, message) of an invalid spec or a missing input; the children were left as they were.
    problem: tuple[str, str] | None = None
    config_hash: str | None = None
    # (reason, message) pairs worth a Warning event that do not make the resource Degraded.
    warnings: list[tuple[str, str]] = field(default_factory=list)
    status: dict[str, Any] | None = None
    # Whether the status was replaced (False: it already said this).
    status_written: bool = False
    # Kinds applied (and "-Kind" for deleted children); empty: nothing was written to a child.
    applied: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.applied) or self.status_written


class _MissingResponses(InvalidSpec):
    """spec.responses.configMapRef names a ConfigMap or key that does not exist (yet)."""


class ReconcileError(Exception):
    """An API failure while applying; the status already says Degraded/ApplyFailed. Retry later."""


@dataclass(frozen=True, slots=True)
class ChildView:
    """What the operator's watches remember of one child: enough to skip an apply and to write status.

    Built from every watch event of a child (:func:`child_view`); a few hundred bytes, not the object.
    """

    kind: str
    api_version: str
    name: str
    uid: str
    # uid of the controlling LLMSimulator.
    owner_uid: str
    # The operator's last applied-hash annotation on it (None: not applied by this version).
    applied_hash: str | None
    # Deployments only: the fields the status is computed from (generation, spec.replicas, status).
    summary: Object | None = None


#: The children the operator knows exist, by :func:`known_key`; None where nothing is known (then every
#: child is applied).
Known = Mapping[str, ChildView]
#: Kinds an LLMSimulator may have several of: known by kind and name (a Deployment and Service per
#: role, an InferenceObjective per model and adapter).
_MANY = frozenset({"Deployment", "Service", "InferenceObjective"})
POOL_KINDS = ("InferencePool", "InferenceObjective")


def known_key(kind: str, name: str) -> str:
    """The key of a child in :data:`Known`: its kind, or kind/name for kinds it may have several of."""
    return f"{kind}/{name}" if kind in _MANY else kind


def manifest_hash(manifest: Mapping[str, Any]) -> str:
    """A stable digest of a manifest (key order does not matter)."""
    text = json.dumps(manifest, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stamped(manifest: Object) -> Object:
    """``manifest`` with its own hash in the applied-hash annotation (computed without that annotation)."""
    meta = dict(manifest["metadata"])
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != ANNOTATION_APPLIED_HASH}
    meta["annotations"] = annotations
    digest = manifest_hash({**manifest, "metadata": meta})
    meta["annotations"] = {**annotations, ANNOTATION_APPLIED_HASH: digest}
    return {**manifest, "metadata": meta}


def applied_hash(obj: Mapping[str, Any]) -> str | None:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANNOTATION_APPLIED_HASH)
    return str(value) if value is not None else None


def child_view(obj: Mapping[str, Any]) -> ChildView | None:
    """The :class:`ChildView` of a child object, None if no LLMSimulator controls it."""
    meta = obj.get("metadata") or {}
    owner = next(
        (r for r in meta.get("ownerReferences") or [] if r.get("kind") == c.KIND and r.get("controller")), None
    )
    if owner is None:
        return None
    summary = None
    if obj.get("kind") == "Deployment":
        spec = obj.get("spec") or {}
        summary = {
            "metadata": {"generation": meta.get("generation")},
            "spec": {"replicas": spec["replicas"]} if "replicas" in spec else {},
            "status": dict(obj.get("status") or {}),
        }
    return ChildView(
        kind=str(obj.get("kind")),
        api_version=str(obj.get("apiVersion")),
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        owner_uid=str(owner.get("uid")),
        applied_hash=applied_hash(obj),
        summary=summary,
    )


def covers(desired: Any, live: Any) -> bool:
    """Whether ``live`` still holds everything ``desired`` sets (defaults and others' fields may be added).

    Lists of scalars compare whole; in lists of objects every desired item must be covered by a
    live one. A false "no" costs one no-op apply (which changes nothing, so it triggers no event).
    """
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(k in live and covers(v, live[k]) for k, v in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list):
            return False
        if all(not isinstance(d, Mapping | list) for d in desired):
            return desired == live
        return all(any(covers(d, item) for item in live) for d in desired)
    if isinstance(desired, bool) or isinstance(live, bool):
        return desired is live
    if isinstance(desired, int | float) and isinstance(live, int | float):
        return desired == live
    return bool(desired == live)


#: Parses and renders kept (LRU): the child events that follow a reconcile compare against the same
#: render. Rendering models.yml dominates the operator's CPU at scale; a burst of events about one
#: simulator's children (created, then their status) renders it once.
_CACHE_SIZE = 128
_parses: OrderedDict[tuple[str, ...], SimulatorSpec | InvalidSpec] = OrderedDict()
_renders: OrderedDict[tuple[str, ...], Children] = OrderedDict()


def _remember(cache: OrderedDict[tuple[str, ...], Any], key: tuple[str, ...], value: Any) -> None:
    cache[key] = value
    while len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)


def _parse(body: Mapping[str, Any]) -> SimulatorSpec:
    """parse_spec of ``body`` (cached by name and spec); raises :class:`InvalidSpec`."""
    meta = body["metadata"]
    key = (str(meta["namespace"]), str(meta["name"]), manifest_hash(body.get("spec") or {}))
    parsed = _parses.get(key)
    if parsed is None:
        try:
            parsed = parse_spec(key[1], key[0], body.get("spec") or {})
        except InvalidSpec as exc:
            parsed = exc
        _remember(_parses, key, parsed)
    else:
        _parses.move_to_end(key)
    if isinstance(parsed, InvalidSpec):
        raise type(parsed)(*parsed.args)  # a fresh one: re-raising the cached one would grow its traceback
    return parsed


def _render(body: Mapping[str, Any], sim: SimulatorSpec, responses: str | None, image: str) -> Children:
    """render_children for ``body`` (cached by everything the render reads)."""
    meta = body["metadata"]
    spec_hash, responses_hash = manifest_hash(body.get("spec") or {}), manifest_hash({"r": responses})
    key = (sim.namespace, sim.name, str(meta["uid"]), spec_hash, responses_hash, image)
    children = _renders.get(key)
    if children is None:
        children = render_children(sim, Owner(sim.name, key[2]), config_data(sim, responses), image)
        _remember(_renders, key, children)
    else:
        _renders.move_to_end(key)
    return children


async def reconcile(
    kube: KubeApi,
    body: Mapping[str, Any],
    options: Options,
    known: Known | None = None,
    force: frozenset[str] = frozenset(),
    *,
    confirm_absent: bool = False,
) -> Outcome:
    """Bring the children of the LLMSimulator ``body`` in line with its spec, then write its status.

    With ``known`` (what the watches say exists), a child whose applied-hash annotation matches the
    rendered one is not applied again, and a child not wanted is deleted only if it exists: a
    reconcile where nothing changed makes no API call at all. Kinds in ``force`` are applied anyway
    (a watch event showed someone changed them). ``confirm_absent`` reads an unwanted optional child
    that is not known before concluding it is gone (after a spec change: its watch may have started
    only just now, with its CRD).
    """
    meta = body["metadata"]
    name, namespace = str(meta["name"]), str(meta["namespace"])
    generation = int(meta.get("generation") or 0)
    outcome = Outcome()
    if meta.get("deletionTimestamp"):
        # Being deleted (foreground): re-applying would fight the garbage collector.
        return outcome
    try:
        sim = _parse(body)
        responses = await _responses(kube, sim)
    except InvalidSpec as exc:
        reason = "ResponsesNotFound" if isinstance(exc, _MissingResponses) else "InvalidSpec"
        outcome.problem = (reason, str(exc))
        spec = body.get("spec") or {}
        fleet = await _fleet(kube, namespace, name, spec, known)
        result = Reconciled(generation, _selector(name, spec), False, None, None, None, outcome.problem)
        await _write(kube, body, result, fleet, options.now(), outcome)
        return outcome

    uid = str(meta["uid"])
    children = _render(body, sim, responses, options.image)
    outcome.config_hash = children.config_hash
    sync = _Sync(kube, known, force, outcome, confirm_absent)
    try:
        # Independent objects, applied together: one round trip of latency, not one per object. (A pod
        # that starts before its ConfigMap exists waits for it: the kubelet retries the volume.)
        deployments = children.deployments
        results = await _all(
            sync.apply(children.config_map),
            *(sync.apply(m) for m in deployments),
            *(sync.apply(m) for m in children.services),
        )
        applied = {
            m["metadata"]["name"]: result
            for m, result in zip(deployments, results[1 : 1 + len(deployments)], strict=True)
        }
        # A switch between the aggregated and the disaggregated form leaves the other form's children.
        for kind, api_version in (("Deployment", "apps/v1"), ("Service", "v1")):
            for stale in _role_names(name):
                # Their watches run from the start, so what is not known does not exist (no read).
                if children.named(kind, stale) is None and (known is None or known_key(kind, stale) in known):
                    await sync.delete_owned(api_version, kind, namespace, stale, uid)
        fleet = await _fleet(kube, namespace, name, sim.spec, known, applied)
        warning = await _sync_service_monitor(sync, sim, children.service_monitor, uid)
        if warning:
            outcome.warnings.append(warning)
        await _sync_pod_disruption_budget(sync, sim, children.pod_disruption_budget, uid)
        pool = await _sync_inference_pool(sync, sim, children, uid)
    except ApiError as exc:
        if namespace_gone(exc):
            # The namespace is going away with everything in it: nothing to repair, nothing to report.
            return outcome
        problem = ("ApplyFailed", str(exc))
        result = Reconciled(generation, _selector(name, sim.spec), False, None, None, None, problem)
        try:
            fleet = await _fleet(kube, namespace, name, sim.spec, None)
            await _write(kube, body, result, fleet, options.now(), outcome)
        except ApiError as status_exc:
            logger.warning("cannot record the failure in %s/%s status: %s", namespace, name, status_exc)
        raise ReconcileError(str(exc)) from exc

    disaggregated = sim.roles != (c.AGGREGATED,)
    result = Reconciled(
        generation=generation,
        selector=_selector(name, sim.spec),
        rendered=True,
        # A disaggregated fleet has no Service over both roles: each role's URL is in status.roles.
        endpoint=None if disaggregated else endpoint(sim),
        kv_cache_blocks=sim.kv_cache_blocks,
        config_hash=children.config_hash,
        problem=None,
        role_endpoints={r: endpoint(sim, r) for r in sim.roles} if disaggregated else {},
        pool=pool,
    )
    await _write(kube, body, result, fleet, options.now(), outcome)
    return outcome


def _selector(name: str, spec: Mapping[str, Any]) -> str:
    """status.selector: the pods spec.replicas counts (the scale subresource's; decode when disaggregated)."""
    return c.selector_string(name, c.scaled_role(spec))


def _role_names(name: str) -> list[str]:
    """Every Deployment and Service name either form of an LLMSimulator may have had."""
    return [c.role_name(name, role) for role in (c.AGGREGATED, *c.DISAGGREGATED_ROLES)]


async def _all(*steps: Awaitable[Object | None]) -> list[Object | None]:
    """Run ``steps`` together; when one fails, wait for the others, then raise the first failure."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return cast(list[Object | None], results)


async def desired_child(
    kube: KubeApi, body: Mapping[str, Any], kind: str, api_version: str, options: Options, name: str = ""
) -> Object | None:
    """The stamped manifest of the ``kind`` child ``name`` (default: the scaled role's, or the only one) of
    LLMSimulator ``body``, as a reconcile would apply it.

    None when the spec does not render (the reconcile reports that) or does not want that child.
    """
    try:
        sim = _parse(body)
        responses = await _responses(kube, sim)
    except InvalidSpec:
        return None
    children = _render(body, sim, responses, options.image)
    if kind in POOL_KINDS:
        pool = _render_pool(sim, children, str(body["metadata"]["uid"]))
        wanted = [pool.pool, *pool.objectives] if pool is not None else []
        manifest = next((m for m in wanted if m["kind"] == kind and m["metadata"]["name"] == name), None)
    else:
        if not name:
            one = {"Deployment": children.deployment, "Service": children.service}.get(kind)
            name = one["metadata"]["name"] if one is not None else sim.name
        if kind == "ConfigMap":
            name = c.configmap_name(sim.name)
        manifest = children.named(kind, name)
    return stamped({**manifest, "apiVersion": api_version}) if manifest is not None else None


async def child_drifted(kube: KubeApi, body: Mapping[str, Any], live: Mapping[str, Any], options: Options) -> bool:
    """Whether the child ``live`` of LLMSimulator ``body`` lost (or never had) what the operator applies."""
    kind, name = str(live.get("kind")), str((live.get("metadata") or {}).get("name"))
    desired = await desired_child(kube, body, kind, str(live.get("apiVersion")), options, name)
    if desired is None:
        # Not wanted (a ServiceMonitor, budget or pool the spec dropped, the other form's Deployment or
        # Service) or not renderable: a reconcile decides.
        return kind in ("ServiceMonitor", "PodDisruptionBudget", "Deployment", "Service", *POOL_KINDS)
    return not covers(desired, live)


class _Sync:
    """Applies children that differ from what is known to exist, and remembers what it did."""

    def __init__(
        self, kube: KubeApi, known: Known | None, force: frozenset[str], outcome: Outcome, confirm_absent: bool
    ) -> None:
        self.kube, self.known, self.force, self.outcome = kube, known, force, outcome
        self.confirm_absent = confirm_absent

    def view(self, kind: str, name: str = "") -> ChildView | None:
        return self.known.get(known_key(kind, name)) if self.known is not None else None

    async def apply(self, manifest: Object) -> Object | None:
        """Apply ``manifest`` unless the known child already carries its hash; the applied object, or None."""
        manifest = stamped(manifest)
        kind = manifest["kind"]
        view = self.view(kind, manifest["metadata"]["name"])
        if (
            self.known is not None
            and kind not in self.force
            and view is not None
            and view.api_version == manifest["apiVersion"]
            and view.applied_hash == applied_hash(manifest)
        ):
            return None
        # Recorded before the first await: children applied together are listed in the order asked.
        self.outcome.applied.append(kind)
        if kind == "Deployment" and "replicas" not in manifest["spec"]:
            meta = manifest["metadata"]
            await _hand_over_replicas(self.kube, meta["namespace"], meta["name"])
        return await self.kube.apply(manifest)

    async def delete_owned(self, api_version: str, kind: str, namespace: str, name: str, owner_uid: str) -> None:
        """Delete our ``kind`` child if it exists (known, or else read from the API server)."""
        view = self.view(kind, name)
        if self.known is not None and (view is not None or not self.confirm_absent):
            if view is None or view.owner_uid != owner_uid:
                return
            api_version, uid = view.api_version, view.uid
        else:
            existing = await self.kube.get(api_version, kind, namespace, name)
            if existing is None or not is_owned(existing, owner_uid):
                return
            uid = existing["metadata"]["uid"]
        await self.kube.delete(api_version, kind, namespace, name, uid)
        self.outcome.applied.append(f"-{kind}")


async def refresh_status(
    kube: KubeApi,
    namespace: str,
    name: str,
    deployments: Fleet | Object | None,
    options: Options,
    current: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Recompute the Deployment-derived status fields of ``namespace/name`` (None if it is gone).

    ``deployments``: every role's Deployment (:func:`known_fleet`), or an aggregated fleet's one.
    ``current``: the LLMSimulator as last seen, if known; then an unchanged status costs no API call.
    """
    now = options.now()
    fleet = Fleet.of(deployments)
    status, _ = await write_status(
        kube, namespace, name, lambda previous: with_deployment(previous, fleet, now), current
    )
    return status


async def write_status(
    kube: KubeApi,
    namespace: str,
    name: str,
    compute: Callable[[dict[str, Any]], dict[str, Any]],
    current: Mapping[str, Any] | None = None,
    on_conflict: Callable[[], Awaitable[None]] | None = None,
) -> tuple[dict[str, Any] | None, bool]:
    """Compute the new status from the old one and replace it if it differs; retry on conflict.

    The first attempt starts from ``current`` when given (no read), later ones read the object.
    Returns the status (None if the object is gone) and whether it was written.
    """
    for _ in range(_STATUS_ATTEMPTS):
        if current is None:
            current = await kube.get(c.API_VERSION, c.KIND, namespace, name)
        if current is None or current["metadata"].get("deletionTimestamp"):
            return None, False
        previous: dict[str, Any] = dict(current.get("status") or {})
        new = compute(previous)
        if new == previous:
            return new, False
        try:
            await kube.replace_status({**current, "status": new})
            return new, True
        except ApiError as exc:
            if not exc.conflict:
                raise
            if on_conflict is not None:
                await on_conflict()
        current = None
    raise ApiError(409, f"status of {namespace}/{name} kept changing under {_STATUS_ATTEMPTS} attempts")


async def _write(
    kube: KubeApi, body: Mapping[str, Any], result: Reconciled, fleet: Fleet, now: str, outcome: Outcome
) -> None:
    meta = body["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    current = body if meta.get("resourceVersion") else None
    seen = [fleet]

    async def reread() -> None:
        # Someone else wrote the status meanwhile, maybe from a newer Deployment than ours: read them
        # again, or this write would take the Deployment-derived fields back to an older state.
        seen[0] = await _fleet(kube, namespace, name, body.get("spec") or {}, None)

    outcome.status, outcome.status_written = await write_status(
        kube, namespace, name, lambda previous: reconciled_status(previous, result, seen[0], now), current, reread
    )


async def _fleet(
    kube: KubeApi,
    namespace: str,
    name: str,
    spec: Mapping[str, Any],
    known: Known | None,
    applied: Mapping[str, Object | None] | None = None,
) -> Fleet:
    """Each role's Deployment as the status needs it: just applied, else from the watch when known, else read."""
    if known is not None:
        return known_fleet(name, spec, known, applied)
    deployments: list[tuple[str, Object | None]] = []
    for role in c.roles(spec):
        child = c.role_name(name, role)
        deployment = (applied or {}).get(child) or await _get_deployment(kube, namespace, child)
        deployments.append((role, deployment))
    return Fleet(tuple(deployments), gpus_per_pod=_gpus_per_pod(spec))


def known_fleet(
    name: str, spec: Mapping[str, Any], known: Known, applied: Mapping[str, Object | None] | None = None
) -> Fleet:
    """Each role's Deployment of LLMSimulator ``name``: just applied, else as the watches know it (None: missing)."""
    deployments: list[tuple[str, Object | None]] = []
    for role in c.roles(spec):
        child = c.role_name(name, role)
        view = known.get(known_key("Deployment", child))
        deployments.append((role, (applied or {}).get(child) or (view.summary if view is not None else None)))
    return Fleet(tuple(deployments), gpus_per_pod=_gpus_per_pod(spec))


def _gpus_per_pod(spec: Mapping[str, Any]) -> int:
    return int((spec.get("dataParallel") or {}).get("size") or 1)


async def _get_deployment(kube: KubeApi, namespace: str, name: str) -> Object | None:
    deployment = await kube.get("apps/v1", "Deployment", namespace, name)
    return deployment if deployment is not None and is_owned(deployment) else None


async def _responses(kube: KubeApi, sim: SimulatorSpec) -> str | None:
    """responses.yml text from the spec or its ConfigMap, None for the simulator's built-in responses."""
    responses = sim.section("responses")
    if "inline" in responses:
        return str(responses["inline"])
    ref = responses.get("configMapRef")
    if not ref:
        return None
    try:
        cm = await kube.get("v1", "ConfigMap", sim.namespace, ref["name"])
    except ApiError as exc:
        raise _MissingResponses(f"cannot read ConfigMap {ref['name']}: {exc}") from None
    key = ref.get("key", c.RESPONSES_KEY)
    if cm is None or key not in (cm.get("data") or {}):
        raise _MissingResponses(f"ConfigMap {sim.namespace}/{ref['name']} has no key '{key}'")
    return str(cm["data"][key])


def is_owned(obj: Mapping[str, Any], uid: str | None = None) -> bool:
    """Whether an LLMSimulator (with ``uid``, if given) is the controller of ``obj``."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == c.KIND and ref.get("controller") and (uid is None or ref.get("uid") == uid):
            return True
    return False


def controller_name(obj: Mapping[str, Any]) -> str | None:
    """Name of the LLMSimulator controlling ``obj``, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if (
            ref.get("kind") == c.KIND
            and str(ref.get("apiVersion", "")).startswith(c.GROUP + "/")
            and ref.get("controller")
        ):
            return str(ref["name"])
    return None


def _owns_replicas(deployment: Object, manager: str) -> bool:
    for entry in deployment["metadata"].get("managedFields") or []:
        spec_fields = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if entry.get("manager") == manager and entry.get("operation") == "Apply" and "f:replicas" in spec_fields:
            return True
    return False


async def _hand_over_replicas(kube: KubeApi, namespace: str, name: str) -> None:
    """Let an autoscaler own the Deployment's replicas without resetting them.

    NOTE: if the operator's applied config simply drops ``spec.replicas`` while it is the field's
    only manager, the API server removes the field and the Deployment falls back to 1 replica.
    A second manager first co-owns the current value, as Kubernetes documents for HPA handover.
    """
    live = await kube.get("apps/v1", "Deployment", namespace, name)
    if live is None or not _owns_replicas(live, c.FIELD_MANAGER):
        return
    handover = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": live["spec"].get("replicas", 1)},
    }
    await kube.apply(handover, field_manager=c.HANDOVER_FIELD_MANAGER)


async def _sync_service_monitor(
    sync: _Sync, sim: SimulatorSpec, manifest: Object | None, owner_uid: str
) -> tuple[str, str] | None:
    """Apply the ServiceMonitor, or delete ours when no longer wanted. Returns a warning, if any."""
    kube = sync.kube
    if manifest is None:
        if (sync.known is not None and not sync.confirm_absent) or await kube.api_exists(
            MONITORING_API, "servicemonitors"
        ):
            await sync.delete_owned(MONITORING_API, "ServiceMonitor", sim.namespace, sim.name, owner_uid)
        return None
    # Wanted but not served (as far as we know): ask again, the CRD may have been installed since.
    if not await kube.api_exists(MONITORING_API, "servicemonitors") and not await kube.api_exists(
        MONITORING_API, "servicemonitors", refresh=True
    ):
        return ("ServiceMonitorUnavailable", f"{MONITORING_API} is not served: no ServiceMonitor created")
    await sync.apply(manifest)
    return None


async def _sync_pod_disruption_budget(sync: _Sync, sim: SimulatorSpec, manifest: Object | None, owner_uid: str) -> None:
    """Apply the PodDisruptionBudget in the newest policy version served, or delete ours when not wanted."""
    kube = sync.kube
    api_version = POLICY_APIS[0] if await kube.api_exists(POLICY_APIS[0], "poddisruptionbudgets") else POLICY_APIS[1]
    if manifest is not None:
        await sync.apply({**manifest, "apiVersion": api_version})
        return
    await sync.delete_owned(api_version, "PodDisruptionBudget", sim.namespace, sim.name, owner_uid)


def _render_pool(sim: SimulatorSpec, children: Children, owner_uid: str) -> PoolChildren | None:
    # The serving Deployments, whose pods the pool selects.
    deployments = list(children.deployments)
    return render_pool(sim.name, sim.namespace, sim.spec, Owner(sim.name, owner_uid).reference(), deployments)


async def _sync_inference_pool(sync: _Sync, sim: SimulatorSpec, children: Children, owner_uid: str) -> Condition | None:
    """Apply the InferencePool and InferenceObjectives where their APIs are served, delete ours not wanted.

    Returns the InferencePool condition (None: no pool wanted). Wanted but not served: discovery is
    asked again each time (its CRD may have been installed since; the CRD watch also reconciles).
    """
    kube = sync.kube
    wanted = _render_pool(sim, children, owner_uid)
    wanted_objectives = {m["metadata"]["name"] for m in wanted.objectives} if wanted is not None else set()
    for view in list((sync.known or {}).values()):
        if view.kind == "InferenceObjective" and view.name not in wanted_objectives:
            await sync.delete_owned(view.api_version, view.kind, sim.namespace, view.name, owner_uid)
    if wanted is None:
        if sync.view("InferencePool") is not None or (
            sync.confirm_absent and await kube.api_exists(POOL_API, POOL_PLURAL)
        ):
            await sync.delete_owned(POOL_API, "InferencePool", sim.namespace, sim.name, owner_uid)
        return None
    if not await _served(kube, POOL_API, POOL_PLURAL):
        return Condition(
            INFERENCE_POOL,
            False,
            "APINotServed",
            f"{POOL_API} InferencePool is not served (install the Gateway API Inference Extension CRDs): "
            "nothing created",
        )
    await sync.apply(wanted.pool)
    if wanted.problem is not None:
        return Condition(INFERENCE_POOL, False, "InvalidObjective", wanted.problem)
    if wanted.objectives:
        if not await _served(kube, OBJECTIVE_API, OBJECTIVE_PLURAL):
            return Condition(
                INFERENCE_POOL,
                False,
                "ObjectivesNotServed",
                f"pool {sim.name} created; {OBJECTIVE_API} InferenceObjective is not served: no objectives",
            )
        await _all(*(sync.apply(m) for m in wanted.objectives))
    count = len(wanted.objectives)
    return Condition(INFERENCE_POOL, True, "Created", f"pool {sim.name} and {count} objective(s) applied")


async def _served(kube: KubeApi, group_version: str, plural: str) -> bool:
    """Whether ``plural`` is served, asking discovery again when the cached answer is no."""
    return await kube.api_exists(group_version, plural) or await kube.api_exists(group_version, plural, refresh=True)
