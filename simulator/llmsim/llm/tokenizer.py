"""A lossless regex tokenizer in the style of GPT-2's pre-tokenizer.

Every token is one match of :data:`TOKEN_PATTERN`; the alternatives are tried in this order:

1. contractions ``'s 't 're 've 'm 'll 'd`` (any case, so ``IT'S`` -> ``IT``, ``'S``);
2. CJK ideographs, kana, hangul and CJK punctuation, one character per token;
3. letter runs with an optional leading space (``" world"``);
4. digits in groups of up to three, no leading space (``"12345"`` -> ``"123"``, ``"45"``);
5. runs of punctuation and symbols (``_`` included) with an optional leading space;
6. whitespace runs that leave their last space to start the next word (GPT-2's ``\\s+(?!\\S)``),
   else the whole run (before a digit, at the end of the text);
7. any other character alone.

No alternative matches the empty string and the last one matches any character, so the matches
tile the text: ``"".join(encode(text)) == text`` for every string.
"""

from __future__ import annotations

import re

__all__ = ["TOKEN_PATTERN", "count", "encode"]

# CJK Unified Ideographs (+ extension A, compatibility, supplementary planes), kana, hangul, and
# the CJK symbols block without U+3000 (the ideographic space stays whitespace).
_CJK = "\u3001-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f"

TOKEN_PATTERN: re.Pattern[str] = re.compile(
    rf"""
    (?i:'(?:s|t|re|ve|m|ll|d))
    | [{_CJK}]
    | \x20?[^\W\d_{_CJK}]+
    | \d{{1,3}}
    | \x20?(?:[^\s\w{_CJK}]|_)+
    | \s+(?!\S)
    | \s+
    | .
    """,
    re.VERBOSE | re.DOTALL,
)

_findall = TOKEN_PATTERN.findall
_subn = TOKEN_PATTERN.subn


def encode(text: str) -> list[str]:
    """Split ``text`` into token strings; joining them gives ``text`` back."""
    return _findall(text)


def count(text: str) -> int:
    """Number of tokens in ``text``, without keeping the token strings."""
    # NOTE: subn counts matches in C and builds neither match objects nor a list of strings
    # (its result is the empty string, since the matches tile the text). Measured on prose:
    # as fast as len(findall), ~1.4x faster than counting finditer's matches in Python.
    return _subn("", text)[1]
