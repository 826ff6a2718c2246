"""The rest of vLLM's API surface seen by real clients against the real server: tool calls and logprobs
parsed by the openai SDK, /tokenize and /openapi.json over httpx."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.server import ServerProcess, running_server

pytestmark = pytest.mark.integration

CONFIG = """
version: 1
models:
  - {name: m, engine: fixed, context_length: 2048, latency: {ttft_overhead_ms: 5, itl_ms: 2}}
"""

RESPONSES = r"""
version: 1
responses:
  - id: weather
    match: {regex: 'weather in (?P<city>\w+)'}
    tool_calls:
      - {name: get_weather, arguments: {city: "{city}"}}
      - {name: get_time, arguments: {zone: "Europe/{city}"}}
default:
  content: "Hi there, how can I help?"
"""

TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("surface"), config=CONFIG, responses=RESPONSES) as s:
        yield s


@pytest.fixture
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


def test_streamed_tool_calls_are_assembled_by_the_sdk(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
    with client.chat.completions.stream(model="m", messages=messages, tools=TOOLS) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None
    got = [(c.function.name, json.loads(c.function.arguments)) for c in calls]
    assert got == [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "Europe/Paris"})]
    assert len({c.id for c in calls}) == 2
    assert all(c.id.startswith("chatcmpl-tool-") for c in calls)


def test_raw_streamed_tool_call_deltas_with_the_sdk(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "weather in Oslo"}]
    stream = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=True)
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    finishes = []
    for chunk in stream:
        choice = chunk.choices[0]
        if choice.finish_reason:
            finishes.append(choice.finish_reason)
        for delta in choice.delta.tool_calls or ():
            if delta.function and delta.function.name:
                names[delta.index] = delta.function.name
            if delta.function and delta.function.arguments:
                arguments[delta.index] = arguments.get(delta.index, "") + delta.function.arguments
    assert names == {0: "get_weather", 1: "get_time"}
    assert arguments == {0: '{"city": "Oslo"}', 1: '{"zone": "Europe/Oslo"}'}
    assert finishes == ["tool_calls"]


def test_logprobs_are_parsed_by_the_sdk(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "Hello!"}]
    r = client.chat.completions.create(model="m", messages=messages, logprobs=True, top_logprobs=2)
    logprobs = r.choices[0].logprobs
    assert logprobs is not None
    assert logprobs.content is not None
    assert "".join(t.token for t in logprobs.content) == "Hi there, how can I help?"
    for entry in logprobs.content:
        assert entry.logprob < 0
        assert entry.top_logprobs[0].token == entry.token
        assert len(entry.top_logprobs) == 2
    stream = client.chat.completions.create(model="m", messages=messages, logprobs=True, top_logprobs=1, stream=True)
    streamed = [c.choices[0].logprobs.content[0] for c in stream if c.choices and c.choices[0].logprobs]  # type: ignore[index]
    assert [e.token for e in streamed] == [e.token for e in logprobs.content]
    assert [e.logprob for e in streamed] == [e.logprob for e in logprobs.content]
    done = client.completions.create(model="m", prompt="Hello!", logprobs=3, echo=True, max_tokens=3)
    lp = done.choices[0].logprobs
    assert lp is not None
    assert lp.tokens == ["<|begin_of_text|>", "Hello", "!", "Hi", " there", ","]
    assert done.choices[0].text == "Hello!Hi there,"


def test_tokenize_and_openapi_over_http(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.base_url, timeout=5) as http:
        r = http.post("/tokenize", json={"prompt": "Hello!"})
        assert r.json()["count"] == 3  # BOS, Hello, !
        paths = http.get("/openapi.json").json()["paths"]
        assert {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize", "/v1/models"} <= set(paths)
        assert http.put("/v1/models").headers["allow"] == "GET"
