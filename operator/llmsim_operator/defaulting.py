"""Structural-schema defaulting, as kube-apiserver does it, so the CRD's defaults are stated only once."""

from __future__ import annotations

import copy
from typing import Any


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """A copy of ``value`` with ``schema``'s defaults filled in.

    Same rules as the API server: a default applies where a property is absent (or null and not
    nullable), and the defaulted value is itself defaulted, so ``default: {}`` on an object cascades
    into its properties' defaults.
    """
    if isinstance(value, dict) and schema.get("type") == "object":
        out = dict(value)
        properties: dict[str, Any] = schema.get("properties", {})
        for key, sub in properties.items():
            if out.get(key, ...) is None and not sub.get("nullable", False):
                del out[key]
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = apply_defaults(sub, out[key])
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key in out.keys() - properties.keys():
                out[key] = apply_defaults(additional, out[key])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], item) for item in value]
    return value
