"""``POST /v1/messages`` with Anthropic's own SDK against the real server: streamed and not."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest

from tests.support.server import ServerProcess, running_server

pytestmark = pytest.mark.integration

CONFIG = """
version: 1
models:
  - {name: m, engine: fixed, context_length: 2048, latency: {ttft_overhead_ms: 5, itl_ms: 1}}
"""
RESPONSES = """
version: 1
responses:
  - id: weather
    match: {contains: "weather"}
    content: "Sunny, with a light breeze. STOP here."
  - id: time
    match: {contains: "time"}
    tool_calls:
      - {name: get_time, arguments: {zone: UTC}}
default:
  content: "Fine, thank you. And you?"
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("messages"), config=CONFIG, responses=RESPONSES) as s:
        yield s


@pytest.fixture
def client(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.base_url, api_key="x", max_retries=0) as c:
        yield c


def test_a_message_counts_what_the_chat_route_counts(server: ServerProcess, client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="m",
        max_tokens=64,
        system="Be brief.",
        messages=[{"role": "user", "content": "How are you?"}],
    )
    assert message.type == "message"
    assert message.role == "assistant"
    assert [b.type for b in message.content] == ["text"]
    text = message.content[0].text  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x") as openai_client:
        chat = openai_client.chat.completions.create(
            model="m",
            max_tokens=64,
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How are you?"}],
        )
    assert text == chat.choices[0].message.content
    assert chat.usage is not None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (
        chat.usage.prompt_tokens,
        chat.usage.completion_tokens,
    )
    counted = client.messages.count_tokens(
        model="m", system="Be brief.", messages=[{"role": "user", "content": "How are you?"}]
    )
    assert counted.input_tokens == message.usage.input_tokens


def test_a_streamed_message_is_the_same_message(client: anthropic.Anthropic) -> None:
    request = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "What's the weather?"}]}
    whole = client.messages.create(**request)  # type: ignore[call-overload]
    with client.messages.stream(**request) as stream:  # type: ignore[arg-type]
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) == whole.usage.output_tokens
    assert "".join(pieces) == whole.content[0].text
    assert final.content[0].text == whole.content[0].text  # type: ignore[union-attr]
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens
    assert final.stop_reason == "end_turn"


def test_stop_sequences_and_max_tokens(client: anthropic.Anthropic) -> None:
    messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": "What's the weather?"}]
    stopped = client.messages.create(model="m", max_tokens=64, messages=messages, stop_sequences=["STOP"])
    assert stopped.content[0].text == "Sunny, with a light breeze. "  # type: ignore[union-attr]
    # As vLLM: a stop sequence ends the turn; which one is not said.
    assert (stopped.stop_reason, stopped.stop_sequence) == ("end_turn", None)
    cut = client.messages.create(model="m", max_tokens=3, messages=messages)
    assert (cut.stop_reason, cut.usage.output_tokens) == ("max_tokens", 3)


def test_errors_reach_the_sdk_as_its_exceptions(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="nope", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert missing.value.body == {
        "type": "error",
        "error": {"type": "NotFoundError", "message": "The model `nope` does not exist."},
    }
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="m", max_tokens=0, messages=[{"role": "user", "content": "hi"}])


def test_tool_use_streamed_and_not(client: anthropic.Anthropic) -> None:
    tools: list[anthropic.types.ToolParam] = [{"name": "get_time", "input_schema": {"type": "object"}}]
    messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": "What time is it?"}]
    whole = client.messages.create(model="m", max_tokens=100, tools=tools, messages=messages)
    assert whole.stop_reason == "tool_use"
    (block,) = whole.content
    assert block.type == "tool_use"
    assert (block.name, block.input) == ("get_time", {"zone": "UTC"})
    with client.messages.stream(model="m", max_tokens=100, tools=tools, messages=messages) as stream:
        final = stream.get_final_message()
    (streamed,) = final.content
    assert streamed.type == "tool_use"
    assert (streamed.name, streamed.input) == ("get_time", {"zone": "UTC"})
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens == whole.usage.output_tokens
