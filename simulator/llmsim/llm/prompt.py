"""Prompt token counts that look like a real chat template's.

Constants (those of OpenAI's published chat-format accounting, close to Llama and ChatML
templates, whose role headers cost 3-5 tokens):

- chat: every message costs its content's tokens plus :data:`TOKENS_PER_MESSAGE` (role header and
  end-of-turn markers); the prompt then costs :data:`REPLY_PRIMING_TOKENS` once (the assistant
  header that primes the reply).
- completions: the prompt text's tokens plus :data:`BOS_TOKENS`, as a Llama-style tokenizer in
  vLLM prepends ``<s>`` to a raw prompt.
- token-id prompts: ``len(prompt_token_ids)``, as vLLM takes ids as given.
"""

from __future__ import annotations

from llmsim.llm.tokenizer import count
from llmsim.types import GenerationRequest

__all__ = ["BOS_TOKENS", "REPLY_PRIMING_TOKENS", "TOKENS_PER_MESSAGE", "count_prompt_tokens"]

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
