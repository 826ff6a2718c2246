"""The Gateway API Inference Extension CRDs the tests install (copies in data/gie/, see its README)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from llmsim_operator.crd import without_cel_rules

DATA = Path(__file__).parent / "data" / "gie"
POOL_CRD = DATA / "inferencepools.inference.networking.k8s.io-v1.6.0.yaml"
OBJECTIVE_CRD = DATA / "inferenceobjectives.inference.networking.x-k8s.io-v1.5.0.yaml"


def gie_crds(*, old_server: bool = True) -> list[dict[str, Any]]:
    """Both CRDs; for an old server (Kubernetes 1.20) without what it refuses.

    1.20 refuses two things in them: CEL rules (``x-kubernetes-validations``, from 1.25) and an
    empty-string ``default`` (endpointPickerRef.group: ``default: ""`` is read as null, "must be of
    type string"). Both are dropped; the operator renders pools that need neither.
    """
    crds = [yaml.safe_load(path.read_text()) for path in (POOL_CRD, OBJECTIVE_CRD)]
    return [_without_empty_defaults(without_cel_rules(crd)) for crd in crds] if old_server else crds


def _without_empty_defaults(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_empty_defaults(v) for k, v in schema.items() if not (k == "default" and v == "")}
    if isinstance(schema, list):
        return [_without_empty_defaults(v) for v in schema]
    return schema
