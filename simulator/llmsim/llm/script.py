"""A parsed responses.yml: entries with compiled matches and bodies, ready to serve."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from llmsim.llm.template import Template

__all__ = [
    "NO_GROUPS",
    "Body",
    "Content",
    "Entry",
    "Match",
    "MatchKind",
    "Script",
    "Synthetic",
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


Body = Content | Variants | Synthetic


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
