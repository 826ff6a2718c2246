"""With both keys set, every route that changes the server takes the admin key, and only it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llmsim.api.access import Access
from tests.hostile.app import ADMIN_KEY, API_KEY, build, client

CHANGES: list[tuple[str, str, dict[str, Any] | None, int]] = [
    ("POST", "/reset_prefix_cache", None, 200),
    ("DELETE", "/metrics/summary", None, 204),
    ("POST", "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": "/a"}, 200),
    ("PUT", "/admin/faults", {}, 200),
    ("POST", "/wake_up", None, 200),
]


@pytest.mark.parametrize(("method", "path", "body", "status"), CHANGES)
async def test_routes_that_change_the_server_take_the_admin_key(
    method: str, path: str, body: dict[str, Any] | None, status: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = build(tmp_path, monkeypatch, Access([API_KEY], [ADMIN_KEY]))
    for key, expected in ((None, 401), (API_KEY, 401), (ADMIN_KEY, status)):
        headers = {"authorization": f"Bearer {key}"} if key else {}
        async with client(runtime, **headers) as http:
            response = await http.request(method, path, json=body)
        assert response.status_code == expected, (key, response.text)
