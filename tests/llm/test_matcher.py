"""The matcher: first match wins, and the literal prefilter never changes the answer."""

from __future__ import annotations

import re
import string
import sys
from functools import cache

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from llmsim.llm import parse_responses
from llmsim.llm.matcher import CASEFOLD_SAFE, Matcher, RequiredLiterals, required_literals
from llmsim.llm.script import Script


def script(entries: list[dict[str, object]]) -> Script:
    return parse_responses(yaml.safe_dump({"responses": entries, "default": {"content": "d"}}), "t.yml")


def ids(matcher: Matcher, text: str) -> tuple[str, dict[str, str]] | None:
    found = matcher.match(text)
    return None if found is None else (found[0].id, dict(found[1]))


@pytest.mark.parametrize(
    ("pattern", "exact", "folded"),
    [
        # Literal runs at top level, joined across plain groups.
        (r"^weather in (?P<city>\w+)", ("weather in ",), ()),
        (r"a(b)c(?:de)?f", ("abc", "f"), ()),
        (r".*order number (?P<n>\d+)", ("order number ",), ()),
        # A repeat with minimum 1 keeps its content (as a separate run); minimum 0 drops it.
        (r"x(ab)+y", ("x", "ab", "y"), ()),
        (r"(ab){0,3}cd", ("cd",), ()),
        # Alternations and classes require nothing; anchors split runs.
        (r"(?:cat|dog) food", (" food",), ()),
        (r"[abc]+", (), ()),
        (r"\bhello\b world", ("hello", " world"), ()),
        # Verbose mode drops whitespace and comments at parse time.
        (r"(?x) hello \  world  # comment", ("hello world",), ()),
        # Case-insensitive runs are casefolded and split at i/I (U+0130 and U+0131 match them).
        (r"(?i)Kiwi Shop", (), ("k", "w", " shop")),
        (r"ab(?i:CD)ef", ("ab", "ef"), ("cd",)),
        (r"(?i)né(?-i:X)", (), ("n", "x")),
        # Lookarounds and backreferences contribute nothing.
        (r"(?=abc)x(?!zz)(a)\1", ("x", "a"), ()),
    ],
)
def test_required_literals(pattern: str, exact: tuple[str, ...], folded: tuple[str, ...]) -> None:
    assert required_literals(re.compile(pattern)) == RequiredLiterals(exact, folded)


def test_ignore_case_flag_from_compile() -> None:
    assert required_literals(re.compile("Hello World", re.IGNORECASE)) == RequiredLiterals((), ("hello world",))


@cache
def _all_code_points() -> str:
    return "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)


def test_casefold_safe_chars_match_only_their_casefold() -> None:
    # For every ASCII char c and every code point t that re.IGNORECASE lets c match:
    # safe c => t.casefold() == c.casefold(); the two unsafe ones really do have exceptions.
    everything = _all_code_points()
    unsafe = set()
    for c in map(chr, range(128)):
        for m in re.finditer(re.escape(c), everything, re.IGNORECASE):
            if m.group().casefold() != c.casefold():
                unsafe.add(c)
    assert unsafe == {"i", "I"}
    assert {chr(c) for c in range(128)} - unsafe == CASEFOLD_SAFE


# Random regexes over a small alphabet that includes the case-folding troublemakers.
ALPHABET = "abAB iIİıſKk.1"
_atom = st.one_of(
    st.sampled_from(ALPHABET).map(re.escape),
    st.sampled_from([".", "[ab]", r"\d", r"\s", r"\b", "^", "$", "[^a]"]),
)


def _combine(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.lists(inner, min_size=1, max_size=4).map("".join),
        inner.map(lambda s: f"({s})"),
        inner.map(lambda s: f"(?:{s})"),
        inner.map(lambda s: f"(?i:{s})"),
        inner.map(lambda s: f"(?-i:{s})"),
        inner.map(lambda s: f"(?>{s})"),
        inner.map(lambda s: f"(?={s})"),
        inner.map(lambda s: f"(?!{s})"),
        st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
        st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "{1,3}", "+?", "*?", "++"])).map(
            lambda p: f"(?:{p[0]}){p[1]}"
        ),
    )


