"""Data-parallel ranks in one process, in-process: which rank a request lands on, and what each rank reports.

Each rank is its own simulated GPU: a request's landing is read back from that rank's own series
on /metrics (``engine="<rank>"``) and from /v1/loads, never from the server's choice itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.api.response_models import ErrorResponse, LoadsResponse, ServerInfo
from llmsim.errors import ConfigError
from llmsim.runtime import Runtime
from tests.api.app_client import app_client, runtime_of
from tests.metrics.scrape import Page, parse

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
    data_parallel: {size: 4}
"""
RESPONSES = """
version: 1
responses: []
default:
  content: "Fine, thank you."
"""
#: A prompt of several 16-token blocks, so a repeat on the same rank hits its prefix cache.
LONG = "Tell me everything about the history of the printing press in Europe " * 6


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    return runtime_of(tmp_path, CONFIG, RESPONSES)


async def metrics(http: httpx.AsyncClient) -> Page:
    return parse((await http.get("/metrics")).text)


def requests_on(page: Page, rank: int) -> float:
    return page.get("vllm:request_success_total", model_name="base", engine=str(rank), finished_reason="length")


async def complete(http: httpx.AsyncClient, headers: dict[str, str] | None = None, **extra: Any) -> httpx.Response:
    body = {"model": "base", "prompt": LONG, "max_tokens": 2, **extra}
    return await http.post("/v1/completions", json=body, headers=headers or {})


async def test_every_rank_has_its_own_series_on_one_metrics_page(runtime: Runtime) -> None:
    async with app_client(runtime) as http:
        page = await metrics(http)
    for rank in range(4):
        assert page.get("vllm:num_requests_running", model_name="base", engine=str(rank)) == 0
        assert page.has("vllm:cache_config_info", model_name="base", engine=str(rank), **_cache_labels(page, rank))
    assert not page.has("vllm:num_requests_running", model_name="base", engine="4")


def _cache_labels(page: Page, rank: int) -> dict[str, str]:
    for name, labels in page.values:
        pairs = dict(labels)
        if name == "vllm:cache_config_info" and pairs.get("engine") == str(rank):
            return {k: v for k, v in pairs.items() if k not in ("model_name", "engine")}
    raise AssertionError(f"no cache_config_info for engine {rank}")


async def test_the_header_pins_a_request_to_its_rank(runtime: Runtime) -> None:
    async with app_client(runtime) as http:
        for _ in range(3):
            assert (await complete(http, {"X-data-parallel-rank": "2"})).status_code == 200
        page = await metrics(http)
    assert [requests_on(page, r) for r in range(4)] == [0, 0, 3, 0]
    # The same prompt three times on one GPU: the 2nd and 3rd hit the blocks the 1st stored.
    assert page.get("vllm:prefix_cache_hits_total", model_name="base", engine="2") > 0
    assert page.get("vllm:prefix_cache_queries_total", model_name="base", engine="1") == 0


async def test_the_sglang_body_field_pins_and_wins_over_the_header(runtime: Runtime) -> None:
    async with app_client(runtime) as http:
        assert (await complete(http, {"x-data-parallel-rank": "0"}, data_parallel_rank=3)).status_code == 200
        page = await metrics(http)
    assert [requests_on(page, r) for r in range(4)] == [0, 0, 0, 1]


async def test_a_rank_out_of_range_is_vllms_400(runtime: Runtime) -> None:
    async with app_client(runtime) as http:
        for pin in ({"headers": {"X-data-parallel-rank": "4"}}, {"data_parallel_rank": -1}):
            headers = pin.pop("headers", None)
            r = await complete(http, headers, **pin)  # type: ignore[arg-type]
            assert r.status_code == 400
            error = ErrorResponse.model_validate(r.json()).error
            assert error.type == "BadRequestError"
            rank = 4 if headers else -1
            assert error.message == f"data_parallel_rank {rank} is out of range [0, 4)."
        bad = await complete(http, None, data_parallel_rank="one")
        assert bad.status_code == 400


