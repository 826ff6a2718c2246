"""The app in process, as the route tests reach it: a runtime built from YAML texts, an httpx client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from llmsim.runtime import Runtime, build_runtime


def runtime_of(tmp_path: Path, config: str, responses: str) -> Runtime:
    """A runtime of ``config`` (models.yml) and ``responses`` (responses.yml), written to ``tmp_path``."""
    (tmp_path / "models.yml").write_text(config)
    (tmp_path / "responses.yml").write_text(responses)
    return build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml")


@asynccontextmanager
async def app_client(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client that calls ``runtime``'s app in this process."""
    transport = httpx.ASGITransport(app=runtime.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def named_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Each SSE event's ``event:`` name and its JSON data (Anthropic's and the Responses API's shape)."""
    out = []
    for block in text.split("\n\n"):
        if not block:
            continue
        name_line, data_line = block.split("\n")
        assert name_line.startswith("event: ")
        assert data_line.startswith("data: ")
        out.append((name_line[len("event: ") :], json.loads(data_line[len("data: ") :])))
    return out
