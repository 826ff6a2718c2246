"""The regex tokenizer: hand-worked splits of each rule, losslessness, and count == len(encode)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmsim.llm.tokenizer import SLICE_CHARS, TOKEN_PATTERN, count, encode, slices

# Each expectation worked out by hand from the rules in tokenizer.py's docstring.
EXAMPLES = [
    # The brief's example: punctuation alone, spaces glued to words, digits in threes.
    ("Hello, world! It's 12345.", ["Hello", ",", " world", "!", " It", "'s", " ", "123", "45", "."]),
    # Two spaces: the run keeps all but its last space, which starts the next word.
    ("a  b", ["a", " ", " b"]),
    # Newlines never start a word (only a literal space does): each is left alone.
    ("x\n\ny", ["x", "\n", "\n", "y"]),
    ("tab\tx", ["tab", "\t", "x"]),
    ("trailing  ", ["trailing", "  "]),
    # Contractions in any case; a quote that starts no contraction is punctuation.
    ("I'M here", ["I", "'M", " here"]),
    ("don't", ["don", "'t"]),
    ("'hello'", ["'", "hello", "'"]),
    ("we'll've", ["we", "'ll", "'ve"]),
    # CJK one character per token, and never glued to a neighbouring letter run.
    ("东京タワー는", ["东", "京", "タ", "ワ", "ー", "는"]),
    ("hello世界", ["hello", "世", "界"]),
    ("日本語。", ["日", "本", "語", "。"]),
    # Underscore counts as punctuation; punctuation runs merge.
    ("__init__.py", ["__", "init", "__.", "py"]),
    ("a ,b", ["a", " ,", "b"]),
    # Digits: groups of three from the left, no leading space.
    (" 1234567", [" ", "123", "456", "7"]),
    ("$100.50!", ["$", "100", ".", "50", "!"]),
    ("v2", ["v", "2"]),
    # Non-ASCII letters are letters; emoji are symbols.
    ("Ünïcödé words", ["Ünïcödé", " words"]),
    ("ok 👍👍", ["ok", " 👍👍"]),
    ("", []),
]


@pytest.mark.parametrize(("text", "tokens"), EXAMPLES)
def test_hand_worked_examples(text: str, tokens: list[str]) -> None:
    assert encode(text) == tokens
    assert count(text) == len(tokens)


MIXED = st.text(
    alphabet=st.sampled_from(list("ab Z'sdtlmvre1234567890_.,!? \t\n\r\u3000东京タ는é👍\u0301ſİ")),
    max_size=60,
)


@given(st.one_of(st.text(), MIXED))
def test_encoding_is_lossless_and_count_agrees(text: str) -> None:
    tokens = encode(text)
    assert "".join(tokens) == text
    assert all(tokens)  # no empty token
    assert count(text) == len(tokens)


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=40))
def test_lossless_over_all_code_points(text: str) -> None:
    assert "".join(encode(text)) == text


def test_lone_surrogate_is_one_token() -> None:
    # JSON bodies can carry "\ud800"; it must still tokenize losslessly.
    assert encode("a\ud800b") == ["a", "\ud800", "b"]


# Text that has every kind of token and every kind of cut point, often.
CUTTABLE = st.lists(st.sampled_from([*"ab Z 19 ,.!?'s\n\t_-中", "  ", "'ll", "x1y"]), max_size=200).map("".join)


@given(CUTTABLE, st.integers(1, 12))
def test_slices_cut_only_at_token_boundaries(text: str, size: int) -> None:
    pieces = slices(text, size)
    assert "".join(pieces) == text
    assert [token for piece in pieces for token in TOKEN_PATTERN.findall(piece)] == TOKEN_PATTERN.findall(text)


def test_a_long_text_is_cut_into_bounded_slices_and_counted_the_same() -> None:
    text = "The quick brown fox jumps over 1234 lazy dogs, again and again. " * 20_000  # 1.3 M chars
    pieces = slices(text)
    assert len(pieces) > 10
    # Each cut is found within a few characters past the target size; the rest is at most two slices.
    assert max(len(p) for p in pieces[:-1]) < SLICE_CHARS + 100
    assert len(pieces[-1]) <= 2 * SLICE_CHARS
    assert count(text) == len(TOKEN_PATTERN.findall(text))
    assert encode(text) == TOKEN_PATTERN.findall(text)
