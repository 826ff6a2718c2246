"""Pydantic models of responses.yml; validating compiles each entry into the :mod:`llmsim.llm.script` objects.

Validation is strict (YAML already types its values: ``'3'`` is no seed, ``yes please`` no
boolean). Regexes and templates are compiled while validating, so an unknown template variable or
a bad regex fails at load, located at its field like any other error. A response body is a tagged
union keyed by which body field is present (``content``, ``variants``, ``synthetic``,
``tool_calls`` or ``json``). The templates inside a JSON value (``json``, a tool call's
``arguments``) are compiled when the file is compiled, and a bad one is reported at its own path
(``tool_calls[0].arguments.city``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    PlainValidator,
    Tag,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from llmsim.errors import ConfigError, entry_label, type_name
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

__all__ = ["BUILTIN_VARIABLES", "DEFAULT_ID", "ResponsesFile"]

#: Variables every body may use; a regex entry adds its named groups.
BUILTIN_VARIABLES = frozenset({"last_user_message", "model"})
#: plan.entry_id of the default body; no entry may take it.
DEFAULT_ID = "default"

_BODY_KINDS = ("content", "variants", "synthetic", "tool_calls", "json")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _invalid(kind: str, message: str) -> PydanticCustomError:
    # One placeholder for the whole text: pydantic fills placeholders by plain replacement, so a
    # value holding user text (a regex, a template) must not meet a second placeholder.
    return PydanticCustomError(kind, "{message}", {"message": message})


def _string(value: object) -> str:
    # For plain validators, which see the raw input; the error reads "expected a string, got ...".
    if not isinstance(value, str):
        raise PydanticCustomError("string_type", "Input should be a valid string")
    return value


def _operands(value: object) -> object:
    """A string or a non-empty list (its items are then checked as strings)."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise _invalid("operands_type", f"expected a string or a list of strings, got {type_name(value)}")
    if not value:
        raise _invalid("operands_empty", "expected at least one string")
    return value


def _no_empty_operand(values: list[str]) -> list[str]:
    # "" starts and is contained in every text; for exact it is a meaningful (empty) message.
    if "" in values:
        raise _invalid("operand_empty", "empty string would match every message")
    return values


_Operands = Annotated[list[str], BeforeValidator(_operands)]
_SubstringOperands = Annotated[_Operands, AfterValidator(_no_empty_operand)]


def _compile_regex(value: object) -> re.Pattern[str]:
    try:
        regex = re.compile(_string(value))
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise _invalid("regex_invalid", f"invalid regex: {exc.msg}{where}") from None
    clash = BUILTIN_VARIABLES.intersection(regex.groupindex)
    if clash:
        raise _invalid("regex_group", f"group name '{min(clash)}' shadows a built-in template variable")
    return regex


class MatchSpec(_Spec):
    """``match:`` of an entry: exactly one kind, tested against the stripped last user message."""

    exact: _Operands | None = None
    # Compiled without flags: ignore_case may come later in the mapping (compile() applies it).
    regex: Annotated[re.Pattern[str], PlainValidator(_compile_regex)] | None = None
    starts_with: _SubstringOperands | None = None
    contains: _SubstringOperands | None = None
    ignore_case: bool = False

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> Self:
        kinds = [kind.value for kind in MatchKind if getattr(self, kind.value) is not None]
        if len(kinds) != 1:
            got = ", ".join(kinds) or "none"
            raise _invalid("match_kind", f"exactly one of {', '.join(MatchKind)} is required (got {got})")
        return self

    def compile(self) -> Match:
        if self.regex is not None:
            regex = re.compile(self.regex.pattern, re.IGNORECASE) if self.ignore_case else self.regex
            return Match(MatchKind.REGEX, regex=regex, ignore_case=self.ignore_case)
        kind = next(k for k in MatchKind if getattr(self, k.value) is not None)
        values: list[str] = getattr(self, kind.value)
        # Operands are casefolded once here; the matcher casefolds the message once per request.
        folded = tuple(v.casefold() for v in values) if self.ignore_case else tuple(values)
        return Match(kind, values=folded, ignore_case=self.ignore_case)


