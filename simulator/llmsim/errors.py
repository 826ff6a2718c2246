"""The one error type for every broken input file, rendered as one line naming file, entry and field.

Both config files (models.yml and responses.yml) are read, decoded, parsed and validated by the
helpers here, so both fail the same way: one :class:`ConfigError` line such as
``models.yml: models[1] (name 'x'): field 'kv_cache.block_size': Input should be greater than 0``.
Imports nothing from llmsim, so the config loader and the responses loader can both use it.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, Tag, ValidationError
from pydantic_core import ErrorDetails

__all__ = [
    "ConfigError",
    "entry_label",
    "format_loc",
    "from_validation_error",
    "parse_yaml",
    "read_yaml_file",
    "type_name",
]


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


def format_loc(loc: Sequence[int | str]) -> str:
    """A pydantic location as written in the file: ``("kv_cache", "block_size")`` -> ``kv_cache.block_size``.

    List indexes render as ``[i]``: ``("messages", 0, "role")`` -> ``messages[0].role``.
    """
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + part
    return out


def entry_label(section: str, index: int, key: str, name: object) -> str:
    """One list entry as errors name it: ``models[1] (name 'x')``, or ``models[1]`` without a string name."""
    return f"{section}[{index}] ({key} '{name}')" if isinstance(name, str) and name else f"{section}[{index}]"


def type_name(value: object) -> str:
    """The YAML word for a value's type, for "expected X, got Y" messages."""
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "boolean"
    if isinstance(value, int):
        return "integer"
    simple = {type(None): "null", float: "number", str: "string", list: "list", dict: "mapping"}
    return simple.get(type(value), type(value).__name__)


def _position(text: str, index: int) -> str:
    """``line L, column C`` (1-based, columns in characters) of ``text[index]``."""
    before = text[:index]
    return f"line {before.count(chr(10)) + 1}, column {index - (before.rfind(chr(10)) + 1) + 1}"


def parse_yaml(text: str, file: str) -> Any:
    """YAML to Python; a syntax error becomes a ConfigError with the file and position."""
    try:
        return yaml.safe_load(text)
    except yaml.reader.ReaderError as exc:
        # A control character: PyYAML's own message spans two lines and counts characters, not lines.
        raise ConfigError(
            file,
            f"invalid YAML: {_position(text, exc.position)}: unacceptable character #x{exc.character:04x}: {exc.reason}",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).replace("\n", " ")
        raise ConfigError(file, f"invalid YAML: {where}{problem}") from None


