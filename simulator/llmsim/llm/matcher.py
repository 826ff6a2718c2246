"""First-match-wins lookup of a response entry, cheap even with many regex entries.

Naive matching runs every regex over the prompt, and a pattern such as ``.*order (?P<n>\\d+)``
costs time quadratic in the prompt's length. So at load time:

- exact entries go into a dict (one lookup instead of a comparison per entry);
- each regex gets the literal substrings every match must contain (:func:`required_literals`),
  and it is skipped when the prompt lacks one of them, without running it.

Both keep the naive order: an exact hit at index ``k`` only wins if no earlier entry matches.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmsim.llm.script import NO_GROUPS, Entry, Match, MatchKind

__all__ = ["Matcher", "RequiredLiterals", "required_literals"]

# re's parser is private but stable (3.11+); the public sre_parse alias warns on import.
_parser: Any = importlib.import_module("re._parser")
_c: Any = importlib.import_module("re._constants")

_REPEATS = frozenset(getattr(_c, op) for op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(_c, op))
_ATOMIC_GROUP = getattr(_c, "ATOMIC_GROUP", None)
# ASCII characters whose re.IGNORECASE matches all share one casefold: for these, "re matched
# the literal case-insensitively" implies "the casefolded literal is in the casefolded text".
# NOTE: 'i'/'I' are excluded: re.IGNORECASE also matches U+0130 'İ' (casefold 'i̇') and U+0131 'ı'
# (casefold 'ı'). tests/llm/test_matcher.py checks this set against every code point.
CASEFOLD_SAFE = frozenset(chr(c) for c in range(128)) - {"i", "I"}


@dataclass(frozen=True, slots=True)
class RequiredLiterals:
    """Substrings every match of a pattern contains: ``exact`` as is, ``folded`` after casefold()."""

    exact: tuple[str, ...] = ()
    folded: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.exact or self.folded)


def _flatten(items: Any) -> Iterator[tuple[Any, Any]]:
    # A group that does not change IGNORECASE is transparent: its literals join its neighbours'.
    for op, av in items:
        if op is _c.SUBPATTERN and not ((av[1] | av[2]) & _c.SRE_FLAG_IGNORECASE):
            yield from _flatten(av[3])
        else:
            yield op, av


def _collect(items: Any, ignore_case: bool, out: list[tuple[str, bool]]) -> None:
    run: list[str] = []

    def flush() -> None:
        if run:
            out.append(("".join(run), ignore_case))
            run.clear()

    for op, av in _flatten(items):
        if op is _c.LITERAL:
            run.append(chr(av))
        elif op is _c.SUBPATTERN:
            # Changes IGNORECASE: treat its content as case-insensitive (safe either way).
            flush()
            _collect(av[3], True, out)
        elif op in _REPEATS:
            flush()
            lo, _hi, sub = av
            if lo >= 1:
                _collect(sub, ignore_case, out)
        elif op is _ATOMIC_GROUP:
            flush()
            _collect(av, ignore_case, out)
        else:
            # Classes, alternations, anchors, lookarounds, backreferences...: nothing required here,
            # and the literal run stops (splitting a run is always safe).
            flush()
    flush()


def required_literals(pattern: re.Pattern[str]) -> RequiredLiterals:
    """Literal runs that every match of ``pattern`` must contain (conservative: may be empty).

    Only concatenations at top level count (through plain groups and repeats with a minimum >= 1);
    alternations and classes contribute nothing. Case-insensitive runs are kept as casefolded
    pieces of :data:`CASEFOLD_SAFE` characters, to test against the casefolded text.
    """
    try:
        parsed = _parser.parse(pattern.pattern, pattern.flags)
        global_ci = bool(parsed.state.flags & _c.SRE_FLAG_IGNORECASE)
        runs: list[tuple[str, bool]] = []
        _collect(parsed, global_ci, runs)
    except Exception:  # an unexpected parser shape in some Python version: require nothing
        return RequiredLiterals()
    exact: dict[str, None] = {}
    folded: dict[str, None] = {}
    for text, ci in runs:
        if not ci:
            exact[text] = None
            continue
        piece: list[str] = []
        for ch in [*text, "i"]:  # the trailing "i" flushes the last piece
            if ch in CASEFOLD_SAFE:
                piece.append(ch.lower())
            elif piece:
                folded["".join(piece)] = None
                piece = []
    return RequiredLiterals(tuple(exact), tuple(folded))


_NEVER = 1 << 62


class Matcher:
    """Finds the first entry whose match accepts a stripped user message.

    Parameters
    ----------
    entries:
        Entries in file order; all must have a ``match``.
    prefilter:
        False runs every entry's test in order (the reference behaviour, for tests and benches).
    """

    __slots__ = ("_entries", "_exact", "_exact_folded", "_needs_fold", "_prefilter", "_scan")

    def __init__(self, entries: Sequence[Entry], *, prefilter: bool = True) -> None:
        self._entries = tuple(entries)
        self._prefilter = prefilter
        self._exact: dict[str, int] = {}
        self._exact_folded: dict[str, int] = {}
        scan: list[tuple[int, Entry, Match, RequiredLiterals]] = []
        for index, entry in enumerate(self._entries):
            match = entry.match
            if match is None:
                raise ValueError(f"entry '{entry.id}' has no match")
            if prefilter and match.kind is MatchKind.EXACT:
                table = self._exact_folded if match.ignore_case else self._exact
                for value in match.values:
                    table.setdefault(value, index)
                continue
            literals = required_literals(match.regex) if prefilter and match.regex is not None else RequiredLiterals()
            scan.append((index, entry, match, literals))
        self._scan = tuple(scan)
        self._needs_fold = bool(self._exact_folded) or any(m.ignore_case or lit.folded for _, _, m, lit in scan)

    def match(self, text: str) -> tuple[Entry, Mapping[str, str]] | None:
        """The first matching entry and its template variables (regex named groups), or None."""
        folded = text.casefold() if self._needs_fold else text
        if not self._prefilter:
            for _, entry, m, _lit in self._scan:
                groups = m.test(text, folded)
                if groups is not None:
                    return entry, groups
            return None
        exact_at = min(self._exact.get(text, _NEVER), self._exact_folded.get(folded, _NEVER))
        # NOTE: runs per request over every non-exact entry; keep the skip checks to `in` tests.
        for index, entry, m, literals in self._scan:
            if index > exact_at:
                break
            if literals:
                if any(lit not in text for lit in literals.exact):
                    continue
                if any(lit not in folded for lit in literals.folded):
                    continue
            groups = m.test(text, folded)
            if groups is not None:
                return entry, groups
        if exact_at != _NEVER:
            return self._entries[exact_at], NO_GROUPS
        return None
