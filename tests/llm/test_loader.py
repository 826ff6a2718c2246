"""responses.yml: the embedded default, and one-line errors naming file, entry and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmsim.errors import ConfigError
from llmsim.llm import EMBEDDED_RESPONSES, load_responses, parse_responses
from llmsim.llm.script import Content, JsonAnswer, MatchKind, Synthetic, ToolCalls, Variants


def test_embedded_default_has_every_kind_of_entry() -> None:
    script = load_responses()
    assert script.file == EMBEDDED_RESPONSES
    kinds = {e.match.kind for e in script.entries if e.match is not None}
    assert kinds == set(MatchKind)
    bodies = {type(e.body) for e in script.entries}
    assert bodies == {Content, Variants, Synthetic, JsonAnswer, ToolCalls}
    assert any(e.match is not None and e.match.regex is not None and e.match.regex.groupindex for e in script.entries)
    assert script.default.id == "default"


def test_loads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "r.yml"
    path.write_text(
        """
seed: 42
responses:
  - id: a
    match: {exact: [x, y]}
    content: "A"
  - id: b
    match: {regex: '(?P<n>\\d+)', ignore_case: true}
    variants: ["{n}", "n={n}"]
default:
  synthetic: {tokens: [1, 5]}
"""
    )
    script = load_responses(path)
    assert script.seed == 42
    assert script.file == str(path)
    a, b = script.entries
    assert a.match is not None
    assert a.match.values == ("x", "y")
    assert isinstance(b.body, Variants)
    assert len(b.body.templates) == 2
    assert script.default.body == Synthetic(1, 5)


def test_ignore_case_operands_are_casefolded() -> None:
    script = parse_responses(
        "responses: [{id: a, match: {contains: STRASSE, ignore_case: true}, content: x}]\ndefault: {content: d}", "f"
    )
    assert script.entries[0].match is not None
    assert script.entries[0].match.values == ("strasse",)


def error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        parse_responses(text, "r.yml")
    return exc.value


GOOD_DEFAULT = "default: {content: d}\n"


@pytest.mark.parametrize(
    ("text", "entry", "field", "message"),
    [
        ("responses: [\n", None, None, "invalid YAML: line 2, column 1"),
        ("responses: []\n", None, "default", "required field is missing"),
        ("reponses: []\n" + GOOD_DEFAULT, None, "reponses", "unknown field"),
        ("version: 2\n" + GOOD_DEFAULT, None, "version", "unsupported version 2"),
        ("seed: '3'\n" + GOOD_DEFAULT, None, "seed", "expected an integer, got string"),
        ("seed: true\n" + GOOD_DEFAULT, None, "seed", "expected an integer, got boolean"),
        ("responses: {a: 1}\n" + GOOD_DEFAULT, None, "responses", "expected a list, got mapping"),
        ("responses: [{match: {exact: a}, content: x}]\n" + GOOD_DEFAULT, "responses[0]", "id", "required field"),
        (
            "responses: [{id: '', match: {exact: a}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0]",
            "id",
            "must not be empty",
        ),
        # A misspelt field is named as unknown (not as the field it leaves missing), with the known ones.
        (
            "responses: [{id: a, mtch: {exact: a}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "mtch",
            "unknown field (allowed: id, match, content, variants, synthetic, tool_calls, json)",
        ),
        (
            "responses: [{id: a, match: {exact: a}, content: x, colour: red}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "colour",
            "unknown field (allowed: id, match, content, variants, synthetic, tool_calls, json)",
        ),
        # Without any body, a misspelt body is named in the message.
        (
            "responses: [{id: a, match: {exact: a}, contnet: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            None,
            "exactly one body of content, variants, synthetic, tool_calls, json is required (got none; unknown field 'contnet')",
        ),
        (
            "responses: [{id: a, match: 3, content: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "match",
            "expected a mapping, got integer",
        ),
        ("version: true\n" + GOOD_DEFAULT, None, "version", "expected an integer, got boolean"),
        ("[1, 2]\n", None, None, "expected a mapping, got list"),
        (
            "responses: [{id: 3, match: {exact: a}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0]",
            "id",
            "expected a string, got integer",
        ),
        (
            "responses: [{id: a, match: {exact: a}, content: x}, {id: a, match: {exact: b}, content: y}]\n"
            + GOOD_DEFAULT,
            "responses[1] (id 'a')",
            "id",
            "duplicate id 'a'",
        ),
        (
            "responses: [{id: default, match: {exact: a}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'default')",
            "id",
            "'default' is reserved",
        ),
        ("responses: [{id: a, content: x}]\n" + GOOD_DEFAULT, "responses[0] (id 'a')", "match", "required field"),
        (
            "responses: [{id: a, match: {exact: a, contains: b}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "match",
            "exactly one of exact, regex, starts_with, contains is required (got exact, contains)",
        ),
        (
            "responses: [{id: a, match: {ignore_case: true}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "match",
            "(got none)",
        ),
        (
            "responses: [{id: a, match: {exactly: a}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "match.exactly",
            "unknown field (allowed: exact, regex, starts_with, contains, ignore_case)",
        ),
        (
            "responses: [{id: a, match: {exact: []}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "match.exact",
            "expected at least one string",
        ),
        (
            "responses: [{id: a, match: {exact: [a, 1]}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "match.exact[1]",
            "expected a string, got integer",
        ),
        (
            "responses: [{id: a, match: {contains: ''}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "match.contains",
            "empty string would match every message",
        ),
        (
            "responses: [{id: a, match: {exact: a, ignore_case: yes please}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "match.ignore_case",
            "expected true or false",
        ),
        (
            "responses: [{id: greet, match: {regex: 'a(b'}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'greet')",
            "match.regex",
            "invalid regex: missing ), unterminated subpattern at position 1",
        ),
        (
            "responses: [{id: a, match: {regex: '(?P<model>x)'}, content: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "match.regex",
            "group name 'model' shadows a built-in",
        ),
        (
            "responses: [{id: a, match: {exact: a}}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            None,
            "exactly one body of content, variants, synthetic, tool_calls, json is required (got none)",
        ),
        (
            "responses: [{id: a, match: {exact: a}, content: x, variants: [y]}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            None,
            "(got content, variants)",
        ),
        (
            "responses: [{id: a, match: {exact: a}, variants: []}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "variants",
            "expected a non-empty list",
        ),
        (
            "responses: [{id: a, match: {exact: a}, variants: x}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "variants",
            "expected a list, got string",
        ),
        (
            "responses: [{id: a, match: {exact: a}, variants: [x, 2]}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "variants[1]",
            "expected a string, got integer",
        ),
        (
            "responses: [{id: a, match: {exact: a}, synthetic: {tokens: [5, 2]}}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "synthetic.tokens",
            "expected 1 <= min <= max, got [5, 2]",
        ),
        (
            "responses: [{id: a, match: {exact: a}, synthetic: {tokens: [0, 2]}}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "synthetic.tokens",
            "expected 1 <= min <= max",
        ),
        (
            "responses: [{id: a, match: {exact: a}, synthetic: {tokens: 5}}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "synthetic.tokens",
            "expected [min, max], got integer",
        ),
        (
            "responses: [{id: a, match: {exact: a}, synthetic: {tokens: [1, x]}}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "synthetic.tokens[1]",
            "expected an integer",
        ),
        (
            "responses: [{id: a, match: {exact: a}, synthetic: {}}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "synthetic.tokens",
            "required field",
        ),
        (
            "responses: [{id: a, match: {exact: a}, content: 'hi {nmae}'}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "content",
            "unknown template variable 'nmae'",
        ),
        # The variable's name reaches the message verbatim, even when it looks like a placeholder.
        (
            "responses: [{id: a, match: {exact: a}, content: 'hi {message}'}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "content",
            "unknown template variable 'message' (known: last_user_message, model)",
        ),
        # A regex's groups are known only to that entry's body.
        (
            "responses: [{id: a, match: {exact: a}, content: '{city}'}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "content",
            "unknown template variable 'city'",
        ),
        (
            "responses: [{id: a, match: {exact: a}, variants: [ok, '{']}]\n" + GOOD_DEFAULT,
            "responses[0] (id 'a')",
            "variants[1]",
            "single '{'",
        ),
        ("responses: [7]\n" + GOOD_DEFAULT, "responses[0]", None, "expected a mapping, got integer"),
        (
            "default: {match: {exact: a}, content: x}\n",
            "default",
            "match",
            "unknown field (allowed: content, variants, synthetic, tool_calls, json)",
        ),
        ("default:\n", "default", None, "expected a mapping, got null"),
        ("default: {content: '{city}'}\n", "default", "content", "unknown template variable 'city'"),
        ("default: {}\n", "default", None, "exactly one body"),
    ],
)
def test_errors_name_file_entry_and_field(text: str, entry: str | None, field: str | None, message: str) -> None:
    exc = error(text)
    assert (exc.file, exc.entry, exc.field) == ("r.yml", entry, field)
    assert message in exc.message
    # One line: file, entry, field, message.
    expected_prefix = ": ".join(["r.yml", *([entry] if entry else []), *([f"field '{field}'"] if field else [])])
    assert str(exc).startswith(expected_prefix + ": ")
    assert "\n" not in str(exc)


def test_a_regex_group_is_usable_in_its_body() -> None:
    script = parse_responses(
        "responses: [{id: a, match: {regex: '(?P<city>\\w+)'}, content: '{city}'}]\n" + GOOD_DEFAULT, "f"
    )
    assert isinstance(script.entries[0].body, Content)
    assert script.entries[0].body.template.names == {"city"}


def test_empty_file_needs_a_default() -> None:
    exc = error("")
    assert exc.field == "default"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_responses(tmp_path / "nope.yml")
    assert str(exc.value).startswith(f"{tmp_path / 'nope.yml'}: cannot read file")


def test_ignore_case_applies_to_a_regex_wherever_it_is_written() -> None:
    # ignore_case after the regex in the mapping still compiles it case-insensitively.
    script = parse_responses(
        "responses: [{id: a, match: {regex: 'HELLO (?P<who>\\w+)', ignore_case: true}, content: '{who}'}]\n"
        + GOOD_DEFAULT,
        "f",
    )
    match = script.entries[0].match
    assert match is not None
    assert match.test("hello World", "hello world") == {"who": "World"}
    strict = parse_responses("responses: [{id: a, match: {regex: 'HELLO'}, content: x}]\n" + GOOD_DEFAULT, "f")
    assert strict.entries[0].match is not None
    assert strict.entries[0].match.test("hello", "hello") is None


def test_a_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "r.yml"
    # Latin-1 "é" (0xE9) after 23 bytes; UTF-8 would need a continuation byte where "," is.
    path.write_bytes(b"default:\n  content: caf\xe9, bonjour\n")
    with pytest.raises(ConfigError) as exc:
        load_responses(path)
    assert str(exc.value) == f"{path}: not UTF-8 text: invalid continuation byte at byte 23 (line 2, column 15)"


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("responses: [{id: a, match: {exact: a}, tool_calls: []}]\n", "tool_calls", "expected a non-empty list"),
        ("responses: [{id: a, match: {exact: a}, tool_calls: [{arguments: {}}]}]\n", "tool_calls[0].name", "required"),
        (
            "responses: [{id: a, match: {exact: a}, tool_calls: [{name: ''}]}]\n",
            "tool_calls[0].name",
            "must not be empty",
        ),
        (
            "responses: [{id: a, match: {exact: a}, tool_calls: [{name: f, arguments: [1]}]}]\n",
            "tool_calls[0].arguments",
            "expected a mapping",
        ),
        (
            "responses: [{id: a, match: {exact: a}, tool_calls: [{name: f, args: {}}]}]\n",
            "tool_calls[0].args",
            "unknown field",
        ),
        (
            "responses: [{id: a, match: {exact: a}, tool_calls: [{name: f, arguments: {c: '{city}'}}]}]\n",
            "tool_calls[0].arguments.c",
            "unknown template variable 'city'",
        ),
        (
            "responses: [{id: a, match: {exact: a}, json: {x: [1, '{nope}']}}]\n",
            "json.x[1]",
            "unknown template variable 'nope'",
        ),
        ("responses: [{id: a, match: {exact: a}, json: {a: 1}, content: x}]\n", None, "exactly one body"),
    ],
)
def test_tool_call_and_json_bodies_are_checked(text: str, field: str | None, message: str) -> None:
    exc = error(text + GOOD_DEFAULT)
    assert (exc.entry, exc.field) == ("responses[0] (id 'a')", field)
    assert message in exc.message


def test_tool_call_and_json_bodies_render_templates_into_json() -> None:
    script = parse_responses(
        "responses:\n"
        "  - {id: t, match: {regex: 'in (?P<city>\\w+)'}, tool_calls: [{name: f, arguments: {city: '{city}', n: 2}}]}\n"
        "  - {id: j, match: {exact: j}, json: {said: '{last_user_message}', list: [true, null, 1.5]}}\n" + GOOD_DEFAULT,
        "f",
    )
    calls, answer = script.entries[0].body, script.entries[1].body
    assert isinstance(calls, ToolCalls)
    assert isinstance(answer, JsonAnswer)
    assert calls.calls[0].name == "f"
    assert calls.calls[0].arguments.render({"city": 'Pa"ris'}) == '{"city": "Pa\\"ris", "n": 2}'
    assert answer.value.render({"last_user_message": "j"}) == '{"said": "j", "list": [true, null, 1.5]}'