PATTERNS = st.tuples(st.booleans(), st.recursive(_atom, _combine, max_leaves=12)).map(
    lambda p: ("(?i)" if p[0] else "") + p[1]
)
TEXTS = st.text(alphabet=ALPHABET, max_size=24)


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error:
        assume(False)
        raise


@pytest.mark.slow
@settings(max_examples=500)
@given(PATTERNS, TEXTS)
def test_required_literals_are_in_every_match(pattern: str, text: str) -> None:
    regex = _compile(pattern)
    literals = required_literals(regex)
    if regex.search(text) is not None:
        folded = text.casefold()
        assert all(lit in text for lit in literals.exact)
        assert all(lit in folded for lit in literals.folded)


_entry = st.one_of(
    st.tuples(st.just("regex"), PATTERNS, st.booleans()),
    st.tuples(
        st.sampled_from(["exact", "starts_with", "contains"]),
        st.text(alphabet=ALPHABET, min_size=1, max_size=4),
        st.booleans(),
    ),
)


@pytest.mark.slow
@settings(max_examples=200)
@given(st.lists(_entry, min_size=1, max_size=8), st.lists(TEXTS, min_size=1, max_size=8))
def test_prefilter_returns_the_naive_answer(specs: list[tuple[str, str, bool]], texts: list[str]) -> None:
    for kind, pattern, _ci in specs:
        if kind == "regex":
            _compile(pattern)
    entries: list[dict[str, object]] = [
        {"id": f"e{i}", "match": {kind: value, "ignore_case": ci}, "content": "x"}
        for i, (kind, value, ci) in enumerate(specs)
    ]
    entries_script = script(entries)
    fast = Matcher(entries_script.entries)
    naive = Matcher(entries_script.entries, prefilter=False)
    for text in [*texts, *(value for _, value, _ci in specs)]:
        assert ids(fast, text) == ids(naive, text)


def test_first_match_wins_across_kinds() -> None:
    s = script(
        [
            {"id": "re", "match": {"regex": "^hello (?P<who>\\w+)$"}, "content": "x"},
            {"id": "ex", "match": {"exact": ["hello world", "bye"]}, "content": "x"},
            {"id": "ex2", "match": {"exact": "bye"}, "content": "x"},
            {"id": "ci", "match": {"exact": "BYE NOW", "ignore_case": True}, "content": "x"},
            {"id": "sw", "match": {"starts_with": ["bye", "ciao"]}, "content": "x"},
            {"id": "co", "match": {"contains": ["now", "later"], "ignore_case": True}, "content": "x"},
        ]
    )
    m = Matcher(s.entries)
    # The earlier regex beats the exact entry that also lists the text.
    assert ids(m, "hello world") == ("re", {"who": "world"})
    # Exact: the first entry listing the text.
    assert ids(m, "bye") == ("ex", {})
    assert ids(m, "Bye Now") == ("ci", {})
    assert ids(m, "bye then") == ("sw", {})
    assert ids(m, "See you LATER") == ("co", {})
    assert ids(m, "nothing") is None


def test_regex_optional_group_renders_empty() -> None:
    s = script([{"id": "a", "match": {"regex": "^x(?P<opt>y)?"}, "content": "{opt}"}])
    assert ids(Matcher(s.entries), "xz") == ("a", {"opt": ""})


def test_search_not_fullmatch() -> None:
    s = script([{"id": "a", "match": {"regex": "order (?P<n>\\d+)"}, "content": "{n}"}])
    assert ids(Matcher(s.entries), "where is my order 42 please") == ("a", {"n": "42"})


def test_case_sensitive_by_default() -> None:
    s = script([{"id": "a", "match": {"contains": "Paris"}, "content": "x"}])
    m = Matcher(s.entries)
    assert ids(m, "in Paris") == ("a", {})
    assert ids(m, "in paris") is None


def test_printable_ascii_is_safe_except_i() -> None:
    assert set(string.ascii_letters) - CASEFOLD_SAFE == {"i", "I"}
