"""A client that leaves mid-body is its own business: no traceback, no ERROR line, nothing sent back."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from starlette.types import Message

from tests.api.asgi_driver import http_scope
from tests.hostile.app import build

BODY_ROUTES = [
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
]


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
async def test_a_client_leaving_mid_body_is_not_an_error(
    method: str, path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = build(tmp_path, monkeypatch)
    messages: list[Message] = [
        {"type": "http.request", "body": b'{"model": "chat", "mess', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return messages.pop(0) if len(messages) > 1 else messages[0]

    async def send(message: Message) -> None:
        sent.append(message)

    scope = http_scope(path, method, [(b"content-length", b"1000")])
    with caplog.at_level(logging.DEBUG):
        await runtime.app(scope, receive, send)  # raises if the disconnect escapes (a logged traceback)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "LoRA" not in r.getMessage()]
    assert all(r.exc_info is None for r in caplog.records)
    # Nobody is there to read an answer; none claims a server error.
    assert not [m for m in sent if m["type"] == "http.response.start" and m["status"] >= 500]
