"""Scripted tool calls and JSON answers: what the generator plans for each tool_choice."""

from __future__ import annotations

import json

import pytest

from llmsim.llm import Generator, parse_responses
from llmsim.llm.errors import ResponseFormatError
from llmsim.llm.tool_calls import render_tool_calls
from llmsim.types import FinishReason, GenerationPlan, GenerationRequest, Message, ToolCall, ToolChoice

SCRIPT = r"""
responses:
  - id: weather
    match: {regex: 'weather in (?P<city>\w+)'}
    tool_calls:
      - {name: get_weather, arguments: {city: "{city}"}}
      - {name: get_time, arguments: {zone: "{city}"}}
  - id: as-json
    match: {exact: json}
    json: {ok: true}
  - id: json-text
    match: {exact: json text}
    content: '{{"already": "json"}}'
default:
  content: "Plain words."
"""

HERMES = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"zone": "Paris"}}\n</tool_call>'
)


def plan(text: str, **kw: object) -> GenerationPlan:
    generator = Generator(parse_responses(SCRIPT, "r.yml"), model_name="m", context_length=4096)
    request = GenerationRequest(model="m", messages=(Message("user", text),), **kw)  # type: ignore[arg-type]
    (only,) = generator.generate(request)
    return only


TOOLS = ("get_weather", "get_time", "search")


def test_tokens_stream_the_name_first_then_the_arguments_in_pieces() -> None:
    calls = (ToolCall("get_weather", '{"city": "Paris"}'), ToolCall("get_time", '{"zone": "Paris"}'))
    tokens, deltas = render_tool_calls(calls)
    assert "".join(tokens) == HERMES
    assert len(deltas) == len(tokens)
    for i, call in enumerate(calls):
        mine = [d for d in deltas if d is not None and d.index == i]
        assert [d.name for d in mine if d.name is not None] == [call.name]
        assert mine[0].name == call.name  # the name comes first
        assert "".join(d.arguments for d in mine) == call.arguments
    assert deltas[0] is None  # "<" of the wrapper says nothing


def test_auto_answers_with_the_scripted_calls() -> None:
    p = plan("weather in Paris", tools=TOOLS, tool_choice=ToolChoice.AUTO)
    assert p.tool_calls == (ToolCall("get_weather", '{"city": "Paris"}'), ToolCall("get_time", '{"zone": "Paris"}'))
    assert "".join(p.tokens) == HERMES
    assert p.finish_reason is FinishReason.STOP
    assert len(p.tool_deltas) == len(p.tokens)


def test_without_tools_the_calls_are_plain_text() -> None:
    p = plan("weather in Paris")
    assert p.tool_calls == ()
    assert "".join(p.tokens) == HERMES


def test_a_named_tool_is_called_even_if_the_script_does_not() -> None:
    named = plan("weather in Paris", tools=TOOLS, tool_choice=ToolChoice.NAMED, named_tool="get_time")
    assert named.tool_calls == (ToolCall("get_time", '{"zone": "Paris"}'),)
    forced = plan("hello", tools=TOOLS, tool_choice=ToolChoice.NAMED, named_tool="search")
    assert forced.tool_calls == (ToolCall("search", "{}"),)


def test_required_calls_the_first_tool_when_the_script_has_no_call() -> None:
    assert plan("hello", tools=TOOLS, tool_choice=ToolChoice.REQUIRED).tool_calls == (ToolCall("get_weather", "{}"),)
    assert plan("hello", tools=TOOLS, tool_choice=ToolChoice.AUTO).tool_calls == ()


def test_parallel_tool_calls_false_keeps_the_first() -> None:
    p = plan("weather in Paris", tools=TOOLS, tool_choice=ToolChoice.AUTO, parallel_tool_calls=False)
    assert [c.name for c in p.tool_calls] == ["get_weather"]


@pytest.mark.parametrize("kw", [{"max_tokens": 5}, {"stop": ("Paris",)}, {"ignore_eos": True, "max_tokens": 200}])
def test_calls_cut_short_or_padded_are_plain_text(kw: dict[str, object]) -> None:
    p = plan("weather in Paris", tools=TOOLS, tool_choice=ToolChoice.AUTO, **kw)
    assert p.tool_calls == ()
    assert p.tool_deltas == ()


def test_json_answers() -> None:
    assert json.loads("".join(plan("json", json_output=True).tokens)) == {"ok": True}
    assert json.loads("".join(plan("json text", json_output=True).tokens)) == {"already": "json"}
    with pytest.raises(ResponseFormatError, match="entry 'default'"):
        plan("hello", json_output=True)
