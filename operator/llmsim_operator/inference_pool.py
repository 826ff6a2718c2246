"""The Gateway API Inference Extension (GIE) objects of an LLMSimulator: its InferencePool and InferenceObjectives.

``spec.inferencePool`` asks for them. The pool is rendered from the *rendered* Deployments, not
from the spec, so it follows whatever the Deployments become: its selector is the labels every
serving Deployment selects its pods by (one Deployment: exactly its selector), its targetPorts the
serving container's ports named ``http`` or ``http-<n>`` (data-parallel ranks behind an external
load balancer each get one).

Versions (checked against the upstream CRDs, copies in tests/operator/data/gie/):

- InferencePool ``inference.networking.k8s.io/v1`` (GIE v1.6.0): selector.matchLabels,
  targetPorts [{number}] (1-8, unique), endpointPickerRef {group, kind (Service), name, port
  {number}, failureMode FailOpen|FailClose}, appProtocol.
- InferenceObjective ``inference.networking.x-k8s.io/v1alpha2`` (GIE v1.5.0; removed upstream in
  v1.6.0): poolRef {group, kind, name}, priority. The Endpoint Picker matches a request to the
  objective named in its ``x-gateway-inference-objective`` header, so each objective is named
  after the model (or LoRA adapter) it is for, as a DNS-1123 name, unless the entry names it.

Both APIs are optional: whether they are served is the reconciler's question (discovery).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmsim_operator import conventions as c

POOL_API = "inference.networking.k8s.io/v1"
POOL_PLURAL = "inferencepools"
OBJECTIVE_API = "inference.networking.x-k8s.io/v1alpha2"
OBJECTIVE_PLURAL = "inferenceobjectives"
#: The CRDs whose appearance makes the operator look again (name -> the group version it serves).
CRDS = {
    f"{POOL_PLURAL}.inference.networking.k8s.io": POOL_API,
    f"{OBJECTIVE_PLURAL}.inference.networking.x-k8s.io": OBJECTIVE_API,
}
#: The status condition reporting the pool (present only while spec.inferencePool is set).
CONDITION = "InferencePool"
#: GIE's limit on targetPorts.
MAX_TARGET_PORTS = 8
_SERVING_PORT = re.compile(r"^http(-[0-9]+)?$")

Manifest = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PoolChildren:
    """The GIE objects one LLMSimulator wants."""

    pool: Manifest
    objectives: tuple[Manifest, ...]
    # Why the spec cannot be honoured as written (an objective for a model not served), or None.
    problem: str | None = None


def serving_ports(deployment: Mapping[str, Any]) -> list[int]:
    """Container ports named ``http`` or ``http-<n>`` in ``deployment``'s pod template, in order."""
    ports: list[int] = []
    for container in deployment["spec"]["template"]["spec"].get("containers") or []:
        for port in container.get("ports") or []:
            if _SERVING_PORT.match(str(port.get("name", ""))) and port["containerPort"] not in ports:
                ports.append(int(port["containerPort"]))
    return ports


def pool_selector(deployments: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The labels every serving Deployment selects its pods by: pods of any of them, and no others'.

    NOTE: every Deployment's selector includes the LLMSimulator's instance label (unique in the
    namespace), so the common part selects this fleet's pods only; with role Deployments it selects
    all their pods, which is what an Endpoint Picker that tells roles apart by label wants.
    """
    common: dict[str, str] | None = None
    for deployment in deployments:
        labels = dict(deployment["spec"]["selector"]["matchLabels"])
        common = labels if common is None else {k: v for k, v in common.items() if labels.get(k) == v}
    return common or {}


def objective_name(model: str) -> str:
    """A DNS-1123 name for ``model`` (lowercase; runs of other characters become one dash)."""
    name = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:253].strip("-")
    return name or "model"


def served_models(spec: Mapping[str, Any]) -> list[str]:
    """The model names requests may ask for: the model's, then each LoRA adapter's."""
    names = [str((spec.get("model") or {}).get("name", ""))]
    names += [str(a["name"]) for a in ((spec.get("lora") or {}).get("adapters") or []) if a.get("name")]
    return names


def render_pool(
    name: str,
    namespace: str,
    spec: Mapping[str, Any],
    owner_reference: Mapping[str, Any],
    deployments: Sequence[Mapping[str, Any]],
) -> PoolChildren | None:
    """The InferencePool and InferenceObjectives of LLMSimulator ``namespace/name``; None if not wanted."""
    wanted = spec.get("inferencePool")
    if wanted is None:
        return None

    def metadata(object_name: str) -> dict[str, Any]:
        return {
            "name": object_name,
            "namespace": namespace,
            "labels": c.common_labels(name),
            "ownerReferences": [dict(owner_reference)],
        }

    ports: list[int] = []
    for deployment in deployments:
        ports += [p for p in serving_ports(deployment) if p not in ports]
    pool_spec: dict[str, Any] = {
        "selector": {"matchLabels": pool_selector(deployments)},
        "targetPorts": [{"number": p} for p in sorted(ports)[:MAX_TARGET_PORTS]],
    }
    picker = wanted.get("endpointPickerRef")
    if picker:
        pool_spec["endpointPickerRef"] = dict(picker)
    if wanted.get("appProtocol"):
        pool_spec["appProtocol"] = wanted["appProtocol"]
    pool = {"apiVersion": POOL_API, "kind": "InferencePool", "metadata": metadata(name), "spec": pool_spec}

    served = served_models(spec)
    objectives: list[Manifest] = []
    problem = None
    for entry in wanted.get("objectives") or []:
        model = str(entry.get("model") or served[0])
        if model not in served:
            problem = f"inferencePool.objectives: model '{model}' is not served (serves {', '.join(served)})"
            continue
        objective_spec: dict[str, Any] = {
            "poolRef": {"group": POOL_API.split("/")[0], "kind": "InferencePool", "name": name}
        }
        if entry.get("priority") is not None:
            objective_spec["priority"] = int(entry["priority"])
        objectives.append(
            {
                "apiVersion": OBJECTIVE_API,
                "kind": "InferenceObjective",
                "metadata": metadata(str(entry.get("name") or objective_name(model))),
                "spec": objective_spec,
            }
        )
    return PoolChildren(pool, tuple(objectives), problem)
