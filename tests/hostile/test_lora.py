"""Runtime LoRA loads are bounded: name and path lengths, and a model's max_cpu_loras adapters."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmsim.api.lora_routes import MAX_NAME_CHARS, MAX_PATH_CHARS
from tests.hostile.app import assert_openai_error, build, client

# tests/hostile/app.py: the model "chat" has max_cpu_loras 3.
MAX_CPU_LORAS = 3


@pytest.mark.parametrize(
    ("name", "path", "param"),
    [
        ("n" * (MAX_NAME_CHARS + 1), "/a", "body.lora_name"),
        ("a", "/" * (MAX_PATH_CHARS + 1), "body.lora_path"),
        ("a", "/" * 2_000_000, "body.lora_path"),
    ],
)
async def test_long_names_and_paths_are_refused_briefly(
    name: str, path: str, param: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = build(tmp_path, monkeypatch)
    async with client(runtime) as http:
        r = await http.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": path})
        assert assert_openai_error(r, 400)["param"] == param
        assert len(r.content) < 4096
        assert runtime.state.lora_adapters == {}


async def test_loads_stop_at_max_cpu_loras_and_unloading_frees_a_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = build(tmp_path, monkeypatch)
    path = "/" * MAX_PATH_CHARS
    async with client(runtime) as http:
        for i in range(MAX_CPU_LORAS):
            r = await http.post("/v1/load_lora_adapter", json={"lora_name": f"a{i}", "lora_path": path})
            assert r.status_code == 200, r.text
        full = await http.post("/v1/load_lora_adapter", json={"lora_name": "extra", "lora_path": "/x"})
        assert "max_cpu_loras" in assert_openai_error(full, 400)["message"]
        # Reloading one in place is not a new adapter.
        again = {"lora_name": "a0", "lora_path": "/y", "load_inplace": True}
        assert (await http.post("/v1/load_lora_adapter", json=again)).status_code == 200
        for i in range(MAX_CPU_LORAS):
            assert (await http.post("/v1/unload_lora_adapter", json={"lora_name": f"a{i}"})).status_code == 200
        assert runtime.state.lora_adapters == {}
        assert runtime.state.models["chat"].lora_adapters == {}
        models = (await http.get("/v1/models")).json()["data"]
        assert [m["id"] for m in models] == ["chat", "embed"]
        assert (
            await http.post("/v1/load_lora_adapter", json={"lora_name": "extra", "lora_path": "/x"})
        ).status_code == 200


async def test_unloading_an_unknown_huge_name_is_a_short_404(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = build(tmp_path, monkeypatch)
    async with client(runtime) as http:
        r = await http.post("/v1/unload_lora_adapter", json={"lora_name": "n" * 1_000_000})
        assert_openai_error(r, 404)
        assert len(r.content) < 4096
