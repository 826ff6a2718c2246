"""The OpenAI response bodies of the completion routes, in one place: streamed chunks and whole responses.

Streamed chunks are built from per-request byte templates. NOTE: the per-token path never builds a dict or calls a full JSON encoder on a chunk: the parts
that are the same for every token of a request (id, created, model, object) are encoded once;
per token only the choice index, the JSON-escaped token text and the finish reason are filled in.
tests/api/test_sse.py checks the bytes parse to exactly what a dict-based encoder would produce.

Requests that ask for more (logprobs, echo, tool calls) get their choices built as dicts and
encoded into the same per-request head (:meth:`ChunkTemplates.choice`): that costs only them.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmsim.llm.logprobs import token_logprobs
from llmsim.types import FinishReason, GenerationPlan, ToolCall, ToolCallDelta

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

    __slots__ = ("_head", "_plain", "_plain_tail", "_role", "_text_key", "_token")

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
        # Almost every token (no finish reason, no usage): the bytes before and after its JSON text,
        # so the chunk is two concatenations instead of a %-format of the whole template.
        self._text_key = b'"delta":{"content":' if chat else b'"text":'
        self._plain: dict[int, bytes] = {}
        self._plain_tail = (b"}" if chat else b"") + b',"logprobs":null,"finish_reason":null}]}\n\n'

    def choice(self, choice_json: bytes, usage: tuple[int, int] | None = None) -> bytes:
        """A chunk carrying one choice given as JSON (the requests that ask for logprobs, echo or tools)."""
        return self._head + choice_json + b"]" + (b"" if usage is None else b',"usage":' + _usage(*usage)) + b"}\n\n"

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
        if finish is None and usage is None:
            # Per-token path: the plain token of choice ``index``.
            plain = self._plain.get(index)
            if plain is None:
                plain = self._plain[index] = self._head + b'{"index":%d,' % index + self._text_key
            return plain + _encode_text(text).encode() + self._plain_tail
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


def dumps_compact(value: Any) -> bytes:
    """JSON as the chunks are written: no spaces, non-ASCII as is."""
    return _dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _utf8(token: str) -> list[int]:
    return list(token.encode("utf-8", "surrogatepass"))


def chat_logprobs_entry(token: str, position: int, k: int) -> dict[str, Any]:
    """One token's entry of a chat ``logprobs.content``: its logprob, bytes, and the top ``k`` (itself first)."""
    logprob, top = token_logprobs(token, position, k)
    return {
        "token": token,
        "logprob": logprob,
        "bytes": _utf8(token),
        "top_logprobs": [{"token": t, "logprob": lp, "bytes": _utf8(t)} for t, lp in top],
    }


def completion_logprobs(
    output: Sequence[str], k: int, *, prompt: Sequence[str] = (), first_position: int = 0, text_offset: int = 0
) -> dict[str, Any]:
    """A text completion's ``logprobs`` (vLLM's CompletionLogProbs) for echoed ``prompt`` tokens, then ``output`` tokens.

    ``top_logprobs[i]`` holds the first ``k + 1`` candidates of vLLM's engine dict (the sampled
    token first, then the top k, the sampled one counted once): ``max(k, 1)`` entries here, where
    the sampled token is always the top one. The prompt's first token has none (nothing precedes
    it), as in vLLM. ``text_offset`` starts at ``text_offset`` and grows by each token's length.
    Output tokens are scored at their position in the answer, from ``first_position``.
    """
    offsets: list[int] = []
    values: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offset = text_offset
    scored = [(i, t) for i, t in enumerate(prompt)] + [(first_position + j, t) for j, t in enumerate(output)]
    for n, (position, token) in enumerate(scored):
        offsets.append(offset)
        offset += len(token)
        if n == 0 and prompt:
            values.append(None)
            tops.append(None)
            continue
        logprob, top = token_logprobs(token, position, max(k, 1))
        values.append(logprob)
        tops.append(dict(top))
    return {"text_offset": offsets, "token_logprobs": values, "tokens": [*prompt, *output], "top_logprobs": tops}


@dataclass(frozen=True, slots=True)
class Echo:
    """A completions prompt said back before the answer (``echo: true``): its text and tokens."""

    text: str
    tokens: tuple[str, ...]


def finish_reason(plan: GenerationPlan, *, named_tool: bool) -> str:
    """vLLM's: ``tool_calls`` when the answer is tool calls that ended by themselves, unless a named tool was forced."""
    if plan.tool_calls and plan.finish_reason is FinishReason.STOP and not named_tool:
        return "tool_calls"
    return plan.finish_reason.value


def tool_call_json(call: ToolCall, call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def tool_call_delta_json(delta: ToolCallDelta, call_id: str) -> dict[str, Any]:
    """A streamed tool-call delta as vLLM writes it: id, type and name first, then argument pieces."""
    if delta.name is not None:
        function: dict[str, Any] = {"name": delta.name}
        if delta.arguments:
            function["arguments"] = delta.arguments
        return {"id": call_id, "type": "function", "index": delta.index, "function": function}
    return {"index": delta.index, "function": {"arguments": delta.arguments}}


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
    logprobs: int | None = None,
    echo: Sequence[Echo] | None = None,
    named_tool: bool = False,
    tool_call_ids: Sequence[Sequence[str]] = (),
) -> dict[str, Any]:
    """A whole (non-streamed) ``chat.completion`` or ``text_completion``; ``texts`` holds each choice's tokens.

    ``logprobs``: top alternatives per token (None: no logprobs); ``echo``: per choice, the
    prompt said back (completions); ``tool_call_ids``: per choice, the ids of its tool calls.
    ``cached_tokens`` (vLLM's --enable-prompt-tokens-details): ``usage.prompt_tokens_details``.
    """
    choices: list[dict[str, Any]] = []
    for i, (tokens, plan) in enumerate(zip(texts, plans, strict=True)):
        text = "".join(tokens)
        finish = finish_reason(plan, named_tool=named_tool)
        if chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if plan.tool_calls and len(tokens) == plan.num_output_tokens:
                ids = tool_call_ids[i]
                message = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [tool_call_json(c, ids[j]) for j, c in enumerate(plan.tool_calls)],
                }
            lp = None
            if logprobs is not None:
                lp = {"content": [chat_logprobs_entry(t, pos, logprobs) for pos, t in enumerate(tokens)]}
            choices.append({"index": i, "message": message, "logprobs": lp, "finish_reason": finish})
        else:
            said = echo[i] if echo is not None else None
            clp = None
            if logprobs is not None:
                clp = completion_logprobs(tokens, logprobs, prompt=said.tokens if said is not None else ())
            full = (said.text if said is not None else "") + text
            choices.append({"index": i, "text": full, "logprobs": clp, "finish_reason": finish})
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
