"""``POST /v1/responses`` with OpenAI's SDK against the real server: streamed, not, and continued."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.server import ServerProcess, running_server

pytestmark = pytest.mark.integration

RESPONSES = """
version: 1
responses:
  - id: time
    match: {contains: "time"}
    tool_calls:
      - {name: get_time, arguments: {zone: UTC}}
default:
  content: "I am a simulator."
"""
CONFIG = """
version: 1
models:
  - {name: m, engine: fixed, context_length: 2048, latency: {ttft_overhead_ms: 5, itl_ms: 1}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("responses"), config=CONFIG, responses=RESPONSES) as s:
        yield s


def test_create_stream_and_continue(server: ServerProcess) -> None:
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x") as client:
        _create_stream_and_continue(client)


def _create_stream_and_continue(client: openai.OpenAI) -> None:
    first = client.responses.create(model="m", instructions="Be brief.", input="How are you?")
    assert first.status == "completed"
    assert first.output_text
    assert first.usage is not None
    chat = client.chat.completions.create(
        model="m", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How are you?"}]
    )
    assert first.output_text == chat.choices[0].message.content
    assert chat.usage is not None
    assert (first.usage.input_tokens, first.usage.output_tokens) == (
        chat.usage.prompt_tokens,
        chat.usage.completion_tokens,
    )
    kinds = []
    deltas = []
    for event in client.responses.create(model="m", instructions="Be brief.", input="How are you?", stream=True):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        if event.type == "response.completed":
            assert event.response.output_text == first.output_text
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert "".join(deltas) == first.output_text
    with client.responses.stream(model="m", input="How are you?") as stream:
        final = stream.get_final_response()
    assert final.output_text == first.output_text
    second = client.responses.create(model="m", input="And tomorrow?", previous_response_id=first.id)
    assert second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="m", input="hi", previous_response_id="resp_nope")


def test_function_calls(server: ServerProcess) -> None:
    tools: list[Any] = [{"type": "function", "name": "get_time", "parameters": {"type": "object"}, "strict": False}]
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x") as client:
        whole = client.responses.create(model="m", input="What time is it?", tools=tools)
        (call,) = whole.output
        assert call.type == "function_call"
        assert (call.name, call.arguments) == ("get_time", '{"zone": "UTC"}')
        with client.responses.stream(model="m", input="What time is it?", tools=tools) as stream:
            final = stream.get_final_response()
        (streamed,) = final.output
        assert streamed.type == "function_call"
        assert (streamed.name, streamed.arguments) == ("get_time", '{"zone": "UTC"}')
