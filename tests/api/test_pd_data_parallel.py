"""Disaggregated prefill/decode with data-parallel ranks behind one port (internal load balancing).

As in vLLM, each rank is its own engine with its own engine id and NIXL side channel on
``side_channel_port + rank``; a prefill answer names the engine id and port of the rank that served
the leg, and its blocks are held, and freed, on that rank only (docs/pd.md).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.api.served import ServedModel
from llmsim.runtime import Runtime, side_channels
from tests.api.app_client import app_client, runtime_of
from tests.metrics.scrape import parse

CONFIG = """
version: 1
hardware:
  toy: {{hbm_gib: 2, memory_bandwidth_gbps: 2000, peak_tflops: 400}}
models:
  - name: m
    engine: scheduler
    hardware: toy
    context_length: 1024
    weights: {{parameters_billions: 0.01}}
    kv_cache: {{bytes_per_token: 1024, block_size: 16}}
    data_parallel: {{size: 2}}
    kv_transfer: {{kv_role: kv_both, side_channel_host: 127.0.0.1, side_channel_port: {port}}}
"""
RESPONSES = "version: 1\nresponses: []\ndefault: {content: Fine thank you}\n"
PROMPT = "Tell me everything about the history of the printing press in Europe " * 4
PREFILL_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def two_free_ports() -> int:
    """A port p with p + 1 also free (the two ranks' side channels)."""
    for _ in range(50):
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", 0))
            port: int = a.getsockname()[1]
            try:
                b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    pytest.fail("no two consecutive free ports")


@pytest.fixture
def side_port() -> int:
    return two_free_ports()


@pytest.fixture
async def served(tmp_path: Path, side_port: int) -> AsyncIterator[tuple[Runtime, ServedModel]]:
    runtime = runtime_of(tmp_path, CONFIG.format(port=side_port), RESPONSES)
    model = runtime.state.models["m"]
    channels = side_channels(runtime.state.models)
    for channel in channels:
        await channel.start()
    try:
        yield runtime, model
    finally:
        await model.engine.stop()
        for channel in channels:
            await channel.stop()


async def prefill(http: httpx.AsyncClient, rank: int | None = None) -> dict[str, Any]:
    headers = {"X-data-parallel-rank": str(rank)} if rank is not None else {}
    body = {"model": "m", "prompt": PROMPT, "max_tokens": 1, "kv_transfer_params": PREFILL_PARAMS}
    answer = (await http.post("/v1/completions", json=body, headers=headers)).json()
    params: dict[str, Any] = answer["kv_transfer_params"]
    return params


def holders(model: ServedModel, request_id: str) -> list[int]:
    return [rank for rank, engine in model.ranks() if engine.held_blocks(request_id) is not None]


async def test_each_rank_has_its_own_engine_id_and_side_channel_port(
    served: tuple[Runtime, ServedModel], side_port: int
) -> None:
    _, model = served
    infos = model.rank_kv_transfers
    assert [info.port for info in infos] == [side_port, side_port + 1]
    # vLLM's engine core: the server's engine id with "_dp<rank>" appended, one per rank.
    base = infos[0].engine_id.removesuffix("_dp0")
    assert [info.engine_id for info in infos] == [f"{base}_dp0", f"{base}_dp1"]
    assert {(c.host, c.port) for c in side_channels({"m": model})} == {
        ("127.0.0.1", side_port),
        ("127.0.0.1", side_port + 1),
    }


@pytest.mark.parametrize("rank", [0, 1])
async def test_the_prefill_answer_names_the_serving_ranks_engine_and_port(
    served: tuple[Runtime, ServedModel], side_port: int, rank: int
) -> None:
    runtime, model = served
    async with app_client(runtime) as http:
        params = await prefill(http, rank)
    request_id = params["remote_request_id"]
    assert params["remote_port"] == side_port + rank
    assert params["remote_engine_id"] == model.rank_kv_transfers[rank].engine_id
    # Held on that rank only, and the answer's blocks are that rank's.
    assert holders(model, request_id) == [rank]
    assert model.rank_engines[rank].held_blocks(request_id) == tuple(params["remote_block_ids"][0])
    assert model.engine.release_held(request_id)
    assert holders(model, request_id) == []


async def test_an_unpinned_prefill_names_the_rank_the_balancer_chose(
    served: tuple[Runtime, ServedModel], side_port: int
) -> None:
    runtime, model = served
    async with app_client(runtime) as http:
        answers = [await prefill(http) for _ in range(4)]
    for params in answers:
        (rank,) = holders(model, params["remote_request_id"])
        assert params["remote_port"] == side_port + rank
        assert params["remote_engine_id"] == model.rank_kv_transfers[rank].engine_id
    # Held blocks keep both ranks busy, so the balancer used both.
    assert {a["remote_port"] for a in answers} == {side_port, side_port + 1}


async def test_a_rank_side_channel_knows_only_its_own_engine(served: tuple[Runtime, ServedModel]) -> None:
    runtime, model = served
    async with app_client(runtime) as http:
        params = await prefill(http, 1)
    by_port = {c.port: c for c in side_channels({"m": model})}
    check = {"op": "check", "engine_id": params["remote_engine_id"], "request_id": params["remote_request_id"]}
    # vLLM: rank r's NIXL agent is reached on port + r; another rank's port does not know it.
    assert by_port[params["remote_port"]].answer(check)["ok"]
    assert by_port[params["remote_port"] - 1].answer(check) == {"ok": False, "reason": "unknown engine"}
    assert model.engine.release_held(params["remote_request_id"])


# Across ranks: the decode rank's prefix cache has never seen the prompt, so it pulls all of it.
@pytest.mark.parametrize(("prefill_rank", "decode_rank"), [(1, 0), (0, 1)])
async def test_a_decode_leg_on_any_rank_pulls_from_the_prefill_rank_and_frees_it(
    served: tuple[Runtime, ServedModel], prefill_rank: int, decode_rank: int
) -> None:
    runtime, model = served
    async with app_client(runtime) as http:
        params = await prefill(http, prefill_rank)
        body = {"model": "m", "prompt": PROMPT, "max_tokens": 3, "kv_transfer_params": params}
        decode = await http.post("/v1/completions", json=body, headers={"X-data-parallel-rank": str(decode_rank)})
        page = parse((await http.get("/metrics")).text)
    assert decode.status_code == 200
    assert decode.json()["usage"]["completion_tokens"] == 3
    assert holders(model, params["remote_request_id"]) == []
    # vLLM's PromptTokenStats: the decode rank counts the whole prompt as external, the last token
    # recomputed; the prefill rank counted it as local compute; neither counted the other's share.
    prompt_tokens = decode.json()["usage"]["prompt_tokens"]

    def by_source(rank: int, source: str) -> float:
        return page.get("vllm:prompt_tokens_by_source_total", model_name="m", engine=str(rank), source=source)

    assert by_source(decode_rank, "external_kv_transfer") == prompt_tokens
    assert page.get("vllm:prompt_tokens_recomputed_total", model_name="m", engine=str(decode_rank)) == 1
    assert by_source(prefill_rank, "external_kv_transfer") == 0
    assert by_source(prefill_rank, "local_compute") == prompt_tokens
    # Nothing stays allocated on any rank.
    for rank in (0, 1):
        assert page.get("vllm:kv_cache_usage_perc", model_name="m", engine=str(rank)) == 0
