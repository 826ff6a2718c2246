"""The streamed bytes, their split into writes, and disconnects, on the app in virtual loop time.

The fixed engine runs with TTFT 100 ms and ITL 10 ms on the loop's (virtual) clock, so every write
has an exact expected time. Expected bytes are built here by JSON-encoding the chunk dicts.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from starlette.responses import StreamingResponse

from llmsim.api.completion_bodies import ChunkTemplates
from llmsim.api.completion_stream import CompletionStream
from llmsim.api.routes import SSE_HEADERS
from llmsim.engine import MonotonicClock
from llmsim.engine.errors import EngineStopped
from llmsim.runtime import Runtime, build_runtime
from llmsim.transport.sse_response import SSEResponse, _resume
from llmsim.types import FinishReason, GenerationPlan, TokenEvent
from tests.api.asgi_driver import Exchange, call, respond

CONFIG = """
version: 1
models:
  - name: fixed
    engine: fixed
    context_length: 1024
    latency: {ttft_overhead_ms: 100, itl_ms: 10}
"""
RESPONSES = """
version: 1
responses: []
default:
  content: "Hi there, how can I help?"
"""
# The script split by hand: words with their leading space, punctuation on its own.
TOKENS = ["Hi", " there", ",", " how", " can", " I", " help", "?"]
TTFT, ITL = 0.100, 0.010
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


@pytest.fixture
async def runtime(tmp_path: Path) -> Runtime:
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    clock = MonotonicClock(now=asyncio.get_running_loop().time)
    return build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml", clock=clock)


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": "fixed", "messages": [{"role": "user", "content": "hello"}], "stream": True, **kw}


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(
        b"data: " + json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n" for e in events
    )


DONE = b"data: [DONE]\n\n"


def normaliser(body: bytes) -> Callable[[bytes], bytes]:
    """``body`` holds one id and one ``created`` throughout: replace them by ``ID`` and 0 (in it or in a part)."""
    ids = set(re.findall(rb'"id":"((?:chatcmpl|cmpl)-[0-9a-f]{32})"', body))
    created = set(re.findall(rb'"created":(\d+),', body))
    assert len(ids) == 1
    assert len(created) == 1
    request_id, stamp = ids.pop(), b'"created":' + created.pop() + b","
    return lambda part: part.replace(request_id, b"ID").replace(stamp, b'"created":0,')


def normalise(body: bytes) -> bytes:
    return normaliser(body)(body)


def chat_chunk(choice: dict[str, Any]) -> dict[str, Any]:
    return {"id": "ID", "object": "chat.completion.chunk", "created": 0, "model": "fixed", "choices": [choice]}


def role_chunk() -> dict[str, Any]:
    return chat_chunk(
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    )


def chat_token(i: int) -> dict[str, Any]:
    finish = "stop" if i == len(TOKENS) - 1 else None
    return chat_chunk({"index": 0, "delta": {"content": TOKENS[i]}, "logprobs": None, "finish_reason": finish})


def lag_recorder(runtime: Runtime) -> list[Sequence[float]]:
    seen: list[Sequence[float]] = []
    runtime.state.models["fixed"].observe_lags = seen.append
    return seen


def times(ex: Exchange, t0: float) -> list[float]:
    return [t - t0 for t, m in ex.sent if m["type"] == "http.response.body"]


@pytest.mark.looptime
async def test_chat_stream_bytes_and_one_write_per_token(runtime: Runtime) -> None:
    t0 = asyncio.get_running_loop().time()
    ex = await call(runtime.app, CHAT, chat())
    assert ex.start["status"] == 200
    expected = sse(role_chunk(), *(chat_token(i) for i in range(len(TOKENS)))) + DONE
    assert normalise(ex.body) == expected
    # The role chunk rides with the first token; then one write per token; the end in one write.
    norm = normaliser(ex.body)
    writes = [norm(w) for w in ex.writes]
    assert writes == [
        sse(role_chunk(), chat_token(0)),
        *(sse(chat_token(i)) for i in range(1, len(TOKENS))),
        DONE,
    ]
    last = TTFT + (len(TOKENS) - 1) * ITL
    assert times(ex, t0) == pytest.approx([TTFT + i * ITL for i in range(len(TOKENS))] + [last], abs=1e-5)
    assert ex.complete


@pytest.mark.looptime
async def test_completion_stream_with_usage_bytes(runtime: Runtime) -> None:
    # Token ids count as given: 5 prompt tokens (and match as empty text: the default answer).
    body = {
        "model": "fixed",
        "prompt": [1, 2, 3, 4, 5],
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    ex = await call(runtime.app, COMPLETIONS, body)
    head = {"id": "ID", "object": "text_completion", "created": 0, "model": "fixed"}

    def usage(completion: int) -> dict[str, Any]:
        return {
            "prompt_tokens": 5,
            "total_tokens": 5 + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": None,
        }

    chunks = [
        {
            **head,
            "choices": [
                {"index": 0, "text": t, "logprobs": None, "finish_reason": "stop" if i == len(TOKENS) - 1 else None}
            ],
            "usage": usage(i + 1),
        }
        for i, t in enumerate(TOKENS)
    ]
    expected = sse(*chunks, {**head, "choices": [], "usage": usage(len(TOKENS))}) + DONE
    assert normalise(ex.body) == expected


@pytest.mark.looptime
async def test_n_choices_each_keep_their_tokens_in_order(runtime: Runtime) -> None:
    ex = await call(runtime.app, COMPLETIONS, {"model": "fixed", "prompt": "x", "n": 2, "stream": True})
    assert ex.body.endswith(DONE)
    events = [json.loads(e[len(b"data: ") :]) for e in ex.body.split(b"\n\n")[:-2]]
    for index in (0, 1):
        mine = [e["choices"][0] for e in events if e["choices"][0]["index"] == index]
        assert [c["text"] for c in mine] == TOKENS
        assert [c["finish_reason"] for c in mine] == [None] * (len(TOKENS) - 1) + ["stop"]
    assert len(events) == 2 * len(TOKENS)


@pytest.mark.looptime
async def test_a_choice_without_tokens_still_gets_its_role_and_finish(runtime: Runtime) -> None:
    # The stop sequence is the script's first word: nothing is said, the finish reason is "stop".
    ex = await call(runtime.app, CHAT, chat(stop=["Hi"]))
    empty = chat_chunk({"index": 0, "delta": {"content": ""}, "logprobs": None, "finish_reason": "stop"})
    norm = normaliser(ex.body)
    assert [norm(w) for w in ex.writes] == [sse(role_chunk(), empty) + DONE]


@pytest.mark.looptime
async def test_headers_are_those_of_a_starlette_streaming_response(runtime: Runtime) -> None:
    ex = await call(runtime.app, CHAT, chat())
    reference = StreamingResponse(iter([b""]), media_type="text/event-stream", headers=SSE_HEADERS)
    # Plus the request id LlmsimApp adds to every response (a new uuid4 hex when the client sent none).
    *headers, (name, value) = ex.start["headers"]
    assert headers == reference.raw_headers
    assert name == b"x-request-id"
    assert re.fullmatch(rb"[0-9a-f]{32}", value)


@pytest.mark.looptime
async def test_tokens_already_due_go_out_in_one_write(runtime: Runtime) -> None:
    lags = lag_recorder(runtime)
    t0 = asyncio.get_running_loop().time()
    # The write of token 1 (at 110 ms) takes 35 ms: back at 145 ms, tokens 2, 3 and 4 (120, 130,
    # 140 ms) are due and leave together; token 5 (150 ms) is waited for and written alone.
    ex = await call(runtime.app, CHAT, chat(), slow_writes={1: 0.035})
    norm = normaliser(ex.body)
    writes = [norm(w) for w in ex.writes]
    assert writes == [
        sse(role_chunk(), chat_token(0)),
        sse(chat_token(1)),
        sse(chat_token(2), chat_token(3), chat_token(4)),
        sse(chat_token(5)),
        sse(chat_token(6)),
        sse(chat_token(7)),
        DONE,
    ]
    assert times(ex, t0) == pytest.approx([0.100, 0.110, 0.145, 0.150, 0.160, 0.170, 0.170], abs=1e-5)
    # Same bytes as an unhurried stream.
    assert b"".join(writes) == sse(role_chunk(), *(chat_token(i) for i in range(len(TOKENS)))) + DONE
    ((observed,),) = [lags]
    assert list(observed) == pytest.approx([0, 0, 0.025, 0.015, 0.005, 0, 0, 0], abs=1e-5)


@pytest.mark.looptime
async def test_a_slow_upload_is_absorbed_by_the_arrival_stamp(runtime: Runtime) -> None:
    t0 = asyncio.get_running_loop().time()
    ex = await call(runtime.app, CHAT, chat(), upload_s=0.030)
    # The stamp is taken when the request comes in, not when its body is read: TTFT stays 100 ms.
    assert times(ex, t0)[0] == pytest.approx(TTFT, abs=1e-5)


@pytest.mark.looptime
async def test_disconnect_closes_the_engine_iterator_at_once(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    lags = lag_recorder(runtime)
    t0 = loop.time()
    ex = Exchange()
    loop.call_later(0.125, ex.disconnect.set)  # between token 2 (120 ms) and token 3 (130 ms)
    await call(runtime.app, CHAT, chat(), ex)
    assert loop.time() - t0 == pytest.approx(0.125, abs=1e-5)
    assert len(ex.writes) == 3
    assert not ex.complete
    assert runtime.state.models["fixed"].engine.snapshot().num_running == 0
    summary = runtime.metrics.summary()["models"]["fixed"]
    assert summary["requests"]["abort"] == 1
    assert summary["generation_tokens"] == 3
    assert [len(x) for x in lags] == [3]


@pytest.mark.looptime
async def test_disconnect_during_ttft(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    ex = Exchange()
    loop.call_later(0.050, ex.disconnect.set)
    await call(runtime.app, CHAT, chat(), ex)
    assert loop.time() - t0 == pytest.approx(0.050, abs=1e-5)
    assert ex.writes == []
    assert runtime.metrics.summary()["models"]["fixed"]["requests"]["abort"] == 1


@pytest.mark.looptime
async def test_a_cancellation_from_elsewhere_is_not_swallowed(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(call(runtime.app, CHAT, chat()))
    loop.call_later(0.125, task.cancel)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert runtime.state.models["fixed"].engine.snapshot().num_running == 0
    assert runtime.metrics.summary()["models"]["fixed"]["requests"]["abort"] == 1


async def test_an_engine_failing_mid_stream_is_an_error_event_then_done() -> None:
    # Headers and a first token are out when the engine's step loop dies: like vLLM, the error is
    # an event and the stream still ends with [DONE]; no usage chunk.
    async def fail_after_one() -> AsyncGenerator[TokenEvent, None]:
        yield TokenEvent(0, "a", 0.0)
        raise EngineStopped("the scheduler step loop failed")

    plan = GenerationPlan(3, ("a", "b"), FinishReason.STOP, "e")
    seen: list[Sequence[float]] = []
    encoder = CompletionStream(
        ChunkTemplates("cmpl-1", 1, "m", chat=False),
        [plan],
        chat=False,
        prompt_tokens=3,
        continuous_usage=False,
        include_usage=True,
        now=lambda: 0.0,
        observe_lags=seen.append,
    )
    ex = await respond(SSEResponse(fail_after_one(), partial(encoder.token, 0), encoder))
    token = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "text": "a", "logprobs": None, "finish_reason": None}],
    }
    error = {
        "error": {
            "message": "the scheduler step loop failed",
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
    }
    assert ex.start["status"] == 200
    assert ex.body == sse(token) + b"data: " + json.dumps(error).encode() + b"\n\n" + DONE
    assert ex.complete
    assert seen == [[0.0]]


async def test_an_unexpected_error_is_a_plain_500_and_propagates(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken:
        vocab_size = 2**31

        def generate(self, request: Any) -> Any:
            raise RuntimeError("boom")

    monkeypatch.setattr(runtime.state.models["fixed"], "generator", Broken())
    ex = Exchange()
    with pytest.raises(RuntimeError, match="boom"):
        await call(runtime.app, CHAT, chat(), ex)
    assert ex.start["status"] == 500
    assert ex.body == b"Internal Server Error"


@pytest.mark.looptime
async def test_resume_finishes_an_await_begun_by_hand() -> None:
    steps: list[str] = []

    async def work() -> str:
        await asyncio.sleep(0.010)
        steps.append("first")
        await asyncio.sleep(0.010)
        steps.append("second")
        return "done"

    step = work()
    waiting_on = step.send(None)
    assert await _resume(step, waiting_on) == "done"
    assert steps == ["first", "second"]


@pytest.mark.looptime
async def test_resume_passes_a_cancellation_down() -> None:
    cleaned: list[bool] = []

    async def work() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.append(True)

    async def outer() -> None:
        step = work()
        await _resume(step, step.send(None))

    task = asyncio.create_task(outer())
    await asyncio.sleep(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]


@pytest.mark.looptime
async def test_responses_announce_themselves_at_once_messages_with_the_first_token(runtime: Runtime) -> None:
    # As vLLM: response.created and response.in_progress before the engine's first token; a
    # message's message_start rides with its first token (its chat stream's first chunk).
    t0 = asyncio.get_running_loop().time()
    ex = await call(runtime.app, "/v1/responses", {"model": "fixed", "input": "hello", "stream": True})
    assert ex.start["status"] == 200
    first, token = ex.writes[:2]
    assert [line.split(b": ", 1)[1] for line in first.split(b"\n") if line.startswith(b"event: ")] == [
        b"response.created",
        b"response.in_progress",
    ]
    assert token.startswith(b"event: response.output_item.added\n")
    assert times(ex, t0)[:2] == pytest.approx([0.0, TTFT], abs=1e-5)
    t1 = asyncio.get_running_loop().time()
    body = {"model": "fixed", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}], "stream": True}
    ex = await call(runtime.app, "/v1/messages", body)
    assert ex.writes[0].startswith(b"event: message_start\n")
    assert times(ex, t1)[0] == pytest.approx(TTFT, abs=1e-5)
    assert ex.complete
