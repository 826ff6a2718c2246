"""Tool calls (tools, tool_choice) and response_format as vLLM validates and answers them."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.api.response_models import ChatCompletionChunk, ChatCompletionResponse
from llmsim.runtime import build_runtime

CONFIG = """
version: 1
models:
  - {name: m, engine: instant, context_length: 1024}
"""

RESPONSES = r"""
version: 1
responses:
  - id: weather
    match: {regex: 'weather in (?P<city>\w+)'}
    tool_calls:
      - {name: get_weather, arguments: {city: "{city}", unit: celsius}}
  - id: report
    match: {exact: report}
    json: {status: ok, items: [1, 2]}
default:
  content: "I am a simulator."
"""

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time"}},
]


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    runtime = build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml")
    transport = httpx.ASGITransport(app=runtime.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def chat(content: str = "weather in Paris", **kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **kw}


def events(body: str) -> list[Any]:
    data = [line[len("data: ") :] for line in body.split("\n\n") if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(e) for e in data[:-1]]


TOOL_ID = re.compile(r"^chatcmpl-tool-[0-9a-f]{16}$")


async def test_a_tool_call_answer(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat(tools=TOOLS))
    body = r.json()
    ChatCompletionResponse.model_validate(body)
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None
    (call,) = message["tool_calls"]
    assert TOOL_ID.match(call["id"])
    assert call["type"] == "function"
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}
    # The call as the model writes it (Hermes) is what usage counts:
    # <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
    counted = await http.post("/tokenize", json={"prompt": text, "add_special_tokens": False})
    assert body["usage"]["completion_tokens"] == counted.json()["count"]


async def test_a_named_tool_choice_finishes_with_stop(http: httpx.AsyncClient) -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    r = await http.post("/v1/chat/completions", json=chat(tools=TOOLS, tool_choice=named))
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert [c["function"] for c in choice["message"]["tool_calls"]] == [{"name": "get_time", "arguments": "{}"}]


async def test_tool_choice_none_and_no_tools_answer_in_text(http: httpx.AsyncClient) -> None:
    for extra in ({"tools": TOOLS, "tool_choice": "none"}, {}, {"tools": [], "tool_choice": "auto"}):
        r = await http.post("/v1/chat/completions", json=chat(**extra))
        message = r.json()["choices"][0]["message"]
        assert "tool_calls" not in message
        assert message["content"].startswith("<tool_call>\n")
        assert r.json()["choices"][0]["finish_reason"] == "stop"


async def test_streamed_tool_call_as_vllm_streams_it(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat(tools=TOOLS, stream=True))
    chunks = events(r.text)
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": ""}
    first = deltas[1]["tool_calls"]
    assert len(first) == 1
    assert TOOL_ID.match(first[0].pop("id"))
    assert first == [{"type": "function", "index": 0, "function": {"name": "get_weather"}}]
    pieces = deltas[2:-1]
    assert all(list(d) == ["tool_calls"] and list(d["tool_calls"][0]) == ["index", "function"] for d in pieces)
    arguments = "".join(d["tool_calls"][0]["function"]["arguments"] for d in pieces)
    assert arguments == '{"city": "Paris", "unit": "celsius"}'
    assert deltas[-1] == {}
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["tool_calls"]


TOOL_CHOICE_ERRORS = [
    ({"tool_choice": "auto"}, "When using `tool_choice`, `tools` must be set.", "tool_choice"),
    (
        {"tools": TOOLS, "tool_choice": "sometimes"},
        'Invalid value for `tool_choice`: sometimes! Only named tools, "none", "auto" or "required" are supported.',
        "tool_choice",
    ),
    (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": "get_time"}},
        "Invalid value for `function`: `get_time` in `tool_choice`! "
        'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`',
        "tool_choice.function",
    ),
    (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {}}},
        "Expected field `name` in `function` in `tool_choice`! "
        'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`',
        "tool_choice.function.name",
    ),
    (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": ""}}},
        "Invalid `name` in `function`: `` in `tool_choice`! "
        'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`',
        "tool_choice.function.name",
    ),
    (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "search"}}},
        "The tool `search` specified in `tool_choice` does not match any of the specified `tools`",
        "tool_choice",
    ),
    (
        {"response_format": {"type": "json_schema"}},
        "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
        "response_format",
    ),
]


@pytest.mark.parametrize(("extra", "message", "param"), TOOL_CHOICE_ERRORS)
async def test_tool_choice_and_response_format_vllm_refuses(
    http: httpx.AsyncClient, extra: dict[str, Any], message: str, param: str
) -> None:
    r = await http.post("/v1/chat/completions", json=chat(**extra))
    assert r.status_code == 400
    assert r.json() == {
        "error": {"message": f"{message} (parameter={param})", "type": "BadRequestError", "param": param, "code": 400}
    }


async def test_malformed_tools_are_validation_errors(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat(tools=[{"type": "function"}]))
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "body.tools.0.function"


async def test_json_object_is_answered_by_a_json_entry(http: httpx.AsyncClient) -> None:
    for rf in ({"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "r", "schema": {}}}):
        r = await http.post("/v1/chat/completions", json=chat("report", response_format=rf))
        assert json.loads(r.json()["choices"][0]["message"]["content"]) == {"status": "ok", "items": [1, 2]}
        done = await http.post("/v1/completions", json={"model": "m", "prompt": "report", "response_format": rf})
        assert json.loads(done.json()["choices"][0]["text"]) == {"status": "ok", "items": [1, 2]}


async def test_json_object_without_a_json_answer_is_a_clear_400(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat("hello", response_format={"type": "json_object"}))
    assert r.status_code == 400
    err = r.json()["error"]
    assert (err["type"], err["param"]) == ("BadRequestError", "response_format")
    assert "responses.yml entry 'default'" in err["message"]
    assert "`json:` body" in err["message"]
    text = await http.post("/v1/chat/completions", json=chat("hello", response_format={"type": "text"}))
    assert text.status_code == 200
