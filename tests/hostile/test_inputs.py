"""Hostile inputs, one row each: every one answered with a 4xx in OpenAI's error shape, or served.

In-process (httpx's ASGITransport raises what escapes the app: a would-be 500 fails the test).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmsim.api.json_body import MAX_DEPTH
from tests.hostile.app import assert_openai_error, build, client

JSON_ROUTES = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions/render"),
    ("POST", "/v1/completions/render"),
    ("POST", "/inference/v1/generate"),
    ("POST", "/v1/embeddings"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    ("PUT", "/admin/faults"),
    ("POST", "/v1/load_lora_adapter"),
    ("POST", "/v1/unload_lora_adapter"),
]


@dataclass(frozen=True)
class Row:
    method: str
    path: str
    body: bytes
    status: int
    # The error's param, when the answer is an error and names one.
    param: str | None = None


def _deep(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def _items(depth: int) -> dict[str, object]:
    """A JSON schema ``depth`` objects deep: arrays of arrays of ... strings."""
    schema: dict[str, object] = {"type": "string"}
    for _ in range(depth - 1):
        schema = {"type": "array", "items": schema}
    return schema


def _surrogate(template: str) -> bytes:
    # A lone high surrogate, as a JSON escape (the only way one can arrive: raw bytes must be UTF-8).
    return template.replace("@", '"\\ud800"').encode()


ROWS: dict[str, Row] = {
    # Nested arrays: json.loads would raise RecursionError (not a ValueError) on 10,000.
    **{f"deep-open {path}": Row(method, path, b"[" * 10_000, 400, "body") for method, path in JSON_ROUTES},
    **{f"deep-closed {path}": Row(method, path, _deep(10_000).encode(), 400, "body") for method, path in JSON_ROUTES},
    "deep inside a string is text": Row(
        "POST", "/tokenize", json.dumps({"model": "chat", "prompt": "[" * 10_000}).encode(), 200
    ),
    "deep json_schema at the limit": Row(
        "POST",
        "/v1/chat/completions",
        json.dumps(
            {
                "model": "chat",
                "messages": [{"role": "user", "content": "JSON please"}],
                "max_tokens": 4,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": _items(MAX_DEPTH - 4)},
                },
            }
        ).encode(),
        200,
    ),
    "one level past the limit": Row(
        "POST", "/v1/chat/completions", ('{"model": "chat", "x": ' + _deep(MAX_DEPTH) + "}").encode(), 400, "body"
    ),
    # A JSON boolean is not a token id (pydantic's lax mode would read true as 1).
    "boolean token id detokenize": Row(
        "POST", "/detokenize", json.dumps({"model": "chat", "tokens": [5, True]}).encode(), 400, "body.tokens.1"
    ),
    "boolean token id prompt": Row(
        "POST", "/v1/completions", json.dumps({"model": "chat", "prompt": [5, True]}).encode(), 400
    ),
    # Lone surrogates: refused at parse time, the field named.
    "surrogate completions echo": Row(
        "POST",
        "/v1/completions",
        _surrogate('{"model": "chat", "prompt": @, "echo": true, "max_tokens": 2}'),
        400,
        "body.prompt",
    ),
    "surrogate completions echo streamed": Row(
        "POST",
        "/v1/completions",
        _surrogate('{"model": "chat", "prompt": @, "echo": true, "max_tokens": 2, "stream": true}'),
        400,
        "body.prompt",
    ),
    "surrogate tokenize token strs": Row(
        "POST", "/tokenize", _surrogate('{"model": "chat", "prompt": @, "return_token_strs": true}'), 400, "body.prompt"
    ),
    "surrogate scripted echo": Row(
        "POST",
        "/v1/chat/completions",
        _surrogate('{"model": "chat", "messages": [{"role": "user", "content": "repeat \\ud800"}]}'),
        400,
        "body.messages.0.content",
    ),
    "surrogate json_object": Row(
        "POST",
        "/v1/chat/completions",
        _surrogate(
            '{"model": "chat", "messages": [{"role": "user", "content": "JSON \\ud800"}],'
            ' "response_format": {"type": "json_object"}}'
        ),
        400,
        "body.messages.0.content",
    ),
    "surrogate chat streamed": Row(
        "POST",
        "/v1/chat/completions",
        _surrogate('{"model": "chat", "messages": [{"role": "user", "content": @}], "stream": true}'),
        400,
        "body.messages.0.content",
    ),
    "surrogate low half alone": Row(
        "POST",
        "/v1/completions",
        b'{"model": "chat", "prompt": "a\\udc00b", "echo": true, "max_tokens": 1}',
        400,
        "body.prompt",
    ),
    "surrogate in a key": Row("POST", "/v1/completions", _surrogate('{"model": "chat", @: 1, "prompt": "a"}'), 400),
    "surrogate model name": Row("POST", "/v1/embeddings", _surrogate('{"model": @, "input": "a"}'), 400, "body.model"),
    "surrogate faults model": Row("PUT", "/admin/faults", _surrogate("{@: {}}"), 400),
    "surrogate lora name": Row(
        "POST", "/v1/load_lora_adapter", _surrogate('{"lora_name": @, "lora_path": "/a"}'), 400, "body.lora_name"
    ),
    # Fault settings past their bounds (an hour's stall, a 1000x slowdown, a 64-bit seed).
    **{
        f"fault {field} {value}": Row(
            "PUT", "/admin/faults", f'{{"chat": {{"{field}": {value}}}}}'.encode(), 400, param
        )
        for field, value, param in [
            ("stall_ms", "1e308", "chat.stall_ms"),
            ("stall_ms", "Infinity", "chat.stall_ms"),
            ("stall_ms", "NaN", "chat.stall_ms"),
            ("slow_factor", "1e9", "chat.slow_factor"),
            ("seed", "1" + "0" * 40, "chat.seed"),
            ("rates", '{"stall": NaN}', "chat.rates.stall"),
        ]
    },
    "fault settings at their bounds": Row(
        "PUT",
        "/admin/faults",
        b'{"chat": {"stall_ms": 3600000, "slow_factor": 1000, "seed": -9223372036854775808}}',
        200,
    ),
    # A name echoed in an error is cut (the probe's 1 MB model name came back whole in the 404).
    "huge model name": Row(
        "POST", "/v1/embeddings", json.dumps({"model": "m" * 1_000_000, "input": "a"}).encode(), 404, "model"
    ),
    "huge tool_choice name": Row(
        "POST",
        "/v1/chat/completions",
        json.dumps(
            {
                "model": "chat",
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "t" * 1_000_000}},
            }
        ).encode(),
        400,
        "tool_choice",
    ),
    "surrogate pair is a character": Row(
        "POST",
        "/v1/completions",
        b'{"model": "chat", "prompt": "smile \\ud83d\\ude00", "echo": true, "max_tokens": 2, "stream": true}',
        200,
    ),
    "escaped backslash is not an escape": Row(
        "POST", "/tokenize", b'{"model": "chat", "prompt": "\\\\ud800", "return_token_strs": true}', 200
    ),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
async def test_hostile_input_is_refused_or_served(row: Row, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = build(tmp_path, monkeypatch)
    async with client(runtime) as http:
        response = await http.request(
            row.method, row.path, content=row.body, headers={"content-type": "application/json"}
        )
    if row.status >= 400:
        assert len(response.content) < 4096  # nothing the client sent is echoed whole
        error = assert_openai_error(response, row.status)
        if row.param is not None:
            assert error["param"] == row.param
        return
    assert response.status_code == row.status, response.text[:500]
    if response.headers["content-type"].startswith("text/event-stream"):
        assert response.text.endswith("data: [DONE]\n\n")
        assert '"error"' not in response.text
    else:
        response.json()
