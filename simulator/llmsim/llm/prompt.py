"""Prompt token counts that look like a real chat template's.

Constants (those of OpenAI's published chat-format accounting, close to Llama and ChatML
templates, whose role headers cost 3-5 tokens):

- chat: every message costs its content's tokens plus :data:`TOKENS_PER_MESSAGE` (role header and
  end-of-turn markers); the prompt then costs :data:`REPLY_PRIMING_TOKENS` once (the assistant
  header that primes the reply).
- completions: the prompt text's tokens plus :data:`BOS_TOKENS`, as a Llama-style tokenizer in
  vLLM prepends ``<s>`` to a raw prompt.
- token-id prompts: ``len(prompt_token_ids)``, as vLLM takes ids as given.

The same accounting as token strings (:func:`chat_prompt_tokens`, :func:`text_prompt_tokens`, for
/tokenize and echo) follows a Llama 3 chat template: per message ``<|start_header_id|>``, the role,
``<|end_header_id|>``, the content, ``<|eot_id|>``; then the assistant header.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmsim.llm.tokenizer import count, encode
from llmsim.llm.vocabulary import BOS, END_HEADER, EOT, START_HEADER
from llmsim.types import GenerationRequest, Message

__all__ = [
    "BOS_TOKENS",
    "REPLY_PRIMING_TOKENS",
    "TOKENS_PER_MESSAGE",
    "chat_prompt_tokens",
    "count_prompt_tokens",
    "text_prompt_tokens",
]

TOKENS_PER_MESSAGE = 4
REPLY_PRIMING_TOKENS = 3
BOS_TOKENS = 1


def count_prompt_tokens(request: GenerationRequest) -> int:
    """What ``usage.prompt_tokens`` reports for ``request``."""
    if request.prompt_token_ids is not None:
        return len(request.prompt_token_ids)
    content = sum(count(m.content) for m in request.messages)
    if request.chat:
        return content + TOKENS_PER_MESSAGE * len(request.messages) + REPLY_PRIMING_TOKENS
    return content + BOS_TOKENS


def chat_prompt_tokens(
    messages: Sequence[Message],
    *,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    add_special_tokens: bool = False,
) -> list[str]:
    """The rendered chat prompt's tokens; as many as :func:`count_prompt_tokens` counts by default."""
    out = [BOS] if add_special_tokens else []
    for i, m in enumerate(messages):
        out += (START_HEADER, m.role, END_HEADER, *encode(m.content))
        # continue_final_message leaves the last turn open for the model to go on with.
        if not (continue_final_message and i == len(messages) - 1):
            out.append(EOT)
    if add_generation_prompt:
        out += (START_HEADER, "assistant", END_HEADER)
    return out


def text_prompt_tokens(text: str, *, add_special_tokens: bool = True) -> list[str]:
    """A completions prompt's tokens (with BOS by default, as :func:`count_prompt_tokens` counts)."""
    return [BOS, *encode(text)] if add_special_tokens else encode(text)
