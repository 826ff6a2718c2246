"""Tokens pushed by the scheduler's step loop straight into each stream's response (in virtual loop time).

A step releases one token to every running stream at its deadline; the response takes it in the
step loop's own pass and writes it at once (no consumer task wakes per token). These tests check
what that must never change: the bytes, one write per token at the step's deadline, order when a
write has to wait, and that no stream is always written last.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
from pathlib import Path
from typing import Any

import pytest

from llmsim.api.completion_bodies import ChunkTemplates
from llmsim.api.completion_stream import CompletionStream
from llmsim.engine import MonotonicClock
from llmsim.runtime import Runtime, build_runtime
from llmsim.transport.sse_response import SSEResponse
from llmsim.types import FinishReason, GenerationPlan, TokenEvent
from tests.api.asgi_driver import Exchange, call

# A slow memory-bound GPU so steps are long: 1e9 params x 2 B / 100 GB/s = 20 ms per decode step.
CONFIG = """
version: 1
hardware:
  slow-gpu: {hbm_gib: 24, memory_bandwidth_gbps: 100, peak_tflops: 100}
models:
  - name: sim
    engine: scheduler
    hardware: slow-gpu
    context_length: 4096
    weights: {parameters_billions: 1.0, bytes_per_parameter: 2}
    kv_cache: {bytes_per_token: 12288, block_size: 16, gpu_memory_utilization: 0.9}
"""
RESPONSES = """
version: 1
responses: []
default:
  synthetic: {tokens: [6, 6]}
"""


@pytest.fixture
async def runtime(tmp_path: Path) -> Runtime:
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    clock = MonotonicClock(now=asyncio.get_running_loop().time)
    runtime = build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml", clock=clock)
    await runtime.state.models["sim"].engine.start()
    return runtime


def body(i: int) -> dict[str, Any]:
    return {"model": "sim", "prompt": f"request {i}", "max_tokens": 6, "stream": True}


def token_writes(ex: Exchange) -> list[tuple[float, bytes]]:
    """(time, bytes) of every write that carries a token chunk."""
    return [(t, m["body"]) for t, m in ex.sent if m["type"] == "http.response.body" and b'"text":' in m["body"]]


def texts(ex: Exchange) -> list[str]:
    out = []
    for part in ex.body.split(b"\n\n"):
        if part.startswith(b"data: {"):
            choices = json.loads(part[len(b"data: ") :])["choices"]
            out += [c["text"] for c in choices]
    return out


@pytest.mark.looptime
async def test_pushed_tokens_leave_at_the_step_deadlines_one_write_each(runtime: Runtime) -> None:
    engine = runtime.state.models["sim"].engine
    exchanges = await asyncio.gather(*(call(runtime.app, "/v1/completions", body(i)) for i in range(8)))
    steps = {round(t, 9) for ex in exchanges for t, _ in token_writes(ex)}
    for ex in exchanges:
        writes = token_writes(ex)
        assert len(writes) == 6  # one write per token, nothing coalesced
        assert ex.body.endswith(b"data: [DONE]\n\n")
        assert len(texts(ex)) == 6  # the finish reason rides on the last token's chunk
    # All 8 streams share every step: their k-th tokens leave at the same instant, the step's
    # deadline (virtual time: no lag), and consecutive steps are one decode step (~20 ms) apart.
    kth = [{round(token_writes(ex)[k][0], 9) for ex in exchanges} for k in range(6)]
    assert all(len(times) == 1 for times in kth)
    gaps = [min(kth[k + 1]) - min(kth[k]) for k in range(1, 5)]
    assert gaps == pytest.approx([0.020] * 4, rel=0.01)
    assert len(steps) == 6
    await engine.stop()


@pytest.mark.looptime
async def test_a_write_that_waits_queues_the_next_tokens_in_order(runtime: Runtime) -> None:
    engine = runtime.state.models["sim"].engine
    # The same request twice, alone: the script answers it the same way both times.
    reference = await call(runtime.app, "/v1/completions", body(0))
    # Now its second token write waits 70 ms, as a paused transport would: three more steps
    # release tokens meanwhile, which must queue behind it.
    slow = await call(runtime.app, "/v1/completions", body(0), slow_writes={1: 0.070})
    assert texts(slow) == texts(reference)
    assert slow.body.endswith(b"data: [DONE]\n\n")
    writes = token_writes(slow)
    # Tokens 2-4 were released (20 ms apart) while write 1 waited: none went out before it
    # returned, all three right after it; token 5 is back on its step.
    resumed = writes[1][0] + 0.070
    after = [(t, chunk.count(b'"text":')) for t, chunk in writes[2:]]
    assert [n for t, n in after if t == pytest.approx(resumed, abs=1e-6)] in ([3], [1, 2], [2, 1], [1, 1, 1])
    assert sum(n for _, n in after) == 4
    await engine.stop()


@pytest.mark.looptime
async def test_no_stream_is_always_written_last_in_its_step(runtime: Runtime) -> None:
    engine = runtime.state.models["sim"].engine
    order: list[int] = []
    exchanges = [Exchange() for _ in range(4)]
    real_append = [ex.sent.append for ex in exchanges]

    def recorder(i: int) -> Any:
        def append(item: tuple[float, Any]) -> None:
            if item[1]["type"] == "http.response.body" and b'"text":' in item[1].get("body", b""):
                order.append(i)
            real_append[i](item)

        return append

    for i, ex in enumerate(exchanges):
        ex.sent = _Recording(recorder(i))
    await asyncio.gather(*(call(runtime.app, "/v1/completions", body(i), ex) for i, ex in enumerate(exchanges)))
    steps = [order[k : k + 4] for k in range(0, len(order), 4)]
    assert all(sorted(s) == [0, 1, 2, 3] for s in steps)
    lasts = {s[-1] for s in steps}
    assert len(lasts) > 1
    await engine.stop()


class _Recording(list[tuple[float, Any]]):
    def __init__(self, hook: Any) -> None:
        super().__init__()
        self._hook = hook

    def append(self, item: tuple[float, Any]) -> None:
        self._hook(item)
        super().append(item)


def normalised_writes(ex: Exchange) -> list[bytes]:
    """The body's writes with its request id and ``created`` stamp replaced (they differ per request)."""
    request_id = re.search(rb'"id":"((?:chatcmpl|cmpl)-[0-9a-f]{32})"', ex.body)
    created = re.search(rb'"created":(\d+),', ex.body)
    assert request_id is not None
    assert created is not None
    return [w.replace(request_id.group(1), b"ID").replace(created.group(0), b'"created":0,') for w in ex.writes]


