"""Anthropic's Messages API (``POST /v1/messages``), in-process: served by the chat path, said the Messages way."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.api.messages_routes import MessagesRequest
from llmsim.api.response_models import ErrorResponse, MessagesResponse, MessagesStreamEvent
from llmsim.runtime import Runtime
from tests.api.app_client import app_client, named_events, runtime_of
from tests.metrics.scrape import parse

CONFIG = """
version: 1
models:
  - {name: m, engine: instant, context_length: 1024, faults: {header_override: true}}
"""
RESPONSES = r"""
version: 1
responses:
  - id: weather
    match: {regex: 'weather in (?P<city>\w+)'}
    tool_calls:
      - {name: get_weather, arguments: {city: "{city}", unit: celsius}}
default:
  content: "Fine, thank you. And you?"
"""
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How are you today?"}]
MESSAGES: dict[str, Any] = {
    "model": "m",
    "max_tokens": 64,
    "system": "Be brief.",
    "messages": [{"role": "user", "content": "How are you today?"}],
}


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    return runtime_of(tmp_path, CONFIG, RESPONSES)


@pytest.fixture
async def http(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(runtime) as client:
        yield client


async def test_a_message_is_the_chat_answer_with_its_usage(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/messages", json=MESSAGES)
    assert r.status_code == 200
    body = r.json()
    MessagesResponse.model_validate(body)
    chat = (await http.post("/v1/chat/completions", json={"model": "m", "messages": CHAT, "max_tokens": 64})).json()
    assert body["content"] == [{"type": "text", "text": chat["choices"][0]["message"]["content"]}]
    assert body["usage"] == {
        "input_tokens": chat["usage"]["prompt_tokens"],
        "output_tokens": chat["usage"]["completion_tokens"],
    }
    assert (body["type"], body["role"], body["model"]) == ("message", "assistant", "m")
    assert (body["stop_reason"], body["stop_sequence"]) == ("end_turn", None)
    # As vLLM: the chat completion's id.
    assert body["id"].startswith("chatcmpl-")


async def test_system_blocks_and_system_messages_are_one_system_message(http: httpx.AsyncClient) -> None:
    blocks = MESSAGES | {"system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]}
    as_string = (await http.post("/v1/messages", json=MESSAGES)).json()
    as_blocks = (await http.post("/v1/messages", json=blocks)).json()
    assert as_blocks["usage"] == as_string["usage"]
    request = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 1,
            "system": "A",
            "messages": [
                {"role": "system", "content": "B"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "!"}]},
                {"role": "assistant", "content": "hello"},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "42"}]}
                    ],
                },
            ],
        }
    )
    assert request.chat_messages() == [
        {"role": "system", "content": "AB"},
        {"role": "user", "content": "hi!"},
        {"role": "assistant", "content": "hello"},
        {"role": "tool", "tool_call_id": "t1", "content": "42"},
    ]


async def test_max_tokens_cuts_the_answer(http: httpx.AsyncClient) -> None:
    body = (await http.post("/v1/messages", json=MESSAGES | {"max_tokens": 2})).json()
    assert body["stop_reason"] == "max_tokens"
    assert body["usage"]["output_tokens"] == 2


async def test_the_stream_says_the_message_event_by_event(http: httpx.AsyncClient) -> None:
    whole = (await http.post("/v1/messages", json=MESSAGES)).json()
    r = await http.post("/v1/messages", json=MESSAGES | {"stream": True})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = named_events(r.text)
    for name, data in events:
        assert data["type"] == name
        MessagesStreamEvent.model_validate(data)
    names = [name for name, _ in events]
    deltas = names.count("content_block_delta")
    assert names == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert deltas == whole["usage"]["output_tokens"]
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == whole["content"][0]["text"]
    start = events[0][1]["message"]
    assert start["usage"] == {"input_tokens": whole["usage"]["input_tokens"], "output_tokens": 0}
    assert events[-2][1] == {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": whole["usage"]}


async def test_max_tokens_is_required(http: httpx.AsyncClient) -> None:
    body = {k: v for k, v in MESSAGES.items() if k != "max_tokens"}
    r = await http.post("/v1/messages", json=body)
    assert r.status_code == 400
    # A body that does not validate: vLLM's own 400, before the handler.
    error = ErrorResponse.model_validate(r.json()).error
    assert "max_tokens" in error.message
    zero = await http.post("/v1/messages", json=MESSAGES | {"max_tokens": 0})
    assert zero.status_code == 400


async def test_handler_errors_are_anthropic_shaped(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/messages", json=MESSAGES | {"model": "nope"})
    assert r.status_code == 404
    assert r.json() == {
        "type": "error",
        "error": {"type": "NotFoundError", "message": "The model `nope` does not exist."},
    }
    too_long = await http.post("/v1/messages", json=MESSAGES | {"max_tokens": 5000})
    assert too_long.status_code == 400
    assert too_long.json()["type"] == "error"
    assert too_long.json()["error"]["type"] == "BadRequestError"


async def test_the_route_is_documented(http: httpx.AsyncClient) -> None:
    paths = (await http.get("/openapi.json")).json()["paths"]
    assert "post" in paths["/v1/messages"]


TOOLS = [{"name": "get_weather", "description": "The weather", "input_schema": {"type": "object"}}]
WEATHER: dict[str, Any] = {
    "model": "m",
    "max_tokens": 200,
    "tools": TOOLS,
    "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
}


async def test_a_tool_call_is_a_tool_use_block(http: httpx.AsyncClient) -> None:
    body = (await http.post("/v1/messages", json=WEATHER)).json()
    (block,) = body["content"]
    assert block["type"] == "tool_use"
    assert (block["name"], block["input"]) == ("get_weather", {"city": "Paris", "unit": "celsius"})
    assert block["id"].startswith("chatcmpl-tool-")
    assert body["stop_reason"] == "tool_use"
    chat_tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    chat = (
        await http.post(
            "/v1/chat/completions",
            json={"model": "m", "max_tokens": 200, "tools": chat_tools, "messages": WEATHER["messages"]},
        )
    ).json()
    assert body["usage"]["output_tokens"] == chat["usage"]["completion_tokens"]
    assert body["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"]
    # tool_choice none: the chat path answers with text.
    none = (await http.post("/v1/messages", json=WEATHER | {"tool_choice": {"type": "none"}})).json()
    assert [b["type"] for b in none["content"]] == ["text"]


async def test_a_streamed_tool_call_is_a_tool_use_block_of_json_deltas(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/messages", json=WEATHER | {"stream": True})
    events = named_events(r.text)
    names = [n for n, _ in events]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    start = events[1][1]["content_block"]
    assert (start["type"], start["name"], start["input"]) == ("tool_use", "get_weather", {})
    pieces = [d["delta"]["partial_json"] for n, d in events if n == "content_block_delta"]
    assert json.loads("".join(pieces)) == {"city": "Paris", "unit": "celsius"}
    assert events[-2][1]["delta"] == {"stop_reason": "tool_use"}


async def test_tool_use_and_results_in_the_conversation() -> None:
    request = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 8,
            "messages": [
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Let me look."},
                        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
                    ],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]},
            ],
        }
    )
    call = {"id": "t1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert request.chat_messages() == [
        {"role": "assistant", "content": "Let me look.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
    ]


async def test_messages_and_responses_count_in_the_engine_metrics(http: httpx.AsyncClient) -> None:
    said = (await http.post("/v1/messages", json=MESSAGES)).json()["usage"]
    streamed = await http.post("/v1/messages", json=MESSAGES | {"stream": True})
    assert streamed.status_code == 200
    answered = (await http.post("/v1/responses", json={"model": "m", "input": "How are you today?"})).json()["usage"]
    page = parse((await http.get("/metrics")).text)
    labels = {"model_name": "m", "engine": "0"}
    assert page.get("vllm:prompt_tokens_total", **labels) == 2 * said["input_tokens"] + answered["input_tokens"]
    assert page.get("vllm:generation_tokens_total", **labels) == 2 * said["output_tokens"] + answered["output_tokens"]


async def test_faults_are_drawn_as_for_chat_and_answered_anthropic_shaped(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/messages", json=MESSAGES, headers={"x-llmsim-fault": "rate_limit"})
    assert r.status_code == 429
    assert r.headers["retry-after"] == "1"
    body = r.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "RateLimitError"
    assert body["error"]["message"].startswith("Rate limit reached for m")
    cut = await http.post(
        "/v1/responses", json={"model": "m", "input": "hi"}, headers={"x-llmsim-fault": "server_error"}
    )
    assert cut.status_code == 500
    assert cut.json()["error"]["message"] == "The server had an error while processing your request."


async def test_count_tokens_is_the_messages_input_tokens(http: httpx.AsyncClient) -> None:
    for request in (MESSAGES, WEATHER):
        said = (await http.post("/v1/messages", json=request)).json()["usage"]["input_tokens"]
        counted = {k: v for k, v in request.items() if k != "max_tokens"}
        r = await http.post("/v1/messages/count_tokens", json=counted)
        assert r.status_code == 200
        assert r.json() == {"input_tokens": said}
    missing = await http.post("/v1/messages/count_tokens", json={"model": "nope", "messages": MESSAGES["messages"]})
    assert missing.status_code == 404
    assert missing.json()["type"] == "error"
