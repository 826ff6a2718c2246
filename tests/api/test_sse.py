"""Prebuilt SSE templates produce exactly what encoding the OpenAI chunk dicts would."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmsim.api.completion_bodies import DONE, ChunkTemplates, dumps_compact
from llmsim.api.completion_stream import CompletionStream
from llmsim.types import FinishReason, GenerationPlan


def parse(chunk: bytes) -> Any:
    assert chunk.startswith(b"data: ")
    assert chunk.endswith(b"\n\n")
    assert chunk.count(b"\n\n") == 1
    return json.loads(chunk[len(b"data: ") : -2])


HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": 'm"odel'}


@pytest.mark.slow
@given(text=st.text(), index=st.integers(0, 200), finish=st.sampled_from([None, *FinishReason]))
def test_chat_token_chunk_matches_dict_encoding(text: str, index: int, finish: FinishReason | None) -> None:
    t = ChunkTemplates("chatcmpl-1", 1700000000, 'm"odel', chat=True)
    got = parse(t.token(index, text, finish))
    choice = {
        "index": index,
        "delta": {"content": text},
        "logprobs": None,
        "finish_reason": None if finish is None else finish.value,
    }
    assert got == {**HEAD, "choices": [choice]}


@given(text=st.text(), usage=st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)))
def test_text_completion_chunk_with_continuous_usage(text: str, usage: tuple[int, int]) -> None:
    t = ChunkTemplates("cmpl-1", 5, "m", chat=False)
    got = parse(t.token(3, text, FinishReason.LENGTH, usage))
    prompt, completion = usage
    assert got == {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 5,
        "model": "m",
        "choices": [{"index": 3, "text": text, "logprobs": None, "finish_reason": "length"}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": None,
        },
    }


@given(text=st.text(), index=st.integers(0, 200))
def test_plain_text_completion_chunk_matches_dict_encoding(text: str, index: int) -> None:
    t = ChunkTemplates("cmpl-1", 5, 'm"odel', chat=False)
    first, again = t.token(index, text), t.token(index, text)  # the second from the per-index prefix
    assert first == again
    assert parse(first) == {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 5,
        "model": 'm"odel',
        "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": None}],
    }


def test_role_usage_error_and_done_chunks() -> None:
    t = ChunkTemplates("chatcmpl-1", 1700000000, 'm"odel', chat=True)
    assert parse(t.role(1))["choices"] == [
        {"index": 1, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    ]
    final = parse(t.usage(7, 5))
    assert final["choices"] == []
    assert final["usage"]["total_tokens"] == 12
    assert parse(t.error("boom", "InternalServerError", 500)) == {
        "error": {"message": "boom", "type": "InternalServerError", "param": None, "code": 500}
    }
    assert DONE == b"data: [DONE]\n\n"


@pytest.mark.parametrize("text", ["\n", '"', "\\", "日本", "\u2028", "\x00"])
def test_awkward_token_texts_stay_one_event(text: str) -> None:
    chunk = ChunkTemplates("x", 1, "m", chat=True).token(0, text)
    assert parse(chunk)["choices"][0]["delta"]["content"] == text


def test_percent_signs_in_id_and_model_stay_literal() -> None:
    # The templates are %-formatted per token: a '%' in the request id or model name must not be a directive.
    t = ChunkTemplates("cmpl-%d%s", 9, "m%%o%sdel", chat=False)
    got = parse(t.token(2, "50%", FinishReason.STOP, (3, 1)))
    assert (got["id"], got["model"]) == ("cmpl-%d%s", "m%%o%sdel")
    assert got["choices"][0]["text"] == "50%"
    # The plain token (no finish reason, no usage) is concatenated, not formatted: the same bytes.
    plain = parse(t.token(2, "50%"))
    assert (plain["id"], plain["model"]) == ("cmpl-%d%s", "m%%o%sdel")
    assert plain["choices"] == [{"index": 2, "text": "50%", "logprobs": None, "finish_reason": None}]
    assert parse(ChunkTemplates("c%s", 1, "%d", chat=True).role(0))["id"] == "c%s"


@given(
    text=st.text(),
    index=st.integers(0, 200),
    top=st.lists(st.tuples(st.text(), st.floats(allow_nan=False, allow_infinity=False)), max_size=3),
    usage=st.none() | st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
)
def test_rich_choice_chunk_matches_dict_encoding(
    text: str, index: int, top: list[tuple[str, float]], usage: tuple[int, int] | None
) -> None:
    t = ChunkTemplates("chatcmpl-1", 1700000000, 'm"odel', chat=True)
    choice = {
        "index": index,
        "delta": {"content": text},
        "logprobs": {"content": [{"token": tok, "logprob": lp, "bytes": None, "top_logprobs": []} for tok, lp in top]},
        "finish_reason": None,
    }
    got = parse(t.choice(dumps_compact(choice), usage))
    expected: dict[str, Any] = {**HEAD, "choices": [choice]}
    if usage is not None:
        expected["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
            "prompt_tokens_details": None,
        }
    assert got == expected


def test_only_requests_asking_for_more_leave_the_template_path() -> None:
    plan = GenerationPlan(3, ("a", "b"), FinishReason.STOP, "e")

    def stream(**kw: Any) -> CompletionStream:
        chunks = ChunkTemplates("c", 1, "m", chat=True)
        return CompletionStream(
            chunks,
            [plan],
            chat=True,
            prompt_tokens=3,
            continuous_usage=False,
            include_usage=False,
            now=lambda: 0.0,
            observe_lags=lambda lags: None,
            **kw,
        )

    plain = stream()
    assert plain.encode == plain.token
    rich = stream(logprobs=0)
    assert rich.encode == rich.rich_token
