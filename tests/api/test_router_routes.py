"""The routes routers call besides completions, in-process: render, token-in/token-out, load, SGLang's info.

And the extra body fields the P/D and DP routers add to completion requests: accepted, as vLLM accepts them.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.runtime import Runtime, build_runtime

# A fast toy GPU with a prefix cache, so the plans carry the prompt ids the engine hashes.
CONFIG = """
version: 1
hardware:
  toy: {hbm_gib: 2, memory_bandwidth_gbps: 2000, peak_tflops: 400}
models:
  - name: base
    engine: scheduler
    hardware: toy
    context_length: 1024
    weights: {parameters_billions: 0.01}
    kv_cache: {bytes_per_token: 1024, block_size: 16}
    enable_prompt_tokens_details: true
"""
RESPONSES = """
version: 1
responses: []
default:
  content: "Fine, thank you."
"""
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How are you today?"}]

#: What vllm-router adds to every P/D leg (chat: also ``logprobs: false``), and sglang-router to its
#: P/D and DP bodies.
ROUTER_FIELDS: dict[str, Any] = {
    "no_stop_trim": True,
    "ignore_eos": False,
    "continue_final_message": False,
    "skip_special_tokens": True,
    "separate_reasoning": True,
    "stream_reasoning": True,
    "return_hidden_states": False,
    "include_reasoning": True,
    "min_tokens": 1,
    "max_completion_tokens": 1,
    "data_parallel_rank": 0,
    "bootstrap_host": "10.0.0.7",
    "bootstrap_port": 8998,
    "bootstrap_room": 6_917_529_027_641_081_856,
    "kv_transfer_params": {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    },
}


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    return build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml")


@pytest.fixture
async def http(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=runtime.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_the_routers_extra_fields_are_accepted_and_named_in_the_log(
    http: httpx.AsyncClient, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    chat = path.endswith("chat/completions")
    shape: dict[str, Any] = {"messages": MESSAGES, "logprobs": False} if chat else {"prompt": "Hi"}
    with caplog.at_level(logging.WARNING, logger="llmsim.api"):
        r = await http.post(path, json={"model": "base", **shape, **ROUTER_FIELDS, "max_tokens": 1})
    assert r.status_code == 200
    assert r.json()["choices"][0]["finish_reason"] == "length"
    ignored = [rec.getMessage() for rec in caplog.records if "ignored" in rec.getMessage()]
    assert len(ignored) == 1
    assert "bootstrap_room" in ignored[0]
    assert "data_parallel_rank" in ignored[0]
