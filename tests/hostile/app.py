"""The app the hostile-client tests attack: every optional route on, two models, a script that echoes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.api.access import Access
from llmsim.api.dev_routes import DEV_MODE_SWITCH
from llmsim.api.lora_routes import ENV_SWITCH
from llmsim.runtime import Runtime, build_runtime

CONFIG = """
version: 1
models:
  - {name: chat, engine: instant, context_length: 96, lora: {max_loras: 1, max_cpu_loras: 3}}
  - {name: embed, engine: instant, context_length: 96, embeddings: {dimensions: 16}}
"""

RESPONSES = """
version: 1
responses:
  - id: echo
    match: {regex: "^repeat (?P<what>.+)$"}
    content: "You said {what}."
  - id: as-json
    match: {starts_with: "JSON"}
    json: {answer: "{last_user_message}"}
default:
  content: "I am a simulator."
"""

API_KEY = "api-key"
ADMIN_KEY = "admin-key"


def build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, access: Access | None = None) -> Runtime:
    """The runtime with runtime LoRA updating and vLLM's dev-mode routes switched on."""
    monkeypatch.setenv(ENV_SWITCH, "1")
    monkeypatch.setenv(DEV_MODE_SWITCH, "1")
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    return build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml", access=access)


@asynccontextmanager
async def client(runtime: Runtime, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client; an exception escaping the app is a test failure (it would be a 500)."""
    transport = httpx.ASGITransport(app=runtime.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as c:
        yield c


def assert_openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """``response`` is ``status`` with OpenAI's error body; returns the error object."""
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    return dict(error)
