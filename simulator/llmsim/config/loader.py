"""Read models.yml (or the embedded default), merge built-in profiles, validate."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llmsim.config.calibrated_timing import TIMING_KNOBS, timing_defaults
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


@cache
def _weight_bytes() -> dict[str, float]:
    """Weight bytes of every built-in model profile (the nearest-model rule of the timing table)."""
    out = {}
    for name, spec in builtin_model_profiles().items():
        weights = spec.get("weights") or {}
        out[name] = float(weights["parameters_billions"]) * 1e9 * float(weights.get("bytes_per_parameter", 2.0))
    return out


def _apply_timing(entry: dict[str, Any], redefined: set[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Merge the built-in timing of the entry's profile on its GPU under the knobs it sets itself.

    Returns the entry and where each knob comes from: "the file", the calibration data (see
    ``calibrated_timing``), or the schema's default and why no calibration applies.
    """
    if entry.get("engine") != "scheduler":
        return entry, {}
    profile, hardware = entry.get("profile"), entry.get("hardware")
    defaults = None
    if not isinstance(profile, str):
        why = "no model profile"
    elif not isinstance(hardware, str):
        why = "no hardware"
    elif hardware in redefined:
        why = f"hardware '{hardware}' is defined in the file, not the built-in profile"
    else:
        defaults = timing_defaults(profile, hardware, _weight_bytes())
        why = f"no calibrated timing for hardware '{hardware}'"
    merged = dict(entry)
    sources = {}
    for knob in TIMING_KNOBS:
        section, field = knob.split(".")
        own = merged.get(section)
        if isinstance(own, dict) and field in own:
            sources[knob] = "the file"
        elif defaults is not None and (own is None or isinstance(own, dict)):
            merged[section] = {**(own or {}), field: defaults[knob].value}
            sources[knob] = defaults[knob].source
        else:
            sources[knob] = f"default ({why})"
    return merged, sources


def parse_models_config(text: str, file: str) -> ModelsConfig:
    """Parse models.yml text; ``file`` names it in errors. Raises :class:`ConfigError`."""
    return _validate(parse_yaml(text, file), file)


def load_models_config(path: str | Path | None = None) -> ModelsConfig:
    """Parse ``path``, or the embedded default when None. Raises :class:`ConfigError`."""
    if path is None:
        return parse_models_config(read_data_file("models.yml"), EMBEDDED_MODELS)
    return _validate(read_yaml_file(path), str(path))


def validate_models_config(raw: Any, file: str) -> ModelsConfig:
    """Check an already-parsed models.yml mapping (``vllm serve``'s flags build one); ``file`` names it in errors."""
    return _validate(raw, file)


def _validate(raw: Any, file: str) -> ModelsConfig:
    if not isinstance(raw, dict):
        raise ConfigError(file, "expected a mapping with a 'models' list at the top level")
    models = raw.get("models")
    # Where each scheduler model's timing knobs come from, by model name.
    timing_sources: dict[str, dict[str, str]] = {}
    if isinstance(models, list):
        own_hardware = raw.get("hardware")
        redefined = set(own_hardware) if isinstance(own_hardware, dict) else set()
        merged = []
        for i, m in enumerate(models):
            if isinstance(m, dict):
                m, sources = _apply_timing(
                    _apply_profile(m, file, entry_label("models", i, "name", m.get("name"))), redefined
                )
                if sources and isinstance(m.get("name"), str):
                    timing_sources[m["name"]] = sources
            merged.append(m)
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
    # Requests name a model by its name or an alias: one namespace.
    for i, model in enumerate(config.models):
        for j, alias in enumerate(model.aliases):
            if alias in seen:
                label = entry_label("models", i, "name", model.name)
                raise ConfigError(
                    file, f"alias '{alias}' is already a model's name or alias", entry=label, field=f"aliases[{j}]"
                )
            seen.add(alias)
    # Requests name a LoRA adapter in "model": adapters and base models share one namespace.
    adapters: set[str] = set()
    for i, model in enumerate(config.models):
        for j, adapter in enumerate(model.lora.adapters if model.lora is not None else ()):
            where = f"lora.adapters[{j}].name"
            label = entry_label("models", i, "name", model.name)
            if adapter.name in seen:
                raise ConfigError(
                    file, f"LoRA adapter '{adapter.name}' has the name of a served model", entry=label, field=where
                )
            if adapter.name in adapters:
                raise ConfigError(
                    file, f"LoRA adapter '{adapter.name}' is declared by two models", entry=label, field=where
                )
            adapters.add(adapter.name)
    config = config.model_copy(update={"hardware": hardware})
    config._timing_sources = timing_sources
    return config
