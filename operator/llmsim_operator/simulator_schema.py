"""llmsim's models.yml schema, as the CRD uses it: OpenAPI for the spec and where each field goes.

The operator may not import llmsim, so ``make generate`` writes models.yml's JSON Schema (pydantic's,
see ``llmsim/config/json_schema.py``) to ``data/models.schema.json``; this module reads it. A
:class:`Place` puts models.yml fields into the LLMSimulator spec; :class:`Layout` turns a list of
them into the spec's OpenAPI (camelCase names; types, bounds, defaults and descriptions from the
pydantic fields) and into :class:`Binding` s, from which ``simulator_config`` writes models.yml back.

    spec.scheduler.blockSize  <--  Place("scheduler", "kv_cache.*")  -->  models[0].kv_cache.block_size
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

Schema = dict[str, Any]
#: An object's fields by camelCase name.
Keys = dict[str, "Key"]

DATA_FILE = "models.schema.json"
#: A models.yml path starting here is from the document's top level, else from a model entry.
DOCUMENT = "/"
_INT32_MAX = 2**31 - 1
#: A field named in a description, e.g. `stall_ms`: the CRD names it `stallMs`.
_FIELD_REFERENCE = re.compile(r"`([a-z0-9]+(?:_[a-z0-9]+)+)`")


@cache
def models_schema() -> Schema:
    """The JSON Schema of models.yml shipped with the operator (written by ``make generate``)."""
    text = resources.files("llmsim_operator").joinpath("data", DATA_FILE).read_text(encoding="utf-8")
    schema: Schema = json.loads(text)
    return schema


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


@dataclass(frozen=True, slots=True)
class Place:
    """Where the spec takes models.yml fields from.

    ``into``: the spec object that gets them ("" for the spec itself, "model" for spec.model).
    ``source``: a models.yml path, from a model entry or (leading "/") from the document; ``a.*``
    puts every field of section ``a`` into ``into``, ``a{}`` steps into a mapping's values.
    ``render``: False when the operator writes the field itself (its models.yml shape differs).
    """

    into: str
    source: str
    name: str | None = None
    exclude: tuple[str, ...] = ()
    rename: Mapping[str, str] = field(default_factory=dict)
    render: bool = True


@dataclass(frozen=True, slots=True)
class Key:
    """A field's models.yml name, llmsim's default for it, and its own fields."""

    name: str
    # None: no static default (none at all, or a profile or the calibration fills it in).
    default: Any
    # For an object (or a list of objects): its fields.
    keys: Keys | None


#: What :meth:`Binding.convert` returns for a value llmsim would take by itself.
OMIT: Any = object()


@dataclass(frozen=True, slots=True)
class Binding:
    """One spec field's place in models.yml."""

    # Spec path (camelCase), e.g. ("scheduler", "blockSize").
    spec: tuple[str, ...]
    # models.yml path from the model entry, or from the document when ``document``.
    target: tuple[str, ...]
    document: bool
    key: Key

    def convert(self, value: Any) -> Any:
        """``value`` with models.yml's keys, without what equals llmsim's defaults (:data:`OMIT` if nothing is left).

        An object left empty is omitted when llmsim has a default for it (``faults: {}`` says nothing), and kept
        when its presence means something (``lora: {}`` turns LoRA on).
        """
        return _convert(value, self.key)


class Layout:
    """The spec's models.yml fields: their OpenAPI by spec object, and their bindings."""

    def __init__(self, places: Iterable[Place], schema: Schema | None = None) -> None:
        self._schema = schema if schema is not None else models_schema()
        self._properties: dict[str, dict[str, Schema]] = {}
        self.bindings: list[Binding] = []
        for place in places:
            self._add(place)

    def properties(self, into: str) -> dict[str, Schema]:
        """OpenAPI properties the models.yml fields put into the spec object ``into`` (a copy, free to extend)."""
        return copy.deepcopy(self._properties.get(into, {}))

    def _add(self, place: Place) -> None:
        document = place.source.startswith(DOCUMENT)
        path = place.source.removeprefix(DOCUMENT).split(".")
        every = path[-1] == "*"
        if every:
            path = path[:-1]
        node = self._node(document, path)
        if every:
            fields = [(k, node["properties"][k]) for k in node["properties"] if k not in place.exclude]
            prefix = tuple(p.removesuffix("{}") for p in path)
        else:
            fields = [(path[-1], self._node(document, path, resolve=False))]
            prefix = tuple(p.removesuffix("{}") for p in path[:-1])
        into = self._properties.setdefault(place.into, {})
        spec_prefix = tuple(place.into.split(".")) if place.into else ()
        for key, sub in fields:
            name = place.rename.get(key) or (place.name if not every and place.name else camel(key))
            if name in into:
                raise ValueError(f"spec field {place.into}.{name} is placed twice")
            into[name], keys = openapi(sub, self._schema)
            if place.render:
                target = Key(key, _resolve(sub, self._schema).get("default"), keys)
                self.bindings.append(Binding((*spec_prefix, name), (*prefix, key), document, target))

    def _node(self, document: bool, path: list[str], resolve: bool = True) -> Schema:
        node = self._schema if document else self._def("ModelConfig")
        for i, segment in enumerate(path):
            if "properties" not in node:
                # A union of a section and something else (tokenizer: "regex" or a file): the section.
                (node,) = [self._resolve(m) for m in node.get("anyOf", ()) if "properties" in self._resolve(m)]
            node = node["properties"][segment.removesuffix("{}")]
            if i == len(path) - 1 and not resolve:
                break
            node = self._resolve(node)
            if segment.endswith("{}"):
                node = self._resolve(node["additionalProperties"])
        return node

    def _def(self, name: str) -> Schema:
        found: Schema = self._schema["$defs"][name]
        return found

    def _resolve(self, node: Schema) -> Schema:
        return _resolve(node, self._schema)


