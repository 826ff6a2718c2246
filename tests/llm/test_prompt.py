"""Prompt token counting: content tokens plus the chat template's fixed overheads."""

from __future__ import annotations

from llmsim.llm.prompt import count_prompt_tokens
from llmsim.types import GenerationRequest, Message


def test_chat_counts_content_plus_four_per_message_plus_three() -> None:
    request = GenerationRequest(
        model="m",
        messages=(Message("system", "You are helpful."), Message("user", "Hi there")),
    )
    # "You"," are"," helpful","." = 4; "Hi"," there" = 2; 2 messages x 4; 3 to prime the reply.
    assert count_prompt_tokens(request) == 4 + 2 + 2 * 4 + 3


def test_empty_chat_costs_only_the_priming() -> None:
    assert count_prompt_tokens(GenerationRequest(model="m", messages=())) == 3


def test_completion_counts_prompt_plus_bos() -> None:
    request = GenerationRequest(model="m", messages=(Message("user", "Hello, world!"),), chat=False)
    # "Hello", ",", " world", "!" = 4, + <s>
    assert count_prompt_tokens(request) == 4 + 1


def test_token_ids_count_as_given() -> None:
    request = GenerationRequest(
        model="m", messages=(Message("user", "ignored text"),), prompt_token_ids=(5, 6, 7), chat=False
    )
    assert count_prompt_tokens(request) == 3
