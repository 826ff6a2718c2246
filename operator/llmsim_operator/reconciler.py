"""One level-triggered reconcile: render every child from the spec, apply it, write the status.

Called by the kopf handlers (create, update, resume, drift timer) and by the Deployment watch. It
is idempotent: applying the same spec twice changes nothing. Status is written with a
read-modify-write on the status subresource guarded by resourceVersion, so the two writers never
lose each other's updates.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmsim_operator import conventions as c
from llmsim_operator.kube import ApiError, KubeApi, Object
from llmsim_operator.render import Owner, endpoint, render_children
from llmsim_operator.simulator_config import config_data
from llmsim_operator.spec import InvalidSpec, SimulatorSpec, parse_spec
from llmsim_operator.status import Reconciled, reconciled_status, with_deployment

logger = logging.getLogger(__name__)

MONITORING_API = "monitoring.coreos.com/v1"
#: PodDisruptionBudget: policy/v1 from Kubernetes 1.21, policy/v1beta1 (same fields we use) before.
POLICY_APIS = ("policy/v1", "policy/v1beta1")
_STATUS_ATTEMPTS = 5


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


class _MissingResponses(InvalidSpec):
    """spec.responses.configMapRef names a ConfigMap or key that does not exist (yet)."""


class ReconcileError(Exception):
    """An API failure while applying; the status already says Degraded/ApplyFailed. Retry later."""


async def reconcile(kube: KubeApi, body: Mapping[str, Any], options: Options) -> Outcome:
    """Bring the children of the LLMSimulator ``body`` in line with its spec, then write its status."""
    meta = body["metadata"]
    name, namespace = str(meta["name"]), str(meta["namespace"])
    generation = int(meta.get("generation") or 0)
    outcome = Outcome()
    if meta.get("deletionTimestamp"):
        # Being deleted (foreground): re-applying would fight the garbage collector.
        return outcome
    try:
        sim = parse_spec(name, namespace, body.get("spec") or {})
        responses = await _responses(kube, sim)
    except InvalidSpec as exc:
        reason = "ResponsesNotFound" if isinstance(exc, _MissingResponses) else "InvalidSpec"
        outcome.problem = (reason, str(exc))
        deployment = await _get_deployment(kube, namespace, name)
        result = Reconciled(generation, c.selector_string(name), False, None, None, None, outcome.problem)
        outcome.status = await _write(kube, namespace, name, result, deployment, options.now())
        return outcome

    data = config_data(sim, responses)
    children = render_children(sim, Owner(name, str(meta["uid"])), data, options.image)
    outcome.config_hash = children.config_hash
    try:
        await kube.apply(children.config_map)
        if "replicas" not in children.deployment["spec"]:
            await _hand_over_replicas(kube, namespace, name)
        deployment = await kube.apply(children.deployment)
        await kube.apply(children.service)
        warning = await _sync_service_monitor(kube, sim, children.service_monitor, str(meta["uid"]))
        if warning:
            outcome.warnings.append(warning)
        await _sync_pod_disruption_budget(kube, sim, children.pod_disruption_budget, str(meta["uid"]))
    except ApiError as exc:
        problem = ("ApplyFailed", str(exc))
        result = Reconciled(generation, c.selector_string(name), False, None, None, None, problem)
        try:
            await _write(kube, namespace, name, result, await _get_deployment(kube, namespace, name), options.now())
        except ApiError as status_exc:
            logger.warning("cannot record the failure in %s/%s status: %s", namespace, name, status_exc)
        raise ReconcileError(str(exc)) from exc

    result = Reconciled(
        generation=generation,
        selector=c.selector_string(name),
        rendered=True,
        endpoint=endpoint(sim),
        kv_cache_blocks=sim.kv_cache_blocks,
        config_hash=children.config_hash,
        problem=None,
    )
    outcome.status = await _write(kube, namespace, name, result, deployment, options.now())
    return outcome


async def refresh_status(
    kube: KubeApi, namespace: str, name: str, deployment: Object | None, options: Options
) -> dict[str, Any] | None:
    """Recompute the Deployment-derived status fields of ``namespace/name`` (None if it is gone)."""
    now = options.now()
    return await write_status(kube, namespace, name, lambda previous: with_deployment(previous, deployment, now))


async def write_status(
    kube: KubeApi, namespace: str, name: str, compute: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any] | None:
    """Read the LLMSimulator, compute its new status from the old one, replace it; retry on conflict."""
    for _ in range(_STATUS_ATTEMPTS):
        current = await kube.get(c.API_VERSION, c.KIND, namespace, name)
        if current is None or current["metadata"].get("deletionTimestamp"):
            return None
        previous: dict[str, Any] = current.get("status") or {}
        new = compute(previous)
        if new == previous:
            return new
        try:
            await kube.replace_status({**current, "status": new})
            return new
        except ApiError as exc:
            if not exc.conflict:
                raise
    raise ApiError(409, f"status of {namespace}/{name} kept changing under {_STATUS_ATTEMPTS} attempts")


async def _write(
    kube: KubeApi, namespace: str, name: str, result: Reconciled, deployment: Object | None, now: str
) -> dict[str, Any] | None:
    return await write_status(
        kube, namespace, name, lambda previous: reconciled_status(previous, result, deployment, now)
    )


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
    kube: KubeApi, sim: SimulatorSpec, manifest: Object | None, owner_uid: str
) -> tuple[str, str] | None:
    """Apply the ServiceMonitor, or delete ours when no longer wanted. Returns a warning, if any."""
    if not await kube.api_exists(MONITORING_API, "servicemonitors"):
        if manifest is not None:
            return ("ServiceMonitorUnavailable", f"{MONITORING_API} is not served: no ServiceMonitor created")
        return None
    if manifest is not None:
        await kube.apply(manifest)
        return None
    existing = await kube.get(MONITORING_API, "ServiceMonitor", sim.namespace, sim.name)
    if existing is not None and is_owned(existing, owner_uid):
        await kube.delete(MONITORING_API, "ServiceMonitor", sim.namespace, sim.name, existing["metadata"]["uid"])
    return None


async def _sync_pod_disruption_budget(
    kube: KubeApi, sim: SimulatorSpec, manifest: Object | None, owner_uid: str
) -> None:
    """Apply the PodDisruptionBudget in the newest policy version served, or delete ours when not wanted."""
    api_version = POLICY_APIS[0] if await kube.api_exists(POLICY_APIS[0], "poddisruptionbudgets") else POLICY_APIS[1]
    if manifest is not None:
        await kube.apply({**manifest, "apiVersion": api_version})
        return
    existing = await kube.get(api_version, "PodDisruptionBudget", sim.namespace, sim.name)
    if existing is not None and is_owned(existing, owner_uid):
        await kube.delete(api_version, "PodDisruptionBudget", sim.namespace, sim.name, existing["metadata"]["uid"])
