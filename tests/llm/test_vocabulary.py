"""Token ids of the regex tokenizer: one id per token, stable across processes, inside the vocabulary."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmsim.llm.filler import CYCLE
from llmsim.llm.prompt import count_prompt_tokens
from llmsim.llm.tokenizer import VOCAB_SIZE, RegexTokenizer, encode
from llmsim.llm.vocabulary import FIRST_TEXT_ID, SPECIAL_TOKENS, Vocabulary
from llmsim.types import GenerationRequest, Message


def expected_id(text: str) -> int:
    """vocabulary.py's formula, written out: blake2b-64 of the UTF-8 text, folded above the special ids."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return FIRST_TEXT_ID + int.from_bytes(digest, "big") % (2**31 - FIRST_TEXT_ID)


def test_filler_text_round_trips_through_ids() -> None:
    tokenizer = RegexTokenizer(Vocabulary())
    tokens = list(CYCLE[:2000])
    ids = tokenizer.ids_of_tokens(tokens)
    assert tokenizer.id_to_token(ids) == tokens
    assert tokenizer.decode(ids) == "".join(tokens)


def test_special_tokens_sit_below_the_text_ids() -> None:
    strs, ids = RegexTokenizer().chat_prompt([Message("user", "hi")], add_special_tokens=True)
    user_turn = ["<|start_header_id|>", "user", "<|end_header_id|>", "hi", "<|eot_id|>"]
    reply = ["<|start_header_id|>", "assistant", "<|end_header_id|>"]
    assert strs == ["<|begin_of_text|>", *user_turn, *reply]
    assert ids == [1, 2, 7, 3, expected_id("hi"), 4, 2, 8, 3]
    assert all(i < FIRST_TEXT_ID for i in SPECIAL_TOKENS.values())


@given(st.text())
def test_every_token_has_one_id_in_range(text: str) -> None:
    tokens = encode(text)
    ids = RegexTokenizer().ids_of_tokens(tokens)
    assert list(ids) == [expected_id(t) for t in tokens]
    assert all(FIRST_TEXT_ID <= i < VOCAB_SIZE for i in ids)


def test_an_id_this_process_never_made_is_shown_by_number_and_outside_ids_are_refused() -> None:
    tokenizer = RegexTokenizer(Vocabulary())
    word = " antidisestablishmentarianism"
    assert tokenizer.id_to_token([expected_id(word)]) == [f"<|token_{expected_id(word)}|>"]
    tokenizer.ids_of_tokens([word])  # now this process made it
    assert tokenizer.id_to_token([expected_id(word)]) == [word]
    with pytest.raises(ValueError, match=f"Token id {VOCAB_SIZE} is out of vocabulary"):
        tokenizer.id_to_token([VOCAB_SIZE])


@given(st.lists(st.tuples(st.sampled_from(["system", "user", "assistant", "tool"]), st.text()), min_size=1))
def test_chat_template_tokens_are_what_is_counted(pairs: list[tuple[str, str]]) -> None:
    messages = tuple(Message(role, content) for role, content in pairs)
    request = GenerationRequest(model="m", messages=messages, chat=True)
    strs, ids = RegexTokenizer().chat_prompt(messages)
    assert len(strs) == len(ids) == count_prompt_tokens(request)


@given(st.text())
def test_completion_prompt_tokens_are_what_is_counted(text: str) -> None:
    request = GenerationRequest(model="m", messages=(Message("user", text),), chat=False)
    strs, ids = RegexTokenizer().text_prompt(text)
    assert len(strs) == len(ids) == count_prompt_tokens(request)
