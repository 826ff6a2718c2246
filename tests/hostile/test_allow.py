"""405 answers: for every route of the app, Allow lists exactly the methods the path serves."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from starlette.routing import Route

from tests.hostile.app import assert_openai_error, build, client

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


async def test_allow_lists_every_method_each_path_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = build(tmp_path, monkeypatch)
    served: dict[str, set[str]] = defaultdict(set)
    for route in runtime.app.routes:
        if isinstance(route, Route) and route.methods is not None and "{" not in route.path:
            served[route.path] |= route.methods
    assert {"/ping", "/metrics/summary", "/admin/faults", "/v1/chat/completions"} <= served.keys()
    assert served["/ping"] == {"GET", "POST"}
    async with client(runtime) as http:
        for path, methods in served.items():
            for method in METHODS:
                if method in methods:
                    continue
                response = await http.request(method, path)
                if method == "HEAD":  # no body to a HEAD
                    assert response.status_code == 405
                else:
                    assert_openai_error(response, 405)
                allow = {m.strip() for m in response.headers["allow"].split(",")}
                assert allow == methods, (method, path)
