"""Tool calls as the model writes them, and what each of their tokens adds for a tool-call parser.

The model writes each call in the Hermes format (Qwen, Hermes and many open models; vLLM's
``hermes`` parser reads it)::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Those tokens are what usage counts and what the engine releases over time. A parser streams the
call as vLLM's does: the token that completes the name carries ``{id, type, name}`` (the call's
first delta), tokens inside the arguments carry their piece of the arguments' JSON, and the
wrapper's tokens carry nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from llmsim.llm.tokenizer import encode
from llmsim.types import ToolCall, ToolCallDelta

__all__ = ["hermes_text", "render_tool_calls"]


def hermes_text(calls: Sequence[ToolCall]) -> tuple[str, list[tuple[int, int, int]]]:
    """The calls' text, and per call (end of its name, start and end of its arguments) in it."""
    text = ""
    spans = []
    for i, call in enumerate(calls):
        if i:
            text += "\n"
        text += '<tool_call>\n{"name": ' + json.dumps(call.name, ensure_ascii=False)
        name_end = len(text)
        text += ', "arguments": '
        start = len(text)
        text += call.arguments
        spans.append((name_end, start, len(text)))
        text += "}\n</tool_call>"
    return text, spans


def render_tool_calls(calls: Sequence[ToolCall]) -> tuple[tuple[str, ...], tuple[ToolCallDelta | None, ...]]:
    """The calls' tokens, and per token what it adds to the calls (None: a wrapper token)."""
    text, spans = hermes_text(calls)
    tokens = tuple(encode(text))
    deltas: list[ToolCallDelta | None] = []
    named = [False] * len(calls)
    end = 0
    for token in tokens:
        start, end = end, end + len(token)
        delta = None
        for i, (name_end, args_start, args_end) in enumerate(spans):
            name = None
            if not named[i] and start < name_end <= end:
                named[i] = True
                name = calls[i].name
            piece = text[max(start, args_start) : min(end, args_end)] if start < args_end and end > args_start else ""
            if name is not None or piece:
                delta = ToolCallDelta(i, name, piece)
                break
        deltas.append(delta)
    return tokens, tuple(deltas)
