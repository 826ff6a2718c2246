"""The API in-process (httpx ASGITransport): shapes, compatibility with what clients send, errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response

from llmsim.runtime import build_runtime

CONFIG = """
version: 1
models:
  - {name: instant, engine: instant, context_length: 64}
"""

RESPONSES = """
version: 1
responses:
  - id: greet
    match: {exact: "Hello!"}
    content: "Hi there, how can I help?"
  - id: echo
    match: {regex: "^repeat (?P<what>.+)$"}
    content: "You said {what} to {model}."
default:
  content: "I am a simulator."
"""


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    runtime = build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml")
    transport = httpx.ASGITransport(app=runtime.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def sse_events(body: str) -> list[Any]:
    events = [line[len("data: ") :] for line in body.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def chat(content: Any, **kw: Any) -> dict[str, Any]:
    return {"model": "instant", "messages": [{"role": "user", "content": content}], **kw}


async def test_regex_groups_and_model_fill_the_template(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat("repeat blue sky"))
    assert r.json()["choices"][0]["message"]["content"] == "You said blue sky to instant."


async def test_stop_sequence_cuts_the_scripted_text(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat("Hello!", stop=[" how", "zzz"]))
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == "Hi there,"
    assert choice["finish_reason"] == "stop"


async def test_max_completion_tokens_wins_over_max_tokens(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat("Hello!", max_tokens=5, max_completion_tokens=2))
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "Hi there"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 2


async def test_stream_chunks_role_first_then_tokens_then_usage(http: httpx.AsyncClient) -> None:
    r = await http.post(
        "/v1/chat/completions",
        json=chat("Hello!", stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True}),
    )
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    token_events = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert "".join(e["choices"][0]["delta"]["content"] for e in token_events) == "Hi there, how can I help?"
    # continuous usage: completion tokens count up 1, 2, ... 8 on the token chunks
    assert [e["usage"]["completion_tokens"] for e in token_events] == list(range(1, 9))
    assert token_events[-1]["choices"][0]["finish_reason"] == "stop"
    assert events[-1]["choices"] == []
    assert events[-1]["usage"]["completion_tokens"] == 8
    assert len({e["id"] for e in events}) == 1


async def test_completions_accepts_string_list_and_token_ids(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/completions", json={"model": "instant", "prompt": ["Hello!", "other"], "max_tokens": 30})
    choices = r.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    assert [c["text"] for c in choices] == ["Hi there, how can I help?", "I am a simulator."]
    ids = await http.post("/v1/completions", json={"model": "instant", "prompt": [1, 2, 3, 4, 5]})
    body = ids.json()
    assert body["usage"]["prompt_tokens"] == 5  # token ids count as given
    assert body["choices"][0]["text"] == "I am a simulator."


async def test_completions_default_max_tokens_is_16(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/completions", json={"model": "instant", "prompt": "x", "ignore_eos": True})
    assert r.json()["usage"]["completion_tokens"] == 16


async def test_unknown_sampling_parameters_are_accepted(http: httpx.AsyncClient) -> None:
    r = await http.post(
        "/v1/chat/completions",
        json=chat("Hello!", temperature=0.2, top_p=0.9, presence_penalty=1, logit_bias={"1": 2}, tools=[], user="u"),
    )
    assert r.status_code == 200


@pytest.mark.parametrize(
    ("body", "err_type", "param", "message"),
    [
        (
            {"model": "instant", "messages": []},
            "Bad Request",
            "body.messages",
            "1 validation error:\n  {'type': 'too_short'",
        ),
        (
            {"model": "instant", "messages": [{"role": "wizard", "content": "x"}]},
            "Bad Request",
            "body.messages.0.role",
            "1 validation error:\n  {'type': 'literal_error', 'loc': 'body.messages.0.role'",
        ),
        (
            chat("x", max_tokens=0),
            "BadRequestError",
            "max_tokens",
            "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
        ),
        (chat("x", n=0), "BadRequestError", None, "n must be at least 1, got 0."),
        ({"messages": [{"role": "user", "content": "x"}]}, "Bad Request", "body.model", "1 validation error:"),
    ],
)
async def test_validation_errors_are_400_with_vllm_type_and_param(
    http: httpx.AsyncClient, body: Any, err_type: str, param: str | None, message: str
) -> None:
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == err_type
    assert err["code"] == 400
    assert err["param"] == param
    assert err["message"].startswith(message)


async def test_image_parts_are_refused_by_a_text_model(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat([{"type": "image_url", "image_url": {"url": "x"}}]))
    assert r.status_code == 400
    assert "image_url" in r.json()["error"]["message"]


async def test_prompt_plus_max_tokens_over_context_is_400(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat("Hello!", max_tokens=60))
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "max_tokens"
    assert "maximum context length is 64 tokens" in err["message"]


async def test_unknown_route_and_method_are_openai_shaped(http: httpx.AsyncClient) -> None:
    r = await http.get("/v1/nothing")
    assert r.status_code == 404
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = await http.get("/v1/chat/completions")
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"


async def test_added_middleware_also_sees_the_completion_routes(tmp_path: Path) -> None:
    """The completion routes' shortcut past FastAPI's stack must not hide them from user middleware."""
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    runtime = build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml")
    seen: list[str] = []

    @runtime.app.middleware("http")
    async def record(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        seen.append(request.url.path)
        response = await call_next(request)
        response.headers["x-seen-by"] = "middleware"
        return response

    transport = httpx.ASGITransport(app=runtime.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for path, payload in (
            ("/v1/chat/completions", {"model": "instant", "messages": [{"role": "user", "content": "Hello!"}]}),
            ("/v1/completions", {"model": "instant", "prompt": "Hello!", "stream": True}),
        ):
            r = await client.post(path, json=payload)
            assert r.status_code == 200
            assert r.headers["x-seen-by"] == "middleware"
    assert seen == ["/v1/chat/completions", "/v1/completions"]


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_a_body_over_the_limit_is_413_in_openais_shape(tmp_path: Path, declared: bool) -> None:
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    limit = 1000
    runtime = build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml", max_request_bytes=limit)
    payload = json.dumps({"model": "instant", "prompt": "x" * 2000}).encode()
    content: bytes | AsyncIterator[bytes] = payload
    if not declared:

        async def chunks() -> AsyncIterator[bytes]:
            for i in range(0, len(payload), 256):
                yield payload[i : i + 256]

        content = chunks()
    transport = httpx.ASGITransport(app=runtime.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        r = await client.post("/v1/completions", content=content, headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert r.json() == {
            "error": {
                "message": f"The request body is larger than the server's limit of {limit} bytes"
                " (llmsim serve --max-request-bytes).",
                "type": "RequestEntityTooLarge",
                "param": None,
                "code": 413,
            }
        }
        # Just under the limit is served.
        small = json.dumps({"model": "instant", "prompt": "x" * 900})
        assert len(small) <= limit
        ok = await client.post("/v1/completions", content=small, headers={"content-type": "application/json"})
        assert ok.status_code == 200
