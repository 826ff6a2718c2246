"""Pure status computation: the LLMSimulator's status from its last reconcile and its Deployment.

Two writers share these functions: the reconcile (everything) and the Deployment watch (only the
replica counts and the Ready/Progressing conditions; Degraded and observedGeneration stay as the
last reconcile left them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
#: Present only while spec.inferencePool is set (see inference_pool.py).
INFERENCE_POOL = "InferencePool"
CONDITION_TYPES = (READY, PROGRESSING, DEGRADED, INFERENCE_POOL)


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class Fleet:
    """Each role's Deployment (None: missing), in the order of conventions.roles: the last is the one
    spec.replicas drives. An aggregated fleet is one role, ""."""

    deployments: tuple[tuple[str, dict[str, Any] | None], ...]
    # dataParallel.size: simulated GPUs per pod.
    gpus_per_pod: int = 1

    @classmethod
    def of(cls, deployment: Fleet | dict[str, Any] | None) -> Fleet:
        """``deployment`` as a fleet: an aggregated fleet's one Deployment, or a fleet as is."""
        return deployment if isinstance(deployment, Fleet) else cls((("", deployment),))


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What one reconcile established (the fields the Deployment does not tell)."""

    generation: int
    selector: str
    # False when the spec is invalid: the children (and the three fields below) stay as they were.
    rendered: bool
    endpoint: str | None
    kv_cache_blocks: int | None
    config_hash: str | None
    # None: everything applied. Else Degraded=True with this reason and message.
    problem: tuple[str, str] | None
    # A disaggregated fleet's Service URL per role (empty when aggregated, or not rendered).
    role_endpoints: Mapping[str, str] = field(default_factory=dict)
    # The InferencePool condition; None: no pool wanted (the condition is removed).
    pool: Condition | None = None


def _merge_condition(previous: list[dict[str, Any]], new: Condition, now: str) -> dict[str, Any]:
    """Keep lastTransitionTime unless the status flips."""
    status = "True" if new.status else "False"
    old = next((p for p in previous if p.get("type") == new.type), None)
    since = old["lastTransitionTime"] if old and old.get("status") == status and old.get("lastTransitionTime") else now
    out = {"type": new.type, "status": status, "reason": new.reason, "lastTransitionTime": since}
    if new.message:
        out["message"] = new.message
    return out


def _set_conditions(previous: list[dict[str, Any]], updates: list[Condition], now: str) -> list[dict[str, Any]]:
    """Conditions in CONDITION_TYPES order; those not in ``updates`` kept as they were."""
    by_type = {p.get("type"): p for p in previous}
    for cond in updates:
        by_type[cond.type] = _merge_condition(previous, cond, now)
    return [by_type[t] for t in CONDITION_TYPES if t in by_type]


def deployment_conditions(deployment: dict[str, Any] | None) -> tuple[Condition, Condition]:
    """Ready and Progressing, read from the Deployment's spec and status."""
    if deployment is None:
        missing = "the Deployment does not exist (yet)"
        return Condition(READY, False, "DeploymentMissing", missing), Condition(PROGRESSING, True, "Creating", missing)
    spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
    desired = int(spec.get("replicas", 1))
    ready = int(status.get("readyReplicas") or 0)
    updated = int(status.get("updatedReplicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    total = int(status.get("replicas") or 0)
    if desired == 0:
        ready_cond = Condition(READY, True, "ScaledToZero", "no replicas requested")
    elif ready >= desired:
        ready_cond = Condition(READY, True, "ReplicasReady", f"{ready}/{desired} replicas ready")
    else:
        ready_cond = Condition(READY, False, "ReplicasNotReady", f"{ready}/{desired} replicas ready")
    stalled = next(
        (
            d
            for d in status.get("conditions") or []
            if d.get("type") == "Progressing" and d.get("reason") == "ProgressDeadlineExceeded"
        ),
        None,
    )
    seen = int(status.get("observedGeneration") or 0) >= int((deployment.get("metadata") or {}).get("generation") or 0)
    if stalled is not None:
        progressing = Condition(PROGRESSING, False, "ProgressDeadlineExceeded", str(stalled.get("message", "")))
    elif not seen or updated < desired or total > updated or available < desired:
        progressing = Condition(
            PROGRESSING, True, "RollingOut", f"{updated} updated, {available} available of {desired} replicas"
        )
    else:
        progressing = Condition(PROGRESSING, False, "RolloutComplete", f"{desired} replicas up to date")
    return ready_cond, progressing


def _counts(deployment: dict[str, Any] | None) -> dict[str, Any]:
    spec = (deployment or {}).get("spec") or {}
    status = (deployment or {}).get("status") or {}
    desired = int(spec.get("replicas", 1)) if deployment is not None else 0
    ready = int(status.get("readyReplicas") or 0)
    return {"replicas": int(status.get("replicas") or 0), "readyReplicas": ready, "ready": f"{ready}/{desired}"}


def fleet_conditions(fleet: Fleet) -> tuple[Condition, Condition]:
    """Ready when every role is; Progressing as the role that is furthest from done (a stalled rollout first)."""
    per_role = [(role, deployment_conditions(d)) for role, d in fleet.deployments]
    if len(per_role) == 1:
        return per_role[0][1]

    def named(role: str, cond: Condition) -> Condition:
        return Condition(cond.type, cond.status, cond.reason, f"{role}: {cond.message}")

    not_ready = [named(role, ready) for role, (ready, _) in per_role if not ready.status]
    ready_cond = (
        not_ready[0]
        if not_ready
        else Condition(READY, True, "ReplicasReady", ", ".join(named(role, r).message for role, (r, _) in per_role))
    )
    stalled = [named(role, p) for role, (_, p) in per_role if p.reason == "ProgressDeadlineExceeded"]
    moving = [named(role, p) for role, (_, p) in per_role if p.status]
    done = Condition(
        PROGRESSING, False, "RolloutComplete", ", ".join(named(role, p).message for role, (_, p) in per_role)
    )
    return ready_cond, (stalled or moving or [done])[0]


def with_deployment(previous: dict[str, Any], deployment: Fleet | dict[str, Any] | None, now: str) -> dict[str, Any]:
    """``previous`` status with the Deployment-derived fields recomputed (every role's, for a fleet)."""
    fleet = Fleet.of(deployment)
    out = dict(previous)
    # The top-level counts are the scale subresource's: the role spec.replicas drives.
    out.update(_counts(fleet.deployments[-1][1]))
    if len(fleet.deployments) > 1:
        old_roles = previous.get("roles") or {}
        out["roles"] = {
            role: {**{k: v for k, v in (old_roles.get(role) or {}).items() if k == "endpoint"}, **_counts(d)}
            for role, d in fleet.deployments
        }
    else:
        out.pop("roles", None)
    pods = sum(int(((d or {}).get("status") or {}).get("replicas") or 0) for _, d in fleet.deployments)
    out["gpus"] = pods * fleet.gpus_per_pod
    out["conditions"] = _set_conditions(previous.get("conditions") or [], list(fleet_conditions(fleet)), now)
    return out


def reconciled_status(
    previous: dict[str, Any], result: Reconciled, deployment: Fleet | dict[str, Any] | None, now: str
) -> dict[str, Any]:
    """The whole status after a reconcile."""
    out: dict[str, Any] = {"observedGeneration": result.generation, "selector": result.selector}
    rendered = {"endpoint": result.endpoint, "kvCacheBlocks": result.kv_cache_blocks, "configHash": result.config_hash}
    for key, value in rendered.items():
        if not result.rendered and key in previous:
            out[key] = previous[key]
        elif result.rendered and value is not None:
            out[key] = value
    if result.problem is None:
        degraded = Condition(DEGRADED, False, "Reconciled", "all children applied")
    else:
        degraded = Condition(DEGRADED, True, *result.problem)
    kept = previous.get("conditions") or []
    if result.rendered and result.pool is None:
        kept = [p for p in kept if p.get("type") != INFERENCE_POOL]
    out["conditions"] = _set_conditions(kept, [degraded, *([result.pool] if result.pool else [])], now)
    if result.rendered and result.role_endpoints:
        out["roles"] = {role: {"endpoint": url} for role, url in result.role_endpoints.items()}
    elif "roles" in previous:
        out["roles"] = previous["roles"]
    return with_deployment(out, deployment, now)
