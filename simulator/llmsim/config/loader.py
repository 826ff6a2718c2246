"""Read models.yml (or the embedded default), merge built-in profiles, validate."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llmsim.config.schema import HardwareProfile, ModelsConfig
from llmsim.errors import ConfigError, entry_label, from_validation_error, parse_yaml, read_yaml_file

EMBEDDED_MODELS = "<embedded>/models.yml"


def read_data_file(name: str) -> str:
    """Text of a file shipped in ``llmsim/data``."""
    return resources.files("llmsim").joinpath("data", name).read_text(encoding="utf-8")


@cache
def builtin_hardware() -> dict[str, HardwareProfile]:
    raw = parse_yaml(read_data_file("hardware.yml"), "<embedded>/hardware.yml")
    return {name: HardwareProfile.model_validate(spec) for name, spec in raw.items()}


@cache
def builtin_model_profiles() -> dict[str, dict[str, Any]]:
    raw: dict[str, dict[str, Any]] = parse_yaml(read_data_file("model_profiles.yml"), "<embedded>/model_profiles.yml")
    return raw


def _apply_profile(entry: dict[str, Any], file: str, label: str) -> dict[str, Any]:
    """Deep-merge (one level) the named built-in profile under the entry's own fields."""
    name = entry.get("profile")
    if name is None:
        return entry
    profiles = builtin_model_profiles()
    if name not in profiles:
        known = ", ".join(sorted(profiles))
        raise ConfigError(file, f"unknown model profile '{name}' (built-in: {known})", entry=label, field="profile")
    merged: dict[str, Any] = {}
    for key, value in profiles[name].items():
        merged[key] = dict(value) if isinstance(value, dict) else value
    for key, value in entry.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def parse_models_config(text: str, file: str) -> ModelsConfig:
    """Parse models.yml text; ``file`` names it in errors. Raises :class:`ConfigError`."""
    return _validate(parse_yaml(text, file), file)


def load_models_config(path: str | Path | None = None) -> ModelsConfig:
    """Parse ``path``, or the embedded default when None. Raises :class:`ConfigError`."""
    if path is None:
        return parse_models_config(read_data_file("models.yml"), EMBEDDED_MODELS)
    return _validate(read_yaml_file(path), str(path))


def _validate(raw: Any, file: str) -> ModelsConfig:
    if not isinstance(raw, dict):
        raise ConfigError(file, "expected a mapping with a 'models' list at the top level")
    models = raw.get("models")
    if isinstance(models, list):
        merged = [
            _apply_profile(m, file, entry_label("models", i, "name", m.get("name"))) if isinstance(m, dict) else m
            for i, m in enumerate(models)
        ]
        raw = {**raw, "models": merged}
    try:
        config = ModelsConfig.model_validate(raw)
    except ValidationError as exc:
        raise from_validation_error(file, exc, ModelsConfig, raw, {"models": "name"}) from None
    # Checks across entries, which no single field's validator can see.
    hardware = {**builtin_hardware(), **config.hardware}
    seen: set[str] = set()
    for i, model in enumerate(config.models):
        label = entry_label("models", i, "name", model.name)
        if model.name in seen:
            raise ConfigError(file, f"duplicate name '{model.name}'", entry=label, field="name")
        seen.add(model.name)
        if model.hardware is not None and model.hardware not in hardware:
            known = ", ".join(sorted(hardware))
            raise ConfigError(
                file,
                f"unknown hardware '{model.hardware}' (known: {known})",
                entry=label,
                field="hardware",
            )
    return config.model_copy(update={"hardware": hardware})
