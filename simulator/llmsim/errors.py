"""The one error type for every broken input file, rendered as one line naming file, entry and field.

Imports nothing from llmsim, so the config loader and the responses loader can both raise it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import ValidationError


class ConfigError(Exception):
    """A config or responses file that cannot be served; ``str()`` is the one-line message."""

    def __init__(self, file: str, message: str, entry: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.entry = entry
        self.field = field
        self.message = message
        parts = [file]
        if entry:
            parts.append(entry)
        if field:
            parts.append(f"field '{field}'")
        super().__init__(": ".join([*parts, message]))


def dotted(loc: Sequence[int | str]) -> str:
    """``("kv_cache", "block_size")`` -> ``kv_cache.block_size``; list indexes as ``[i]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def from_validation_error(
    file: str,
    exc: ValidationError,
    entry_of: dict[int, str] | None = None,
    list_key: str = "models",
) -> ConfigError:
    """Turn pydantic's first error into a ConfigError.

    ``entry_of`` maps a list index under ``list_key`` to a label such as ``models[1] (name 'x')``.
    """
    err = exc.errors()[0]
    loc = list(err["loc"])
    entry: str | None = None
    if len(loc) >= 2 and loc[0] == list_key and isinstance(loc[1], int):
        idx = loc[1]
        entry = (entry_of or {}).get(idx, f"{list_key}[{idx}]")
        loc = loc[2:]
    elif loc and isinstance(loc[0], str) and loc[0] != list_key:
        entry = str(loc[0]) if len(loc) > 1 and loc[0] == "hardware" else None
    field = dotted(loc) or None
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        message = "unknown field"
    elif err["type"] == "missing":
        message = "required field is missing"
    return ConfigError(file, message, entry=entry, field=field)


def parse_yaml(text: str, file: str) -> Any:
    """YAML to Python; a syntax error becomes a ConfigError with the file and position."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(file, f"invalid YAML: {where}{problem}") from None
