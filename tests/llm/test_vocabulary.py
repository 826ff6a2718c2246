"""Token ids of the regex tokenizer: one id per token, stable, inside the vocabulary."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmsim.llm.filler import CYCLE
from llmsim.llm.prompt import chat_prompt_tokens, count_prompt_tokens, text_prompt_tokens
from llmsim.llm.tokenizer import encode
from llmsim.llm.vocabulary import SPECIAL_TOKENS, VOCAB_SIZE, VOCABULARY, Vocabulary
from llmsim.types import GenerationRequest, Message


def test_filler_text_round_trips_through_ids() -> None:
    tokens = list(CYCLE[:2000])
    ids = VOCABULARY.ids(tokens)
    assert [VOCABULARY.token(i) for i in ids] == tokens


def test_special_tokens_are_the_top_ids() -> None:
    assert [VOCABULARY.id(s) for s in SPECIAL_TOKENS] == list(range(VOCAB_SIZE - 5, VOCAB_SIZE))
    assert VOCABULARY.token(VOCAB_SIZE - 5) == "<|begin_of_text|>"


@given(st.text())
def test_every_token_has_one_id_in_range(text: str) -> None:
    tokens = encode(text)
    ids = VOCABULARY.ids(tokens)
    assert len(ids) == len(tokens)
    assert all(0 <= i < VOCAB_SIZE - len(SPECIAL_TOKENS) for i in ids)
    assert ids == [VOCABULARY.id(t) for t in tokens]


def test_a_token_outside_the_table_gets_a_stable_id_without_text() -> None:
    word = " antidisestablishmentarianism"
    hashed = VOCABULARY.id(word)
    # Table ids come first: every table token (the filler's, ASCII characters) has a smaller id.
    largest_table_id = max(VOCABULARY.ids([*CYCLE, *(chr(c) for c in range(0x20, 0x7F))]))
    assert largest_table_id < hashed < VOCAB_SIZE - len(SPECIAL_TOKENS)
    assert Vocabulary().id(word) == hashed  # a fresh vocabulary: same id (no per-process salt)
    assert VOCABULARY.token(hashed) == f"<|token_{hashed}|>"


@given(st.lists(st.tuples(st.sampled_from(["system", "user", "assistant", "tool"]), st.text()), min_size=1))
def test_chat_template_tokens_are_what_is_counted(pairs: list[tuple[str, str]]) -> None:
    messages = tuple(Message(role, content) for role, content in pairs)
    request = GenerationRequest(model="m", messages=messages, chat=True)
    assert len(chat_prompt_tokens(messages)) == count_prompt_tokens(request)


@given(st.text())
def test_completion_prompt_tokens_are_what_is_counted(text: str) -> None:
    request = GenerationRequest(model="m", messages=(Message("user", text),), chat=False)
    assert len(text_prompt_tokens(text)) == count_prompt_tokens(request)
