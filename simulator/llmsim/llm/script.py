"""A parsed responses.yml: entries with compiled matches and bodies, ready to serve."""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from llmsim.llm.template import Template

__all__ = [
    "NO_GROUPS",
    "Body",
    "Content",
    "Entry",
    "JsonAnswer",
    "JsonTemplate",
    "Match",
    "MatchKind",
    "Script",
    "Synthetic",
    "ToolCallSpec",
    "ToolCalls",
    "Variants",
]

#: Template variables of a non-regex match (shared, read-only).
NO_GROUPS: Mapping[str, str] = MappingProxyType({})


class MatchKind(enum.StrEnum):
    EXACT = "exact"
    REGEX = "regex"
    STARTS_WITH = "starts_with"
    CONTAINS = "contains"


@dataclass(frozen=True, slots=True)
class Match:
    """One entry's test against the stripped last user message."""

    kind: MatchKind
    # Operands of exact / starts_with / contains (any one may match); casefolded when ignore_case.
    values: tuple[str, ...] = ()
    # Compiled with re.IGNORECASE when ignore_case.
    regex: re.Pattern[str] | None = None
    ignore_case: bool = False

    def test(self, text: str, folded: str) -> Mapping[str, str] | None:
        """The template variables the match binds, or None when ``text`` does not match.

        ``folded`` is ``text.casefold()`` (read only by ignore_case matches).
        """
        if self.regex is not None:
            m = self.regex.search(text)
            # Groups that did not take part in the match render as "".
            return None if m is None else m.groupdict("")
        subject = folded if self.ignore_case else text
        if self.kind is MatchKind.EXACT:
            hit = subject in self.values
        elif self.kind is MatchKind.STARTS_WITH:
            hit = subject.startswith(self.values)
        else:
            hit = any(v in subject for v in self.values)
        return NO_GROUPS if hit else None


@dataclass(frozen=True, slots=True)
class Content:
    template: Template


@dataclass(frozen=True, slots=True)
class Variants:
    templates: tuple[Template, ...]


@dataclass(frozen=True, slots=True)
class Synthetic:
    # Inclusive bounds of the filler length in tokens.
    min_tokens: int
    max_tokens: int


class JsonTemplate:
    """A YAML value whose strings are templates; renders to JSON text (always valid JSON)."""

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        # dicts, lists, Templates (for strings), numbers, booleans, None: checked by the loader.
        self._value = value

    def render(self, variables: Mapping[str, str]) -> str:
        return json.dumps(self._fill(self._value, variables), ensure_ascii=False)

    def _fill(self, value: Any, variables: Mapping[str, str]) -> Any:
        if isinstance(value, Template):
            return value.render(variables)
        if isinstance(value, dict):
            return {k: self._fill(v, variables) for k, v in value.items()}
        if isinstance(value, list):
            return [self._fill(v, variables) for v in value]
        return value


@dataclass(frozen=True, slots=True)
class JsonAnswer:
    """An answer that is JSON (what ``response_format: json_object`` asks for)."""

    value: JsonTemplate


@dataclass(frozen=True, slots=True)
class ToolCallSpec:
    # The function's name, and its arguments (an object whose strings are templates).
    name: str
    arguments: JsonTemplate


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """An answer that calls functions (when the request offers tools)."""

    calls: tuple[ToolCallSpec, ...]


Body = Content | Variants | Synthetic | JsonAnswer | ToolCalls


@dataclass(frozen=True, slots=True)
class Entry:
    id: str
    # None for the default entry.
    match: Match | None
    body: Body


@dataclass(frozen=True, slots=True)
class Script:
    """Entries in file order (first match wins) and the default body."""

    # File it came from, for messages ("<embedded>/responses.yml" for the built-in one).
    file: str
    seed: int
    entries: tuple[Entry, ...]
    default: Entry