async def test_a_header_that_is_not_an_integer_is_ignored(runtime: Runtime) -> None:
    # vLLM's _get_data_parallel_rank: int() fails, so no rank: the server chooses.
    async with app_client(runtime) as http:
        assert (await complete(http, {"X-data-parallel-rank": "two"})).status_code == 200


async def test_unpinned_requests_spread_over_the_ranks(runtime: Runtime) -> None:
    # One at a time on an idle server: vLLM's scan start rotates and the chosen rank's waiting
    # count goes up until the next refresh, so four requests in a row land on four ranks.
    async with app_client(runtime) as http:
        for _ in range(4):
            assert (await complete(http)).status_code == 200
        page = await metrics(http)
    assert sorted(requests_on(page, r) for r in range(4)) == [1, 1, 1, 1]


async def test_loads_and_server_info_count_every_rank(runtime: Runtime) -> None:
    async with app_client(runtime) as http:
        loads = LoadsResponse.model_validate((await http.get("/v1/loads")).json())
        info = ServerInfo.model_validate((await http.get("/server_info")).json())
        load = (await http.get("/get_load")).json()
    assert [entry.dp_rank for entry in loads.loads] == [0, 1, 2, 3]
    assert info.dp_size == 4
    assert load == {"load": 0}


async def test_the_summary_merges_the_ranks_and_keeps_each(runtime: Runtime) -> None:
    async with app_client(runtime) as http:
        await complete(http, {"X-data-parallel-rank": "1"})
        await complete(http, {"X-data-parallel-rank": "3"})
        summary = (await http.get("/metrics/summary")).json()["models"]["base"]
    assert summary["requests"]["total"] == 2
    assert {rank: s["requests"]["total"] for rank, s in summary["ranks"].items()} == {"0": 0, "1": 1, "2": 0, "3": 1}


def test_one_rank_of_a_deployment_is_labelled_with_its_global_rank(tmp_path: Path) -> None:
    config = CONFIG.replace("data_parallel: {size: 4}", "data_parallel: {size: 4, rank: 2, load_balancing: external}")
    runtime = runtime_of(tmp_path, config, RESPONSES)
    page = parse(runtime.metrics.render().decode())
    assert page.has("vllm:num_requests_running", model_name="base", engine="2")
    assert not page.has("vllm:num_requests_running", model_name="base", engine="0")


def test_external_load_balancing_over_every_rank_needs_a_server_per_rank(tmp_path: Path) -> None:
    config = CONFIG.replace("data_parallel: {size: 4}", "data_parallel: {size: 4, load_balancing: external}")
    with pytest.raises(ConfigError, match="one server per rank"):
        runtime_of(tmp_path, config, RESPONSES)


def test_the_docs_example_runs_four_ranks(tmp_path: Path) -> None:
    # docs/data-parallel.md's models.yml example, served: four ranks on one port.
    docs = (Path(__file__).resolve().parents[2] / "docs" / "data-parallel.md").read_text()
    start = docs.index("```yaml") + len("```yaml")
    example = "version: 1\n" + docs[start : docs.index("```", start)]
    runtime = runtime_of(tmp_path, example, RESPONSES)
    served = runtime.state.models["llama-3.1-8b"]
    assert served.dp_ranks == (0, 1, 2, 3)
    assert len(runtime.metrics.ranks["llama-3.1-8b"]) == 4


async def test_one_rank_of_a_deployment_is_rank_0_to_sglang(tmp_path: Path) -> None:
    # /server_info says dp_size 1, so sglang-router pins data_parallel_rank 0 and reads the loads
    # entry with dp_rank 0: the server's own rank, whatever its global number.
    config = CONFIG.replace("data_parallel: {size: 4}", "data_parallel: {size: 4, rank: 2, load_balancing: external}")
    async with app_client(runtime_of(tmp_path, config, RESPONSES)) as http:
        loads = LoadsResponse.model_validate((await http.get("/v1/loads")).json())
        info = ServerInfo.model_validate((await http.get("/server_info")).json())
        assert (await complete(http, None, data_parallel_rank=0)).status_code == 200
        page = await metrics(http)
    assert [entry.dp_rank for entry in loads.loads] == [0]
    assert info.dp_size == 1
    assert requests_on(page, 2) == 1
