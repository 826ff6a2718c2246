"""OpenAI's Responses API (``POST /v1/responses``), in-process: served by the chat path, said the Responses way."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.api.response_models import ErrorResponse, ResponsesResponse, ResponsesStreamEvent
from llmsim.api.response_store import ResponseStore
from llmsim.runtime import Runtime
from tests.api.app_client import app_client, named_events, runtime_of

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
default:
  content: "Fine, thank you. And you?"
"""
REQUEST: dict[str, Any] = {"model": "m", "instructions": "Be brief.", "input": "How are you today?"}
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How are you today?"}]


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    return runtime_of(tmp_path, CONFIG, RESPONSES)


@pytest.fixture
async def http(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(runtime) as client:
        yield client


async def test_a_response_is_the_chat_answer_with_its_usage(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/responses", json=REQUEST)
    assert r.status_code == 200
    body = r.json()
    ResponsesResponse.model_validate(body)
    chat = (await http.post("/v1/chat/completions", json={"model": "m", "messages": CHAT})).json()
    (item,) = body["output"]
    assert (item["type"], item["role"], item["status"]) == ("message", "assistant", "completed")
    assert item["content"][0]["text"] == chat["choices"][0]["message"]["content"]
    usage = body["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (
        chat["usage"]["prompt_tokens"],
        chat["usage"]["completion_tokens"],
    )
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert body["id"].startswith("resp_")
    assert (body["status"], body["object"], body["model"]) == ("completed", "response", "m")
    assert body["max_output_tokens"] == 1024 - usage["input_tokens"]


async def test_message_items_and_max_output_tokens(http: httpx.AsyncClient) -> None:
    items = [
        {"role": "system", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "How are you today?"}]},
    ]
    as_items = (await http.post("/v1/responses", json={"model": "m", "input": items})).json()
    as_string = (await http.post("/v1/responses", json=REQUEST)).json()
    assert as_items["usage"]["input_tokens"] == as_string["usage"]["input_tokens"]
    cut = (await http.post("/v1/responses", json=REQUEST | {"max_output_tokens": 2})).json()
    assert (cut["status"], cut["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    assert cut["usage"]["output_tokens"] == 2
    image = {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}
    refused = await http.post("/v1/responses", json=image)
    assert refused.status_code == 400
    ErrorResponse.model_validate(refused.json())


@pytest.mark.parametrize(("field", "value"), [("max_output_tokens", True), ("temperature", False), ("top_p", "1")])
async def test_a_number_field_refuses_booleans_and_strings(http: httpx.AsyncClient, field: str, value: Any) -> None:
    # JSON true is not the integer 1: the chat route refuses it too, and the OpenAPI schema says integer.
    refused = await http.post("/v1/responses", json=REQUEST | {field: value})
    assert refused.status_code == 400
    assert ErrorResponse.model_validate(refused.json()).error.param == f"body.{field}"


async def test_previous_response_id_continues_the_conversation(http: httpx.AsyncClient) -> None:
    first = (await http.post("/v1/responses", json=REQUEST)).json()
    follow = {"model": "m", "input": "And tomorrow?", "previous_response_id": first["id"]}
    second = (await http.post("/v1/responses", json=follow)).json()
    answer = first["output"][0]["content"][0]["text"]
    # Instructions are not carried over (OpenAI): the conversation is the user turn, the answer, the new turn.
    messages = [
        {"role": "user", "content": "How are you today?"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "And tomorrow?"},
    ]
    chat = (await http.post("/v1/chat/completions", json={"model": "m", "messages": messages})).json()
    assert second["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"]
    assert second["previous_response_id"] == first["id"]
    missing = await http.post("/v1/responses", json=follow | {"previous_response_id": "resp_nope"})
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "Response with id 'resp_nope' not found."
    unstored = (await http.post("/v1/responses", json=REQUEST | {"store": False})).json()
    gone = await http.post("/v1/responses", json=follow | {"previous_response_id": unstored["id"]})
    assert gone.status_code == 404


def test_the_store_is_bounded() -> None:
    store = ResponseStore(capacity=2)
    for name in ("a", "b", "c"):
        store.put(name, [{"role": "user", "content": name}])
    assert store.get("a") is None
    assert store.get("c") == ({"role": "user", "content": "c"},)
    assert len(store) == 2


async def test_the_stream_says_the_response_event_by_event(http: httpx.AsyncClient) -> None:
    whole = (await http.post("/v1/responses", json=REQUEST)).json()
    r = await http.post("/v1/responses", json=REQUEST | {"stream": True})
    assert r.status_code == 200
    events = named_events(r.text)
    for name, data in events:
        assert data["type"] == name
        ResponsesStreamEvent.model_validate(data)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    names = [name for name, _ in events]
    deltas = names.count("response.output_text.delta")
    assert names == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert deltas == whole["usage"]["output_tokens"]
    final = events[-1][1]["response"]
    assert final["output"][0]["content"][0]["text"] == whole["output"][0]["content"][0]["text"]
    assert final["usage"] == whole["usage"]
    assert events[0][1]["response"]["status"] == "in_progress"


TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
WEATHER: dict[str, Any] = {"model": "m", "tools": TOOLS, "input": "What is the weather in Paris?"}
ARGUMENTS = {"city": "Paris", "unit": "celsius"}


async def test_a_tool_call_is_a_function_call_item(http: httpx.AsyncClient) -> None:
    body = (await http.post("/v1/responses", json=WEATHER)).json()
    ResponsesResponse.model_validate(body)
    (item,) = body["output"]
    assert (item["type"], item["name"], item["status"]) == ("function_call", "get_weather", "completed")
    assert json.loads(item["arguments"]) == ARGUMENTS
    assert item["id"].startswith("fc_")
    assert body["tools"] == TOOLS
    # The call's output continues the conversation.
    result = {"type": "function_call_output", "call_id": item["call_id"], "output": "sunny"}
    follow = {"model": "m", "input": [result], "previous_response_id": body["id"]}
    second = await http.post("/v1/responses", json=follow)
    assert second.status_code == 200
    assert second.json()["usage"]["input_tokens"] > body["usage"]["input_tokens"]
    none = (await http.post("/v1/responses", json=WEATHER | {"tool_choice": "none"})).json()
    assert [o["type"] for o in none["output"]] == ["message"]


async def test_a_streamed_tool_call_is_its_argument_deltas(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/responses", json=WEATHER | {"stream": True})
    events = named_events(r.text)
    names = [n for n, _ in events]
    deltas = names.count("response.function_call_arguments.delta")
    assert names == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * deltas,
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    pieces = "".join(d["delta"] for n, d in events if n == "response.function_call_arguments.delta")
    assert json.loads(pieces) == ARGUMENTS
    done = events[-2][1]["item"]
    final = events[-1][1]["response"]
    assert final["output"] == [done]
    assert events[2][1]["item"]["id"] == done["id"]
