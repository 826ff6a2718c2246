"""Filler prose: re-tokenizes into exactly the tokens it was built from, at any length and offset."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmsim.llm.filler import CYCLE, SENTENCE_STARTS, filler_tokens
from llmsim.llm.tokenizer import encode


def test_cycle_shape() -> None:
    # Wrapping from the last token to the first must keep the tokenization: "." then " Word".
    assert CYCLE[-1] == "."
    assert SENTENCE_STARTS[0] == 0
    for start in SENTENCE_STARTS:
        assert CYCLE[start].startswith(" ")
        assert CYCLE[start][1].isupper()
        assert start == 0 or CYCLE[start - 1] == "."


@given(st.integers(0, 3 * len(CYCLE)), st.integers(0, 2**64 - 1), st.booleans())
def test_filler_tokenizes_to_itself(n: int, draw: int, leading_space: bool) -> None:
    tokens = filler_tokens(n, draw, leading_space=leading_space)
    assert len(tokens) == n
    assert encode("".join(tokens)) == list(tokens)
    if n:
        assert tokens[0][0].isspace() == leading_space
        assert tokens[0].strip() == CYCLE[SENTENCE_STARTS[draw % len(SENTENCE_STARTS)]].strip()


def test_same_draw_same_text_different_draw_other_sentence() -> None:
    a = filler_tokens(50, 1)
    assert a == filler_tokens(50, 1)
    starts = len(SENTENCE_STARTS)
    assert a == filler_tokens(50, 1 + starts)
    assert a != filler_tokens(50, 2)