def read_yaml_file(path: str | Path) -> Any:
    """Read, decode and parse one config file; every failure is a one-line ConfigError naming it.

    A file that is missing or unreadable, not UTF-8 (with the byte offset and the line of the first
    bad byte), or not YAML (with line and column).
    """
    file = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(file, f"cannot read file: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Everything before the bad byte decodes, so line and column count characters as an editor does.
        before = data[: exc.start].decode("utf-8")
        where = _position(before, len(before))
        raise ConfigError(file, f"not UTF-8 text: {exc.reason} at byte {exc.start} ({where})") from None
    return parse_yaml(text, file)


# pydantic's type errors, in the words of a YAML file ("got" is filled in from the input).
_EXPECTED = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def from_validation_error(
    file: str,
    exc: ValidationError,
    schema: type[BaseModel],
    document: Any,
    entries: Mapping[str, str | None],
) -> ConfigError:
    """pydantic's first error about ``document`` (validated as ``schema``) as a ConfigError.

    ``entries`` names the top-level keys that hold entries. A list key maps to the field that names
    its items: ``{"models": "name"}`` labels ``models[1] (name 'x')``. A key mapped to None is one
    entry itself: ``{"default": None}`` labels ``default``.
    """
    errors = exc.errors(include_url=False)
    # A misspelt field is both unknown and missing: name the misspelling, the cause.
    first = errors[0]
    same_mapping = (e for e in errors if e["type"] == "extra_forbidden" and e["loc"][:-1] == first["loc"][:-1])
    error = next(same_mapping, first)
    loc, holders = _resolve(schema, error["loc"])
    entry, field = _split_entry(loc, error, document, entries)
    return ConfigError(file, _message(error, holders), entry=entry, field=format_loc(field) or None)


def _split_entry(
    loc: tuple[int | str, ...], error: ErrorDetails, document: Any, entries: Mapping[str, str | None]
) -> tuple[str | None, tuple[int | str, ...]]:
    """(entry label, location inside the entry)."""
    if not loc or not isinstance(loc[0], str) or loc[0] not in entries:
        return None, loc
    key, name_field = loc[0], entries[loc[0]]
    if name_field is None:
        # A missing entry is a missing field of the file, not an error inside the entry.
        return (None, loc) if len(loc) == 1 and error["type"] == "missing" else (key, loc[1:])
    if len(loc) < 2 or not isinstance(loc[1], int):
        return None, loc
    index = loc[1]
    items = document.get(key) if isinstance(document, dict) else None
    item = items[index] if isinstance(items, list) and index < len(items) else None
    name = item.get(name_field) if isinstance(item, dict) else None
    return entry_label(key, index, name_field, name), loc[2:]


def _message(error: ErrorDetails, holders: Sequence[type[BaseModel]]) -> str:
    kind = error["type"]
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {type_name(error['input'])}"
    # Keyed as the file spells them (a field's alias, when it has one).
    fields = {info.alias or name: info for holder in holders for name, info in holder.model_fields.items()}
    if kind == "extra_forbidden":
        return f"unknown field (allowed: {', '.join(fields)})" if fields else "unknown field"
    if kind == "missing":
        name = error["loc"][-1] if error["loc"] else None
        description = fields[name].description if isinstance(name, str) and name in fields else None
        return f"required field is missing ({description})" if description else "required field is missing"
    if kind == "too_short" and error.get("ctx", {}).get("min_length") == 1:
        return "expected a non-empty list"
    if kind == "value_error":
        # pydantic prefixes a validator's ValueError with "Value error, "; the message is enough.
        return str(error.get("ctx", {}).get("error", error["msg"]))
    return error["msg"]


def _resolve(schema: type[BaseModel], loc: Sequence[int | str]) -> tuple[tuple[int | str, ...], list[type[BaseModel]]]:
    """``loc`` without the tags pydantic inserts for tagged unions, and the models that may hold its last part.

    A tag names a union member (``content`` in ``responses.0.content.match``); it is no place in
    the file. Inside a member, every member of the union may hold the field: an unknown field lists
    them all. Walks the annotations: models, lists, dicts, optionals and tagged unions.
    """
    out: list[int | str] = []
    annotation: Any = schema
    holders: list[type[BaseModel]] = []
    alternatives: list[Any] = []
    for part in loc:
        members = _tagged_members(annotation)
        if isinstance(part, str) and part in members:
            annotation = members[part]
            alternatives = [_unwrap(m) for m in members.values()]
            continue
        annotation, holder = _child(annotation, part)
        holders = [] if holder is None else alternatives if holder in alternatives else [holder]
        alternatives = []
        out.append(part)
    return tuple(out), holders


def _unwrap(annotation: Any) -> Any:
    """``Annotated[X, ...]`` and ``X | None`` -> ``X``."""
    while True:
        if typing.get_origin(annotation) is Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) == 1:
                annotation = members[0]
                continue
        return annotation


def _tagged_members(annotation: Any) -> dict[str, Any]:
    """``{tag: member}`` of a tagged union (members written ``Annotated[Model, Tag("tag")]``)."""
    annotation = _unwrap(annotation)
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return {}
    members: dict[str, Any] = {}
    for member in typing.get_args(annotation):
        if typing.get_origin(member) is Annotated:
            for meta in member.__metadata__:
                if isinstance(meta, Tag):
                    members[meta.tag] = member
    return members


def _child(annotation: Any, part: int | str) -> tuple[Any, type[BaseModel] | None]:
    """The annotation at ``part`` under ``annotation``, and the model that holds it (if a model does)."""
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(part) if isinstance(part, str) else None
        return (field.annotation if field is not None else None), annotation
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, tuple) and args and isinstance(part, int):
        return args[0], None
    if origin is dict and len(args) == 2:
        return args[1], None
    return None, None
