"""Prompt tokens as a real chat template produces them: counts, token strings, and the ids the engine hashes.

With the built-in regex tokenizer the template is Llama-3-shaped (its constants are those of
OpenAI's published chat-format accounting, close to Llama and ChatML templates, whose role
headers cost 3-5 tokens):

- chat: every message costs its content's tokens plus :data:`TOKENS_PER_MESSAGE` -
  ``<|start_header_id|>``, the role, ``<|end_header_id|>`` before the content and ``<|eot_id|>``
  after it; the prompt then costs :data:`REPLY_PRIMING_TOKENS` once (the assistant header that
  primes the reply).
- completions: the prompt text's tokens plus :data:`BOS_TOKENS` (``<|begin_of_text|>``), as a
  Llama-style tokenizer in vLLM prepends BOS to a raw prompt.
- token-id prompts: taken as given, as vLLM takes them.

So the reply primed by one turn's prompt is exactly the assistant header that introduces that
reply in the next turn's prompt: a multi-turn conversation's prompt starts with the previous
prompt plus the previous answer, and the prefix cache sees it (as with a real template).
A Hugging Face tokenizer renders its own template (:mod:`llmsim.llm.hf_tokenizer`)."""

from __future__ import annotations

from llmsim.llm.tokenizer import BOS_TOKENS, REPLY_PRIMING_TOKENS, TOKENS_PER_MESSAGE, Tokenizer, count
from llmsim.types import GenerationRequest

__all__ = ["BOS_TOKENS", "REPLY_PRIMING_TOKENS", "TOKENS_PER_MESSAGE", "count_prompt_tokens", "prompt_token_ids"]


def count_prompt_tokens(request: GenerationRequest) -> int:
    """What ``usage.prompt_tokens`` reports for ``request`` with the regex tokenizer (no ids built)."""
    if request.prompt_token_ids is not None:
        return len(request.prompt_token_ids)
    content = sum(count(m.content) for m in request.messages)
    if request.chat:
        return content + TOKENS_PER_MESSAGE * len(request.messages) + REPLY_PRIMING_TOKENS
    return content + BOS_TOKENS


def prompt_token_ids(request: GenerationRequest, tokenizer: Tokenizer) -> tuple[int, ...]:
    """The prompt's token ids, template tokens included (``len`` is ``usage.prompt_tokens``)."""
    if request.prompt_token_ids is not None:
        return request.prompt_token_ids
    if request.chat:
        return tuple(tokenizer.chat_prompt_ids(request.messages))
    # A completions prompt arrives as one user message.
    return tuple(tokenizer.completion_prompt_ids("".join(m.content for m in request.messages)))
