"""Read responses.yml (or the embedded default) into a :class:`Script`, checking everything up front.

Every problem is a :class:`~llmsim.errors.ConfigError` naming the file, the entry
(``responses[3] (id 'greet')`` or ``default``) and the field (``match.regex``), so a broken file
stops the server at startup instead of failing requests.

File format::

    version: 1            # optional; only 1 exists
    seed: 0               # optional; default seed of variant and synthetic choices
    responses:            # checked top to bottom, first match wins
      - id: weather       # required, unique
        match: {regex: 'weather in (?P<city>\\w+)', ignore_case: true}
        content: "It is sunny in {city}."     # or variants: [...] or synthetic: {tokens: [min, max]}
      - id: weather-tool  # an answer that calls tools (when the request offers some)
        match: {regex: 'forecast for (?P<city>\\w+)'}
        tool_calls:       # each: name, arguments (a mapping; strings are templates)
          - {name: get_weather, arguments: {city: "{city}", unit: celsius}}
      - id: as-json       # a JSON answer (what response_format json_object asks for)
        match: {starts_with: "JSON"}
        json: {answer: "{last_user_message}", ok: true}
    default:              # required: a body, no match
      content: "..."

Matches (exactly one, against the stripped last user message): ``exact`` (string or list: equal
to one), ``starts_with`` (string or list: starts with one), ``contains`` (string or list: contains
one), ``regex`` (``re.search``, not fullmatch; anchor with ``^``/``$`` for a whole-text match).
``ignore_case: true`` compares casefolded text, or compiles the regex with ``re.IGNORECASE``.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

from llmsim.errors import ConfigError, parse_yaml
from llmsim.llm.script import (
    Body,
    Content,
    Entry,
    JsonAnswer,
    JsonTemplate,
    Match,
    MatchKind,
    Script,
    Synthetic,
    ToolCalls,
    ToolCallSpec,
    Variants,
)
from llmsim.llm.template import Template, TemplateError

__all__ = ["BUILTIN_VARIABLES", "EMBEDDED_RESPONSES", "load_responses", "parse_responses"]

EMBEDDED_RESPONSES = "<embedded>/responses.yml"
#: Variables every body may use; a regex entry adds its named groups.
BUILTIN_VARIABLES = frozenset({"last_user_message", "model"})
#: plan.entry_id of the default body; no entry may take it.
DEFAULT_ID = "default"

_TOP_KEYS = ("version", "seed", "responses", "default")
_BODY_KEYS = ("content", "variants", "synthetic", "tool_calls", "json")
_ENTRY_KEYS = ("id", "match", *_BODY_KEYS)
_MATCH_KINDS = tuple(k.value for k in MatchKind)
_MATCH_KEYS = (*_MATCH_KINDS, "ignore_case")


def _type_name(value: Any) -> str:
    return {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string"}.get(
        type(value),
        "list" if isinstance(value, list) else "mapping" if isinstance(value, dict) else type(value).__name__,
    )


class _Checker:
    """Raises ConfigErrors located in one file and one entry."""

    def __init__(self, file: str, entry: str | None = None) -> None:
        self.file = file
        self.entry = entry

    def fail(self, message: str, field: str | None = None) -> NoReturn:
        raise ConfigError(self.file, message, entry=self.entry, field=field)

    def mapping(self, value: Any, field: str | None, allowed: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(f"expected a mapping, got {_type_name(value)}", field)
        for key in value:
            if key not in allowed:
                where = f"{field}.{key}" if field else str(key)
                self.fail(f"unknown field (allowed: {', '.join(allowed)})", where)
        return value

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str):
            self.fail(f"expected a string, got {_type_name(value)}", field)
        return value

    def strings(self, value: Any, field: str) -> tuple[str, ...]:
        """A string or a non-empty list of strings."""
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list):
            self.fail(f"expected a string or a list of strings, got {_type_name(value)}", field)
        if not value:
            self.fail("expected at least one string", field)
        return tuple(self.string(v, f"{field}[{i}]") for i, v in enumerate(value))

    def integer(self, value: Any, field: str) -> int:
        # bool is an int subclass; `true` is not a number here.
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(f"expected an integer, got {_type_name(value)}", field)
        return value

    def template(self, source: Any, field: str, known: frozenset[str]) -> Template:
        try:
            return Template(self.string(source, field), known)
        except TemplateError as exc:
            self.fail(str(exc), field)


def _parse_match(check: _Checker, raw: Any) -> Match:
    spec = check.mapping(raw, "match", _MATCH_KEYS)
    kinds = [k for k in _MATCH_KINDS if k in spec]
    if len(kinds) != 1:
        found = f"got {', '.join(kinds)}" if kinds else "got none"
        check.fail(f"exactly one of {', '.join(_MATCH_KINDS)} is required ({found})", "match")
    kind = MatchKind(kinds[0])
    field = f"match.{kind.value}"
    ignore_case = spec.get("ignore_case", False)
    if not isinstance(ignore_case, bool):
        check.fail(f"expected true or false, got {_type_name(ignore_case)}", "match.ignore_case")
    if kind is MatchKind.REGEX:
        source = check.string(spec[kind.value], field)
        try:
            regex = re.compile(source, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            where = f" at position {exc.pos}" if exc.pos is not None else ""
            check.fail(f"invalid regex: {exc.msg}{where}", field)
        clash = BUILTIN_VARIABLES.intersection(regex.groupindex)
        if clash:
            check.fail(f"group name '{min(clash)}' shadows a built-in template variable", field)
        return Match(kind, regex=regex, ignore_case=ignore_case)
    values = check.strings(spec[kind.value], field)
    if kind is not MatchKind.EXACT and "" in values:
        check.fail("empty string would match every message", field)
    if ignore_case:
        values = tuple(v.casefold() for v in values)
    return Match(kind, values=values, ignore_case=ignore_case)


def _parse_body(check: _Checker, spec: dict[str, Any], known: frozenset[str]) -> Body:
    bodies = [k for k in _BODY_KEYS if k in spec]
    if len(bodies) != 1:
        found = f"got {', '.join(bodies)}" if bodies else "got none"
        check.fail(f"exactly one body of {', '.join(_BODY_KEYS)} is required ({found})")
    kind = bodies[0]
    raw = spec[kind]
    if kind == "tool_calls":
        return _parse_tool_calls(check, raw, known)
    if kind == "json":
        return JsonAnswer(_json_template(check, raw, "json", known))
    if kind == "content":
        return Content(check.template(raw, "content", known))
    if kind == "variants":
        if not isinstance(raw, list) or not raw:
            check.fail("expected a non-empty list of strings", "variants")
        return Variants(tuple(check.template(v, f"variants[{i}]", known) for i, v in enumerate(raw)))
    synth = check.mapping(raw, "synthetic", ("tokens",))
    if "tokens" not in synth:
        check.fail("required field is missing", "synthetic.tokens")
    bounds = synth["tokens"]
    if not isinstance(bounds, list) or len(bounds) != 2:
        check.fail("expected [min, max]", "synthetic.tokens")
    lo = check.integer(bounds[0], "synthetic.tokens[0]")
    hi = check.integer(bounds[1], "synthetic.tokens[1]")
    if lo < 1 or lo > hi:
        check.fail(f"expected 1 <= min <= max, got [{lo}, {hi}]", "synthetic.tokens")
    return Synthetic(lo, hi)


def _json_template(check: _Checker, raw: Any, field: str, known: frozenset[str]) -> JsonTemplate:
    def walk(value: Any, where: str) -> Any:
        if isinstance(value, str):
            return check.template(value, where, known)
        if isinstance(value, dict):
            return {str(k): walk(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if value is None or isinstance(value, bool | int | float):
            return value
        check.fail(f"expected a JSON value, got {_type_name(value)}", where)

    return JsonTemplate(walk(raw, field))


def _parse_tool_calls(check: _Checker, raw: Any, known: frozenset[str]) -> ToolCalls:
    if not isinstance(raw, list) or not raw:
        check.fail("expected a non-empty list of calls ({name, arguments})", "tool_calls")
    calls = []
    for i, item in enumerate(raw):
        where = f"tool_calls[{i}]"
        call = check.mapping(item, where, ("name", "arguments"))
        if "name" not in call:
            check.fail("required field is missing", f"{where}.name")
        name = check.string(call["name"], f"{where}.name")
        if not name:
            check.fail("must not be empty", f"{where}.name")
        arguments = call.get("arguments", {})
        if not isinstance(arguments, dict):
            check.fail(f"expected a mapping, got {_type_name(arguments)}", f"{where}.arguments")
        calls.append(ToolCallSpec(name, _json_template(check, arguments, f"{where}.arguments", known)))
    return ToolCalls(tuple(calls))


def _entry_label(index: int, raw: Any) -> str:
    entry_id = raw.get("id") if isinstance(raw, dict) else None
    return f"responses[{index}] (id '{entry_id}')" if isinstance(entry_id, str) else f"responses[{index}]"


def _parse_entry(file: str, index: int, raw: Any, seen: set[str]) -> Entry:
    check = _Checker(file, _entry_label(index, raw))
    spec = check.mapping(raw, None, _ENTRY_KEYS)
    if "id" not in spec:
        check.fail("required field is missing", "id")
    entry_id = check.string(spec["id"], "id")
    if not entry_id:
        check.fail("must not be empty", "id")
    if entry_id == DEFAULT_ID:
        check.fail(f"'{DEFAULT_ID}' is reserved for the default body", "id")
    if entry_id in seen:
        check.fail(f"duplicate id '{entry_id}'", "id")
    seen.add(entry_id)
    if "match" not in spec:
        check.fail("required field is missing", "match")
    match = _parse_match(check, spec["match"])
    known = BUILTIN_VARIABLES | frozenset(match.regex.groupindex if match.regex is not None else ())
    return Entry(entry_id, match, _parse_body(check, spec, known))


def parse_responses(text: str, file: str) -> Script:
    """Parse responses.yml text; ``file`` names it in errors. Raises :class:`ConfigError`."""
    check = _Checker(file)
    raw = parse_yaml(text, file)
    if raw is None:
        raw = {}
    top = check.mapping(raw, None, _TOP_KEYS)
    version = top.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version != 1:
        check.fail(f"unsupported version {version!r} (only 1 exists)", "version")
    seed = check.integer(top.get("seed", 0), "seed")
    responses = top.get("responses", [])
    if responses is None:
        responses = []
    if not isinstance(responses, list):
        check.fail(f"expected a list, got {_type_name(responses)}", "responses")
    seen: set[str] = set()
    entries = tuple(_parse_entry(file, i, raw_entry, seen) for i, raw_entry in enumerate(responses))
    if "default" not in top:
        check.fail("required field is missing (the body used when nothing matches)", "default")
    default_check = _Checker(file, DEFAULT_ID)
    default_spec = default_check.mapping(top["default"], None, _BODY_KEYS)
    default = Entry(DEFAULT_ID, None, _parse_body(default_check, default_spec, BUILTIN_VARIABLES))
    return Script(file=file, seed=seed, entries=entries, default=default)


def load_responses(path: str | Path | None = None) -> Script:
    """Parse ``path``, or the embedded default script when None. Raises :class:`ConfigError`."""
    if path is None:
        text = resources.files("llmsim").joinpath("data", "responses.yml").read_text(encoding="utf-8")
        return parse_responses(text, EMBEDDED_RESPONSES)
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(p), f"cannot read file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(p), f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    return parse_responses(text, str(p))
