"""The OpenAI response bodies of the completion routes, in one place: streamed chunks and whole responses.

Streamed chunks are built from per-request byte templates. NOTE: the per-token path never builds a dict or calls a full JSON encoder on a chunk: the parts
that are the same for every token of a request (id, created, model, object) are encoded once;
per token only the choice index, the JSON-escaped token text and the finish reason are filled in.
tests/api/test_sse.py checks the bytes parse to exactly what a dict-based encoder would produce.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Sequence
from typing import Any

from llmsim.types import FinishReason, GenerationPlan

DONE = b"data: [DONE]\n\n"
_dumps = json.dumps
# What json.dumps(text, ensure_ascii=False) calls for a str, minus building a JSONEncoder per call
# (json.dumps only reuses its cached encoder for default arguments): 1.4 us -> 0.07 us a token.
_encode_text = json.encoder.encode_basestring
_FINISH: dict[FinishReason | None, bytes] = {None: b"null", **{r: b'"%s"' % r.value.encode() for r in FinishReason}}


def _usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> bytes:
    total = prompt_tokens + completion_tokens
    # vLLM fills prompt_tokens_details only with --enable-prompt-tokens-details (off by default).
    details = b"null" if cached_tokens is None else b'{"cached_tokens":%d}' % cached_tokens
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":%s}' % (
        prompt_tokens,
        total,
        completion_tokens,
        details,
    )


class ChunkTemplates:
    """Byte templates for one streamed request (chat or text completion)."""

    __slots__ = ("_head", "_role", "_token")

    def __init__(self, request_id: str, created: int, model: str, *, chat: bool) -> None:
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._head = b'data: {"id":%s,"object":"%s","created":%d,"model":%s,"choices":[' % (
            _dumps(request_id).encode(),
            obj.encode(),
            created,
            _dumps(model).encode(),
        )
        # One %-template per request: id and model may hold a '%', so the head is escaped.
        head = self._head.replace(b"%", b"%%")
        text_key = b'"delta":{"content":%s}' if chat else b'"text":%s'
        # index, JSON text, finish reason, then "]}" or the usage member
        self._token = head + b'{"index":%d,' + text_key + b',"logprobs":null,"finish_reason":%s}]%s}\n\n'
        self._role = (
            head + b'{"index":%d,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
        )

    def role(self, index: int) -> bytes:
        """Chat only: the opening chunk of a choice, announcing the assistant role."""
        return self._role % index

    def token(
        self,
        index: int,
        text: str,
        finish: FinishReason | None = None,
        usage: tuple[int, int] | None = None,
    ) -> bytes:
        """A chunk carrying one token; ``usage`` (prompt, completion so far) for continuous stats."""
        return self._token % (
            index,
            _encode_text(text).encode(),
            _FINISH[finish],
            b"" if usage is None else b',"usage":' + _usage(*usage),
        )

    def finish(self, index: int, finish: FinishReason, usage: tuple[int, int] | None = None) -> bytes:
        """A closing chunk with no text (a choice that produced no token, or an aborted one)."""
        return self.token(index, "", finish, usage)

    def usage(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> bytes:
        """The final ``include_usage`` chunk: no choices, only usage (with cached tokens when given)."""
        return self._head + b'],"usage":' + _usage(prompt_tokens, completion_tokens, cached_tokens) + b"}\n\n"

    def error(self, message: str, err_type: str, code: int) -> bytes:
        """An error during a stream: sent as data, the stream still ends with [DONE]."""
        body = {"error": {"message": message, "type": err_type, "param": None, "code": code}}
        return b"data: " + _dumps(body).encode() + b"\n\n"


def completion_body(
    request_id: str,
    created: int,
    model: str,
    plans: Sequence[GenerationPlan],
    texts: Sequence[Sequence[str]],
    prompt_tokens: int,
    cached_tokens: int | None = None,
    *,
    chat: bool,
) -> dict[str, Any]:
    """A whole (non-streamed) ``chat.completion`` or ``text_completion``; ``texts`` holds each choice's tokens.

    ``cached_tokens`` (vLLM's --enable-prompt-tokens-details): ``usage.prompt_tokens_details``.
    """
    choices: list[dict[str, Any]] = []
    for i, (tokens, plan) in enumerate(zip(texts, plans, strict=True)):
        text = "".join(tokens)
        finish = plan.finish_reason.value
        if chat:
            message = {"role": "assistant", "content": text, "tool_calls": []}
            choices.append({"index": i, "message": message, "logprobs": None, "finish_reason": finish})
        else:
            choices.append({"index": i, "text": text, "logprobs": None, "finish_reason": finish})
    completion_tokens = sum(len(t) for t in texts)
    return {
        "id": request_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            **({} if cached_tokens is None else {"prompt_tokens_details": {"cached_tokens": cached_tokens}}),
        },
    }
