"""Request bodies as JSON values, refused (400) when no answer could be built from them.

Every route that reads a JSON body parses it here, so a hostile body gets the same 400 in
OpenAI's shape everywhere:

* not JSON, or not UTF-8: FastAPI's words (:func:`~llmsim.api.errors.invalid_json`);
* nested deeper than :data:`MAX_DEPTH` arrays and objects: ``json.loads`` would recurse past the
  interpreter's limit (a ``RecursionError``, not a ``ValueError``) on a few thousand ``[``, and
  what parses would be walked recursively again (pydantic, JSON-schema answers, ``json.dumps``);
* a string holding a lone UTF-16 surrogate (``"\\ud800"``): JSON's escapes allow it, UTF-8 cannot
  encode it, so any answer echoing it (``echo``, ``return_token_strs``, a scripted echo, a JSON
  answer, a stream) would fail half-way. vLLM parses such a body (FastAPI's ``json.loads``), then
  its Hugging Face tokenizer refuses the text (``TypeError: TextInputSequence must be str``).
  llmsim refuses the body at once, naming the field.

NOTE: both checks cost nothing for an ordinary body: the depth is measured only when the body
holds more than :data:`MAX_DEPTH` brackets, strings are looked at only when the raw body holds a
``\\ud8``..``\\udf`` escape (surrogates cannot arrive any other way: raw bytes must be UTF-8).
"""

from __future__ import annotations

import json
import re
from array import array
from itertools import accumulate
from typing import Any

from llmsim.api.errors import APIError, invalid_json, validation_failed

__all__ = ["MAX_DEPTH", "loads"]

#: The deepest nesting of arrays and objects a body may have (JSON schemas in real requests stay
#: well under 20; ``json.loads`` itself fails near 1,000).
MAX_DEPTH = 128

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# Strings (their brackets do not count), then everything but brackets.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
# Every byte but brackets, for bytes.translate to delete (one pass in C, strings' brackets kept).
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
# Opening brackets count +1, closing ones -1 (as signed bytes).
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def loads(body: bytes) -> Any:
    """``body`` as a JSON value; raises APIError (400) for the bodies above."""
    if len(body.translate(None, _NOT_BRACKETS)) > MAX_DEPTH and _depth(body) > MAX_DEPTH:
        raise _too_deep()
    try:
        data = json.loads(body)
    except RecursionError:  # only if MAX_DEPTH were raised past what the interpreter allows
        raise _too_deep() from None
    except ValueError:
        raise invalid_json(body) from None
    if _SURROGATE_ESCAPE.search(body) is not None:
        where = _lone_surrogate(data)
        if where is not None:
            raise _lone_surrogate_error(*where)
    return data


def _too_deep() -> APIError:
    return validation_failed(
        [
            {
                "type": "json_invalid",
                "loc": ("body",),
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": f"arrays and objects nested deeper than {MAX_DEPTH} levels"},
            }
        ]
    )


def _lone_surrogate_error(loc: tuple[str | int, ...], value: str) -> APIError:
    return validation_failed(
        [
            {
                "type": "string_unicode",
                "loc": ("body", *loc),
                "msg": "Input should be a valid string, unable to parse raw data as a unicode string",
                "input": value,
                "ctx": {"error": "lone UTF-16 surrogate: UTF-8 cannot encode it"},
            }
        ]
    )


def _depth(body: bytes) -> int:
    """The deepest nesting of brackets outside strings (C loops only: the body may be megabytes)."""
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", body))
    steps = array("b", brackets.translate(_STEPS))
    return max(accumulate(steps), default=0)


def _lone_surrogate(data: Any) -> tuple[tuple[str | int, ...], str] | None:
    """Where the first string (or key) UTF-8 cannot encode is, and that string; None if there is none."""
    todo: list[tuple[tuple[str | int, ...], Any]] = [((), data)]
    while todo:
        loc, value = todo.pop()
        if isinstance(value, str):
            if not _encodable(value):
                return loc, value
        elif isinstance(value, list):
            todo.extend(((*loc, i), v) for i, v in enumerate(value) if isinstance(v, str | list | dict))
        elif isinstance(value, dict):
            for key, v in value.items():
                if not _encodable(key):
                    return loc, key
                if isinstance(v, str | list | dict):
                    todo.append(((*loc, key), v))
    return None


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