def _parse_template(value: object, info: ValidationInfo) -> Template:
    # In an entry, id and match are declared before the body, so a valid match is in info.data.
    match = info.data.get("match")
    groups = match.regex.groupindex if isinstance(match, MatchSpec) and match.regex is not None else {}
    try:
        return Template(_string(value), BUILTIN_VARIABLES | frozenset(groups))
    except TemplateError as exc:
        raise _invalid("template", str(exc)) from None


_Template = Annotated[Template, PlainValidator(_parse_template)]


def _token_range(value: object) -> object:
    if not isinstance(value, list) or len(value) != 2:
        raise _invalid("token_range", f"expected [min, max], got {type_name(value)}")
    return value


def _ordered_range(bounds: list[int]) -> list[int]:
    lo, hi = bounds
    if lo < 1 or lo > hi:
        raise _invalid("token_order", f"expected 1 <= min <= max, got [{lo}, {hi}]")
    return bounds


class SyntheticTokens(_Spec):
    # Inclusive bounds of the filler length in tokens.
    tokens: Annotated[list[int], BeforeValidator(_token_range), AfterValidator(_ordered_range)]


class _TemplateAt(Exception):
    """A template inside a JSON value that does not compile, at ``path`` inside the entry."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def _json_template(value: JsonValue, path: str, known: frozenset[str]) -> JsonTemplate:
    """A JSON value whose strings become templates over ``known`` variables."""

    def walk(v: JsonValue, where: str) -> Any:
        if isinstance(v, str):
            try:
                return Template(v, known)
            except TemplateError as exc:
                raise _TemplateAt(where, str(exc)) from None
        if isinstance(v, dict):
            return {k: walk(x, f"{where}.{k}") for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, f"{where}[{i}]") for i, x in enumerate(v)]
        return v

    return JsonTemplate(walk(value, path))


class ContentSpec(_Spec):
    content: _Template

    def compile(self, known: frozenset[str]) -> Content:
        return Content(self.content)


class VariantsSpec(_Spec):
    variants: Annotated[list[_Template], Field(min_length=1)]

    def compile(self, known: frozenset[str]) -> Variants:
        return Variants(tuple(self.variants))


class SyntheticSpec(_Spec):
    synthetic: SyntheticTokens

    def compile(self, known: frozenset[str]) -> Synthetic:
        lo, hi = self.synthetic.tokens
        return Synthetic(lo, hi)


def _non_empty(value: str) -> str:
    if not value:
        raise _invalid("name_empty", "must not be empty")
    return value


class ToolCallModel(_Spec):
    """One call of a ``tool_calls`` answer: the function's name and its arguments (strings are templates)."""

    name: Annotated[str, AfterValidator(_non_empty)]
    arguments: dict[str, JsonValue] = {}


class ToolCallsSpec(_Spec):
    tool_calls: Annotated[list[ToolCallModel], Field(min_length=1)]

    def compile(self, known: frozenset[str]) -> ToolCalls:
        return ToolCalls(
            tuple(
                ToolCallSpec(call.name, _json_template(call.arguments, f"tool_calls[{i}].arguments", known))
                for i, call in enumerate(self.tool_calls)
            )
        )


class JsonSpec(_Spec):
    """A JSON answer (what ``response_format: json_object`` asks for); its strings are templates."""

    # Aliased: a field named ``json`` would shadow BaseModel.json.
    json_answer: JsonValue = Field(alias="json")

    def compile(self, known: frozenset[str]) -> JsonAnswer:
        return JsonAnswer(_json_template(self.json_answer, "json", known))


def _entry_id(value: str) -> str:
    if not value:
        raise _invalid("id_empty", "must not be empty")
    if value == DEFAULT_ID:
        raise _invalid("id_reserved", f"'{DEFAULT_ID}' is reserved for the default body")
    return value


class _EntryHead(_Spec):
    id: Annotated[str, AfterValidator(_entry_id)]
    match: MatchSpec


