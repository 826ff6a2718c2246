"""A request's output (prompts × n × max_tokens) is bounded, and a large one is produced without holding the loop.

The limit is refused up front with OpenAI's error shape; under it, the work that grows with the
output (planning, delivering the tokens of many choices, the body) gives the event loop turns.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from llmsim.api import choice_events, routes
from llmsim.api.output_limit import output_bound
from llmsim.runtime import Runtime, build_runtime
from llmsim.types import GenerationRequest, Message, TokenEvent
from tests.api.asgi_driver import Exchange, call

CONFIG = """
version: 1
models:
  - name: instant-model
    engine: instant
    context_length: 32768
"""
RESPONSES = """
version: 1
responses:
  - id: long
    match: {contains: "story"}
    synthetic: {tokens: [300, 300]}
default:
  content: "I am a simulator."
"""
ISSUE_REQUEST = {"model": "instant-model", "prompt": "hi", "n": 128, "max_tokens": 30000, "ignore_eos": True}


def runtime(tmp_path: Path, limit: int) -> Runtime:
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    return build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml", max_request_output_tokens=limit)


def status(ex: Exchange) -> int:
    code: int = ex.start["status"]
    return code


def request(n: int = 1, max_tokens: int | None = None, ignore_eos: bool = False) -> GenerationRequest:
    return GenerationRequest(
        messages=(Message("user", "hi"),), model="m", max_tokens=max_tokens, n=n, ignore_eos=ignore_eos
    )


def test_the_bound_is_prompts_times_n_times_max_tokens() -> None:
    assert output_bound([request(n=128, max_tokens=30000)], 32768) == 3_840_000
    assert output_bound([request(n=128, max_tokens=30000)] * 1000, 32768) == 3_840_000_000
    # ignore_eos without max_tokens fills the context; a scripted answer counts once planned.
    assert output_bound([request(n=4, ignore_eos=True)], 32768) == 4 * 32768
    assert output_bound([request(n=4)], 32768) == 0


async def test_max_tokens_past_the_context_gets_vllms_own_error_first(tmp_path: Path) -> None:
    rt = runtime(tmp_path, 1000)
    ex = await call(rt.app, "/v1/completions", {**ISSUE_REQUEST, "max_tokens": 40000})
    assert status(ex) == 400
    error = json.loads(ex.body)["error"]
    assert error["param"] == "max_tokens"
    assert error["message"].startswith("'max_tokens' or 'max_completion_tokens' is too large: 40000.")


@pytest.mark.parametrize("stream", [False, True])
async def test_the_issues_request_is_refused_before_planning(tmp_path: Path, stream: bool) -> None:
    rt = runtime(tmp_path, 2**18)
    ex = await call(rt.app, "/v1/completions", {**ISSUE_REQUEST, "stream": stream})
    assert status(ex) == 400
    error = json.loads(ex.body)["error"]
    assert error == {
        "message": "This request may produce up to 3840000 output tokens (1 prompt × n=128 × max_tokens=30000), "
        "more than the 262144 this server allows per request. Please reduce n, max_tokens or the number of prompts.",
        "type": "BadRequestError",
        "param": "max_tokens",
        "code": 400,
    }


async def test_a_list_of_prompts_counts_every_prompt(tmp_path: Path) -> None:
    body = {"model": "instant-model", "prompt": ["a", "b", "c"], "n": 2, "max_tokens": 200, "ignore_eos": True}
    at_limit = await call(runtime(tmp_path, 3 * 2 * 200).app, "/v1/completions", body)
    assert status(at_limit) == 200
    assert json.loads(at_limit.body)["usage"]["completion_tokens"] == 1200
    over = await call(runtime(tmp_path, 3 * 2 * 200 - 1).app, "/v1/completions", body)
    assert status(over) == 400
    assert "up to 1200 output tokens (3 prompts × n=2 × max_tokens=200)" in json.loads(over.body)["error"]["message"]


async def test_chat_counts_n_times_max_completion_tokens(tmp_path: Path) -> None:
    rt = runtime(tmp_path, 1000)
    body = {"model": "instant-model", "messages": [{"role": "user", "content": "hi"}], "n": 5}
    assert status(await call(rt.app, "/v1/chat/completions", {**body, "max_completion_tokens": 200})) == 200
    over = await call(rt.app, "/v1/chat/completions", {**body, "max_completion_tokens": 201})
    assert status(over) == 400
    assert json.loads(over.body)["error"]["param"] == "max_tokens"


async def test_ignore_eos_without_max_tokens_counts_the_context(tmp_path: Path) -> None:
    # Chat: completions default max_tokens to 16, as OpenAI's and vLLM's do.
    rt = runtime(tmp_path, 3 * 32768)
    body = {"model": "instant-model", "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
    assert status(await call(rt.app, "/v1/chat/completions", {**body, "n": 3})) == 200
    over = await call(rt.app, "/v1/chat/completions", {**body, "n": 4})
    assert status(over) == 400
    assert json.loads(over.body)["error"]["param"] == "n"


async def test_scripted_answers_are_counted_once_planned(tmp_path: Path) -> None:
    # No max_tokens, no ignore_eos: each choice says its script's 300 tokens.
    rt = runtime(tmp_path, 1000)
    body = {"model": "instant-model", "messages": [{"role": "user", "content": "a story"}], "n": 3}
    assert status(await call(rt.app, "/v1/chat/completions", body)) == 200
    over = await call(rt.app, "/v1/chat/completions", {**body, "n": 4})
    assert status(over) == 400
    assert "up to 1200 output tokens (1 prompt × n=4)" in json.loads(over.body)["error"]["message"]


class DueStream:
    """A token stream whose every token is already due: no await ever suspends (the instant engine's case)."""

    def __init__(self, tokens: int) -> None:
        self._left = tokens

    def __aiter__(self) -> DueStream:
        return self

    async def __anext__(self) -> TokenEvent:
        if self._left == 0:
            raise StopAsyncIteration
        self._left -= 1
        return TokenEvent(0, "x", 0.0)

    async def aclose(self) -> None:
        pass


async def loop_turns_during(work: Callable[[], Any]) -> int:
    """How many loop iterations another task got while ``work()`` ran."""
    turns = 0
    done = False

    async def other() -> None:
        nonlocal turns
        while not done:
            await asyncio.sleep(0)
            turns += 1

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    turns = 0
    try:
        await work()
    finally:
        done = True
        await task
    return turns


async def test_merged_choices_whose_tokens_are_all_due_give_the_loop_a_turn_every_slice() -> None:
    streams: list[Any] = [DueStream(2000) for _ in range(8)]
    received = 0

    async def consume() -> None:
        nonlocal received
        merged: AsyncIterator[tuple[int, TokenEvent]] = choice_events.merged_events(streams)
        async for _ in merged:
            received += 1

    turns = await loop_turns_during(consume)
    assert received == 16000
    assert turns >= 16000 // choice_events.YIELD_EVERY


async def test_the_choices_of_a_large_batch_start_a_slice_at_a_time() -> None:
    started = 0

    class CountedStream(DueStream):
        async def __anext__(self) -> TokenEvent:
            nonlocal started
            if self._left == 1:
                started += 1
            return await super().__anext__()

    seen_by_others: list[int] = []

    async def other() -> None:
        seen_by_others.append(started)

    streams: list[Any] = [CountedStream(1) for _ in range(3 * choice_events.YIELD_EVERY)]
    merged = choice_events.merged_events(streams)
    first = asyncio.ensure_future(merged.__anext__())
    asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(other()))
    await first
    await asyncio.sleep(0)
    await merged.aclose()
    # Another task ran while the first slice's pumps had started and the rest had not.
    assert seen_by_others
    assert seen_by_others[0] <= 2 * choice_events.YIELD_EVERY


async def test_a_large_non_streamed_answer_is_delivered_in_slices_planned_and_rendered_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: dict[str, bool] = {}

    def recording(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            threads[name] = threading.current_thread() is threading.main_thread()
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(routes, "_generate", recording("plan", routes._generate))
    monkeypatch.setattr(routes, "_render_body", recording("body", routes._render_body))
    rt = runtime(tmp_path, 2**18)
    body = {"model": "instant-model", "prompt": "hi", "n": 16, "max_tokens": 2048, "ignore_eos": True}
    exchanges: list[Exchange] = []

    async def answer() -> None:
        exchanges.append(await call(rt.app, "/v1/completions", body))

    turns = await loop_turns_during(answer)
    assert status(exchanges[0]) == 200
    assert json.loads(exchanges[0].body)["usage"]["completion_tokens"] == 16 * 2048
    assert threads == {"plan": False, "body": False}  # both in a worker thread
    assert turns >= 16 * 2048 // choice_events.YIELD_EVERY
