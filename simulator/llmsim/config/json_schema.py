"""models.yml's JSON Schema, as ``make generate`` ships it to the operator (its CRD is built from it).

pydantic's schema of :class:`~llmsim.config.schema.ModelsConfig`, with one change: a field the
loader fills from elsewhere when it is absent (a built-in model profile, the calibrated timing
table) has no ``default``, because its static default is only the last resort. A consumer that
applied it (the API server defaulting a custom resource) would override the profile or the
calibration.
"""

from __future__ import annotations

from typing import Any

from llmsim.config.calibrated_timing import TIMING_KNOBS
from llmsim.config.loader import builtin_model_profiles
from llmsim.config.schema import ModelsConfig

__all__ = ["inherited_fields", "models_json_schema"]


def inherited_fields() -> list[str]:
    """Dotted paths in a model entry whose value, when absent, comes from a profile or the calibration."""
    paths = set(TIMING_KNOBS)
    for profile in builtin_model_profiles().values():
        for key, value in profile.items():
            if isinstance(value, dict):
                paths.update(f"{key}.{sub}" for sub in value)
            else:
                paths.add(key)
    return sorted(paths)


def models_json_schema() -> dict[str, Any]:
    """The JSON Schema of models.yml (deterministic: the same source gives the same dict)."""
    schema = ModelsConfig.model_json_schema()
    defs: dict[str, Any] = schema["$defs"]
    for path in inherited_fields():
        node = defs["ModelConfig"]
        *sections, field = path.split(".")
        for section in sections:
            node = defs[_ref_name(node["properties"][section])]
        node["properties"][field].pop("default", None)
    return schema


def _ref_name(prop: dict[str, Any]) -> str:
    """The $defs name a property refers to (directly, or as the non-null member of an Optional)."""
    for candidate in [prop, *prop.get("anyOf", ())]:
        if "$ref" in candidate:
            return str(candidate["$ref"]).rsplit("/", 1)[-1]
    raise KeyError(f"not a reference to a section: {prop}")
