"""Server-sent-event chunks built from per-request byte templates.

NOTE: the per-token path never builds a dict or calls a full JSON encoder on a chunk: the parts
that are the same for every token of a request (id, created, model, object) are encoded once;
per token only the choice index, the JSON-escaped token text and the finish reason are filled in.
tests/api/test_sse.py checks the bytes parse to exactly what a dict-based encoder would produce.
"""

from __future__ import annotations

import json

from llmsim.types import FinishReason

DONE = b"data: [DONE]\n\n"
_dumps = json.dumps


def _finish(reason: FinishReason | None) -> bytes:
    return b"null" if reason is None else b'"' + reason.value.encode() + b'"'


def _usage(prompt_tokens: int, completion_tokens: int) -> bytes:
    total = prompt_tokens + completion_tokens
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":null}' % (
        prompt_tokens,
        total,
        completion_tokens,
    )


class ChunkTemplates:
    """Byte templates for one streamed request (chat or text completion)."""

    __slots__ = ("_chat", "_head", "_text_key")

    def __init__(self, request_id: str, created: int, model: str, *, chat: bool) -> None:
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._chat = chat
        self._head = b'data: {"id":%s,"object":"%s","created":%d,"model":%s,"choices":[' % (
            _dumps(request_id).encode(),
            obj.encode(),
            created,
            _dumps(model).encode(),
        )
        self._text_key = b'"delta":{"content":' if chat else b'"text":'

    def role(self, index: int) -> bytes:
        """Chat only: the opening chunk of a choice, announcing the assistant role."""
        return self._head + (
            b'{"index":%d,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n' % index
        )

    def token(
        self,
        index: int,
        text: str,
        finish: FinishReason | None = None,
        usage: tuple[int, int] | None = None,
    ) -> bytes:
        """A chunk carrying one token; ``usage`` (prompt, completion so far) for continuous stats."""
        close = b"}" if self._chat else b""
        tail = b"]}\n\n" if usage is None else b'],"usage":' + _usage(*usage) + b"}\n\n"
        return (
            self._head
            + b'{"index":%d,' % index
            + self._text_key
            + _dumps(text, ensure_ascii=False).encode()
            + close
            + b',"logprobs":null,"finish_reason":'
            + _finish(finish)
            + b"}"
            + tail
        )

    def finish(self, index: int, finish: FinishReason, usage: tuple[int, int] | None = None) -> bytes:
        """A closing chunk with no text (a choice that produced no token, or an aborted one)."""
        return self.token(index, "", finish, usage)

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The final ``include_usage`` chunk: no choices, only usage."""
        return self._head + b'],"usage":' + _usage(prompt_tokens, completion_tokens) + b"}\n\n"

    def error(self, message: str, err_type: str, code: int) -> bytes:
        """An error during a stream: sent as data, the stream still ends with [DONE]."""
        body = {"error": {"message": message, "type": err_type, "param": None, "code": code}}
        return b"data: " + _dumps(body).encode() + b"\n\n"