def _resolve(node: Schema, root: Schema) -> Schema:
    """``node`` with a reference (direct, allOf, or the non-null member of anyOf) replaced by its target;
    the node's own description and default win over the target's."""
    own = {k: v for k, v in node.items() if k in ("description", "default")}
    if "$ref" in node:
        return {**_resolve(root["$defs"][node["$ref"].rsplit("/", 1)[-1]], root), **own}
    for combinator in ("allOf", "anyOf"):
        members = [m for m in node.get(combinator, ()) if m.get("type") != "null"]
        if len(members) == 1:
            return {**_resolve(members[0], root), **own}
    return node


def openapi(node: Schema, root: Schema) -> tuple[Schema, Keys | None]:
    """A JSON Schema node (pydantic's, draft 2020-12) as a structural OpenAPI v3 schema, camelCase keys.

    Only scalar defaults are kept: an object's default is its fields' defaults, which the API server
    applies one by one (pydantic writes out whole section instances instead). A field keeps llmsim's
    default in models.yml anyway: the operator leaves out what equals it (:meth:`Binding.convert`).
    """
    node = _resolve(node, root)
    out: Schema = {}
    keys: Keys | None = None
    kind = node.get("type")
    if "const" in node:
        out["enum"] = [node["const"]]
    if kind == "object":
        out["type"] = "object"
        properties: dict[str, Schema] = {}
        keys = {}
        for key, sub in node.get("properties", {}).items():
            properties[camel(key)], sub_keys = openapi(sub, root)
            keys[camel(key)] = Key(key, _resolve(sub, root).get("default"), sub_keys)
        out["properties"] = properties
        if node.get("required"):
            out["required"] = [camel(k) for k in node["required"]]
    elif kind == "array":
        out["type"] = "array"
        out["items"], keys = openapi(node["items"], root)
    elif kind == "integer":
        out.update(type="integer", format=node.get("format", "int32"))
        # Integers: an exclusive bound is the next integer in.
        if "exclusiveMinimum" in node:
            out["minimum"] = node["exclusiveMinimum"] + 1
        if "exclusiveMaximum" in node:
            out["maximum"] = node["exclusiveMaximum"] - 1
    elif kind in ("number", "string", "boolean"):
        out["type"] = kind
        # OpenAPI v3.0 (draft 4): exclusive bounds are flags on minimum/maximum.
        for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
            if flag in node:
                out[bound] = node[flag]
                out[flag] = True
    else:
        raise ValueError(f"no OpenAPI form for {node}")
    for key in ("minimum", "maximum", "minLength", "maxLength", "pattern", "enum"):
        if key in node:
            out[key] = node[key]
    if "description" in node:
        out["description"] = _FIELD_REFERENCE.sub(lambda m: f"`{camel(m[1])}`", node["description"])
    # NOTE: not an empty string either: it says nothing, and a 1.20 API server refuses the CRD when it gets
    # there as null (as kubernetes' Python client sends it).
    if node.get("default") not in (None, "") and not isinstance(node["default"], dict | list):
        out["default"] = node["default"]
    if out["type"] == "integer" and out["format"] == "int32" and out.get("maximum", 0) > _INT32_MAX:
        out["format"] = "int64"
    return out, keys


def _convert(value: Any, key: Key) -> Any:
    keys = key.keys
    if isinstance(value, dict) and keys is not None:
        out = {}
        for name, item in value.items():
            sub = keys.get(name, Key(name, None, None))
            converted = _convert(item, sub)
            if converted is not OMIT:
                out[sub.name] = converted
        return OMIT if not out and key.default is not None else out
    if isinstance(value, list) and keys is not None:
        value = [_convert(item, Key("", None, keys)) for item in value]
    return OMIT if value == key.default else value
