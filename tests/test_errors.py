"""The helpers both config files share: reading, YAML parsing, labels, locations and pydantic errors."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError

from llmsim.errors import (
    ConfigError,
    entry_label,
    format_loc,
    from_validation_error,
    parse_yaml,
    read_yaml_file,
)


@pytest.mark.parametrize(
    ("loc", "expected"),
    [
        ((), ""),
        (("model",), "model"),
        (("kv_cache", "block_size"), "kv_cache.block_size"),
        (("messages", 0, "role"), "messages[0].role"),
        (("synthetic", "tokens", 1), "synthetic.tokens[1]"),
        ((0, 1, "x"), "[0][1].x"),
    ],
)
def test_format_loc(loc: tuple[int | str, ...], expected: str) -> None:
    assert format_loc(loc) == expected


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("models", 1, "name", "x"), "models[1] (name 'x')"),
        (("responses", 3, "id", "greet"), "responses[3] (id 'greet')"),
        # No usable name: the position alone.
        (("models", 0, "name", None), "models[0]"),
        (("models", 0, "name", ""), "models[0]"),
        (("responses", 2, "id", 7), "responses[2]"),
    ],
)
def test_entry_label(args: tuple[str, int, str, object], expected: str) -> None:
    assert entry_label(*args) == expected


def read_error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as exc:
        read_yaml_file(path)
    assert "\n" not in str(exc.value)
    assert exc.value.file == str(path)
    return exc.value


def test_read_yaml_file_parses(tmp_path: Path) -> None:
    path = tmp_path / "f.yml"
    path.write_text("a: [1, two]\n", encoding="utf-8")
    assert read_yaml_file(path) == {"a": [1, "two"]}


def test_missing_file(tmp_path: Path) -> None:
    assert read_error(tmp_path / "nope.yml").message == "cannot read file: No such file or directory"


def test_a_directory_is_not_a_file(tmp_path: Path) -> None:
    assert read_error(tmp_path).message == "cannot read file: Is a directory"


def test_not_utf8_names_byte_line_and_column(tmp_path: Path) -> None:
    # "é" (2 bytes in UTF-8, 1 character) on line 2 comes before the bad byte: the byte offset
    # counts it twice, the column once. Line 3 is "  x: ", then Latin-1 "é" (0xE9) then "!".
    path = tmp_path / "f.yml"
    path.write_bytes(b"a: 1\nb: \xc3\xa9\n  x: \xe9!\n")
    # Bytes before the bad one: 5 ("a: 1\n") + 6 ("b: " + 2 + "\n") + 5 ("  x: ") = 16.
    assert read_error(path).message == "not UTF-8 text: invalid continuation byte at byte 16 (line 3, column 6)"


def test_utf16_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "f.yml"
    path.write_bytes("a: 1\n".encode("utf-16"))  # starts with the BOM FF FE
    assert read_error(path).message == "not UTF-8 text: invalid start byte at byte 0 (line 1, column 1)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [1,\n", "invalid YAML: line 2, column 1: expected the node content, but found '<stream end>'"),
        ("a: b: c\n", "invalid YAML: line 1, column 5: mapping values are not allowed here"),
        # PyYAML's own text for a control character has two lines; ours has one, with line and column.
        (
            "a: 1\nb: 'x\x07'\n",
            "invalid YAML: line 2, column 6: unacceptable character #x0007: special characters are not allowed",
        ),
        ("a: !!python/name:os.system x\n", "invalid YAML: line 1, column 4: could not determine a constructor"),
    ],
)
def test_invalid_yaml_is_one_line_with_position(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_yaml(text, "f.yml")
    assert exc.value.message.startswith(message)
    assert "\n" not in str(exc.value)


# A small schema with the shapes both config files use: a named list, a single entry, a tagged union.
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Red(_Strict):
    red: int


class Blue(_Strict):
    blue: int


def _colour(value: Any) -> str | None:
    return next((k for k in ("red", "blue") if k in value), None) if isinstance(value, dict) else None


Colour = Annotated[Annotated[Red, Tag("red")] | Annotated[Blue, Tag("blue")], Discriminator(_colour)]


class Item(_Strict):
    name: str
    size: int = 0
    colour: Colour | None = None


class Document(_Strict):
    items: list[Item] = []
    single: Colour | None = None
    required: str = Field(description="what it is for")


def document_error(document: Any) -> ConfigError:
    with pytest.raises(ValidationError) as exc:
        Document.model_validate(document)
    return from_validation_error("d.yml", exc.value, Document, document, {"items": "name", "single": None})


@pytest.mark.parametrize(
    ("document", "entry", "field", "message"),
    [
        ({"items": [], "required": 3}, None, "required", "expected a string, got integer"),
        ({}, None, "required", "required field is missing (what it is for)"),
        ({"required": "r", "extra": 1}, None, "extra", "unknown field (allowed: items, single, required)"),
        (
            {"required": "r", "items": [{"name": "a"}, {"name": "b", "size": "2"}]},
            "items[1] (name 'b')",
            "size",
            "expected an integer, got string",
        ),
        ({"required": "r", "items": [{"size": 1}]}, "items[0]", "name", "required field is missing"),
        ({"required": "r", "items": [7]}, "items[0]", None, "expected a mapping, got integer"),
        ({"required": "r", "items": {"name": "a"}}, None, "items", "expected a list, got mapping"),
        # The tag pydantic inserts ("red") is no place in the file: it is left out of the field.
        (
            {"required": "r", "items": [{"name": "a", "colour": {"red": True}}]},
            "items[0] (name 'a')",
            "colour.red",
            "expected an integer, got boolean",
        ),
        # Inside a tagged union, an unknown field lists the fields of every member.
        ({"required": "r", "single": {"blue": 1, "green": 2}}, "single", "green", "unknown field (allowed: red, blue)"),
        # A misspelt field is both missing and unknown: the misspelling is named.
        (
            {"required": "r", "items": [{"nmae": "a"}]},
            "items[0]",
            "nmae",
            "unknown field (allowed: name, size, colour)",
        ),
    ],
)
def test_validation_errors_name_entry_and_field(
    document: Any, entry: str | None, field: str | None, message: str
) -> None:
    error = document_error(document)
    assert (error.file, error.entry, error.field, error.message) == ("d.yml", entry, field, message)
    assert "\n" not in str(error)