# Head first (the bases' fields come in reverse order), so the body's templates see the match.
class ContentEntry(ContentSpec, _EntryHead):
    pass


class VariantsEntry(VariantsSpec, _EntryHead):
    pass


class SyntheticEntry(SyntheticSpec, _EntryHead):
    pass


class ToolCallsEntry(ToolCallsSpec, _EntryHead):
    pass


class JsonEntry(JsonSpec, _EntryHead):
    pass


def _body_kind(value: Any) -> str | None:
    """The union tag: the one body field present (checked before by :func:`_one_body`)."""
    return next((k for k in _BODY_KINDS if k in value), None) if isinstance(value, dict) else None


def _one_body(head: tuple[str, ...]) -> BeforeValidator:
    """Exactly one body field; a mapping without one names any unknown field (a likely typo)."""

    def check(value: Any) -> Any:
        if not isinstance(value, dict):
            raise PydanticCustomError("dict_type", "Input should be a valid dictionary")
        kinds = [k for k in _BODY_KINDS if k in value]
        if len(kinds) != 1:
            unknown = [str(k) for k in value if k not in head and k not in _BODY_KINDS]
            got = ", ".join(kinds) or ("none" + "".join(f"; unknown field '{k}'" for k in unknown))
            raise _invalid("body_kind", f"exactly one body of {', '.join(_BODY_KINDS)} is required (got {got})")
        return value

    return BeforeValidator(check)


_EntrySpec = Annotated[
    Annotated[ContentEntry, Tag("content")]
    | Annotated[VariantsEntry, Tag("variants")]
    | Annotated[SyntheticEntry, Tag("synthetic")]
    | Annotated[ToolCallsEntry, Tag("tool_calls")]
    | Annotated[JsonEntry, Tag("json")],
    Discriminator(_body_kind),
    _one_body(("id", "match")),
]
_BodySpec = Annotated[
    Annotated[ContentSpec, Tag("content")]
    | Annotated[VariantsSpec, Tag("variants")]
    | Annotated[SyntheticSpec, Tag("synthetic")]
    | Annotated[ToolCallsSpec, Tag("tool_calls")]
    | Annotated[JsonSpec, Tag("json")],
    Discriminator(_body_kind),
    _one_body(()),
]


def _only_version_1(version: int) -> int:
    if version != 1:
        raise _invalid("version", f"unsupported version {version} (only 1 exists)")
    return version


def _null_as_empty(value: object) -> object:
    # `responses:` with nothing under it is YAML null: no entries.
    return [] if value is None else value


class ResponsesFile(_Spec):
    """A whole responses.yml."""

    version: Annotated[int, AfterValidator(_only_version_1)] = 1
    # Default seed of variant and synthetic choices.
    seed: int = 0
    # Checked top to bottom; the first match wins.
    responses: Annotated[list[_EntrySpec], BeforeValidator(_null_as_empty)] = []
    default: _BodySpec = Field(description="the body used when nothing matches")

    def compile(self, file: str) -> Script:
        """The script the generator serves (entry ids are checked unique by the loader).

        Raises ConfigError for a template inside a JSON value that does not compile.
        """
        entries = []
        for i, e in enumerate(self.responses):
            match = e.match.compile()
            known = BUILTIN_VARIABLES | frozenset(match.regex.groupindex if match.regex is not None else ())
            entries.append(Entry(e.id, match, _compile_body(e, known, file, entry_label("responses", i, "id", e.id))))
        default = Entry(DEFAULT_ID, None, _compile_body(self.default, BUILTIN_VARIABLES, file, DEFAULT_ID))
        return Script(file=file, seed=self.seed, entries=tuple(entries), default=default)


def _compile_body(
    spec: ContentSpec | VariantsSpec | SyntheticSpec | ToolCallsSpec | JsonSpec,
    known: frozenset[str],
    file: str,
    label: str,
) -> Body:
    try:
        return spec.compile(known)
    except _TemplateAt as exc:
        raise ConfigError(file, exc.message, entry=label, field=exc.path) from None