@pytest.mark.looptime
@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("/v1/completions", {"prompt": "request", "stream_options": {"include_usage": True}}),
        (
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "request"}],
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            },
        ),
    ],
)
async def test_prepared_chunks_are_the_bytes_the_release_would_encode(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, path: str, fields: dict[str, Any]
) -> None:
    """Tokens encoded ahead of their release (while the step runs) go out byte for byte as when
    each is encoded at its release, in the same writes at the same times."""
    engine = runtime.state.models["sim"].engine
    payload = {"model": "sim", "max_tokens": 6, "stream": True, **fields}
    prepared: list[int] = []
    real_prepare = SSEResponse._prepare

    def counting_prepare(self: SSEResponse[TokenEvent], event: TokenEvent) -> None:
        prepared.append(event.index)
        real_prepare(self, event)

    monkeypatch.setattr(SSEResponse, "_prepare", counting_prepare)
    t0 = asyncio.get_running_loop().time()
    ahead = await asyncio.gather(*(call(runtime.app, path, payload) for _ in range(4)))
    assert sorted(prepared) == sorted(list(range(6)) * 4)  # every token was made ahead

    monkeypatch.setattr(SSEResponse, "_prepare", lambda self, event: None)
    await asyncio.sleep(1.0)  # an idle engine: the next run starts a fresh timeline
    t1 = asyncio.get_running_loop().time()
    at_release = await asyncio.gather(*(call(runtime.app, path, payload) for _ in range(4)))
    for a, b in zip(ahead, at_release, strict=True):
        assert normalised_writes(a) == normalised_writes(b)
        assert [t - t0 for t, _ in a.sent] == pytest.approx([t - t1 for t, _ in b.sent], abs=1e-6)
        assert len(a.writes) == 7  # one write per token, then the usage chunk and [DONE]
    await engine.stop()


def test_a_prepared_token_that_never_leaves_changes_nothing_the_stream_says() -> None:
    plans = [GenerationPlan(3, ("Hi", "!"), FinishReason.STOP, "e")]

    def stream() -> CompletionStream:
        chunks = ChunkTemplates("chatcmpl-" + "0" * 32, 0, "m", chat=True)
        return CompletionStream(
            chunks,
            plans,
            chat=True,
            prompt_tokens=3,
            continuous_usage=False,
            include_usage=True,
            now=lambda: 1.0,
            observe_lags=lambda lags: None,
        )

    prepared = stream()
    first = prepared.chunk(0, TokenEvent(0, "Hi", 1.0))  # then the request is aborted before the deadline
    tail = prepared.tail(aborted=True)
    assert tail == stream().tail(aborted=True)
    # Nothing was said: the choice opens, ends with "abort", and no completion token is counted.
    events = [json.loads(part[len(b"data: ") :]) for part in tail.split(b"\n\n") if part.startswith(b"data: {")]
    assert [e["choices"] for e in events] == [
        [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}],
        [{"index": 0, "delta": {"content": ""}, "logprobs": None, "finish_reason": "abort"}],
        [],
    ]
    assert events[-1]["usage"]["completion_tokens"] == 0
    # A token's bytes made ahead are those made at its release, and count() then records what token() does.
    at_release = stream()
    assert first == at_release.token(0, TokenEvent(0, "Hi", 1.0))
    prepared.count(0, TokenEvent(0, "Hi", 1.0))
    assert prepared.chunk(0, TokenEvent(1, "!", 1.0)) == at_release.token(0, TokenEvent(1, "!", 1.0))
    prepared.count(0, TokenEvent(1, "!", 1.0))
    assert prepared.tail() == at_release.tail()


def test_a_completion_stream_is_freed_without_the_garbage_collector() -> None:
    """No reference cycle through its encoder: the stream goes when its response does, not in a
    collector pause that would land in some later step's release."""
    gc.collect()
    gc.disable()
    try:
        chunks = ChunkTemplates("cmpl-" + "0" * 32, 0, "m", chat=False)
        plans = [GenerationPlan(3, ("Hi",), FinishReason.STOP, "e")]
        stream = CompletionStream(
            chunks,
            plans,
            chat=False,
            prompt_tokens=3,
            continuous_usage=False,
            include_usage=False,
            now=lambda: 1.0,
            observe_lags=lambda lags: None,
        )
        encode = stream.encode
        assert encode(0, TokenEvent(0, "Hi", 1.0)).startswith(b"data: {")
        del stream, encode
        # Nothing left for the collector: the stream was freed by reference counting.
        assert gc.collect() == 0
    finally:
        gc.enable()
