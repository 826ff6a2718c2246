"""Data-parallel ranks behind the real routers from PyPI: vllm-router and sglang-router (``smg``).

Each test names what the router must do and checks where requests landed on the replicas' own
per-rank counters (``engine="<rank>"`` series on /metrics), never on the router's word. Request
counts are small and every wait is bounded; nothing asserts on wall-clock time.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from tests.metrics.scrape import Page, parse
from tests.support.server import ServerProcess, free_port, running_process, running_server
from tests.support.vllm_router import SGLANG_ROUTER, VLLM_ROUTER

CONFIG = """
version: 1
hardware:
  toy: {{hbm_gib: 2, memory_bandwidth_gbps: {bandwidth}, peak_tflops: 400}}
models:
  - name: sim
    engine: scheduler
    hardware: toy
    context_length: 4096
    weights: {{parameters_billions: 0.01}}
    kv_cache: {{bytes_per_token: 1024, block_size: 16}}
    data_parallel: {{size: {size}}}
"""
RESPONSES = "version: 1\nresponses: []\ndefault:\n  content: Fine, thank you.\n"
#: Several 16-token blocks, so a repeat on the rank that served it hits that rank's prefix cache.
PROMPT = "Tell me everything about the history of the printing press in Europe " * 6


def config(size: int, bandwidth: float = 2000) -> str:
    return CONFIG.format(size=size, bandwidth=bandwidth)


def metrics(server: ServerProcess, port: int | None = None) -> Page:
    return parse(httpx.get(f"http://127.0.0.1:{port or server.port}/metrics", timeout=10).text)


def finished(page: Page, rank: int) -> float:
    return page.get("vllm:request_success_total", model_name="sim", engine=str(rank), finished_reason="length")


def hits(page: Page, rank: int) -> float:
    return page.get("vllm:prefix_cache_hits_total", model_name="sim", engine=str(rank))


@contextmanager
def running_router(tmp_path: Path, argv: Sequence[str], startup_timeout: float = 60.0) -> Iterator[str]:
    """Start a router binary on a free port; yield its base URL once its /health answers 200.

    Both routers' Prometheus exporters bind 29000 by default: each gets a free port of its own.
    """
    port = free_port()
    argv = [*argv, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    url = f"http://127.0.0.1:{port}"
    argv = [*argv, "--host", "127.0.0.1", "--port", str(port)]
    with running_process(argv, tmp_path / f"router-{port}.log", url + "/health", name=argv[0], timeout=startup_timeout):
        yield url


def complete(url: str, prompt: str = PROMPT, max_tokens: int = 2) -> None:
    body = {"model": "sim", "prompt": prompt, "max_tokens": max_tokens}
    r = httpx.post(url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text


def sglang_argv(*args: str) -> list[str]:
    assert SGLANG_ROUTER is not None
    return [SGLANG_ROUTER, "launch", *args]


needs_vllm_router = pytest.mark.skipif(VLLM_ROUTER is None, reason="vllm-router is not installed (dev extra)")
needs_sglang_router = pytest.mark.skipif(SGLANG_ROUTER is None, reason="sglang-router is not installed (dev extra)")


@needs_vllm_router
def test_vllm_router_pins_a_repeated_prompt_to_the_rank_that_cached_it(tmp_path: Path) -> None:
    """vllm-router --intra-node-data-parallel-size 4 --policy cache_aware: the router treats each
    rank as a worker, sends ``x-data-parallel-rank`` with each request, and sends a prompt it has
    routed before back to the same rank. The server alone would spread six requests in a row over
    the four ranks (its scan start rotates), so all six on one rank is the router's pin, obeyed;
    the five repeats hit that rank's prefix cache."""
    assert VLLM_ROUTER is not None
    with running_server(tmp_path, config=config(4), responses=RESPONSES) as server:
        argv = [VLLM_ROUTER, "--worker-urls", server.base_url, "--policy", "cache_aware"]
        argv += ["--intra-node-data-parallel-size", "4"]
        with running_router(tmp_path, argv) as router:
            for _ in range(6):
                complete(router)
        page = metrics(server)
    landed = [finished(page, r) for r in range(4)]
    assert sorted(landed) == [0, 0, 0, 6]
    rank = landed.index(6)
    assert hits(page, rank) > 0
    assert all(hits(page, r) == 0 for r in range(4) if r != rank)


@needs_vllm_router
def test_vllm_router_power_of_two_avoids_the_loaded_replica(tmp_path: Path) -> None:
    """vllm-router --policy power_of_two over two replicas polls each one's /get_load and sends a
    request to the less loaded of two: with one replica busy with long requests, the new
    requests all go to the other."""
    assert VLLM_ROUTER is not None
    # A slow GPU (5 GB/s: ~4 ms a step for 20 MB of weights): the load requests run for seconds.
    slow = config(1, bandwidth=5)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with ExitStack() as stack:
        busy = stack.enter_context(running_server(tmp_path / "a", config=slow, responses=RESPONSES))
        idle = stack.enter_context(running_server(tmp_path / "b", config=slow, responses=RESPONSES))
        client = stack.enter_context(httpx.Client(timeout=60))
        # Eight long streams held open on the busy replica (closed, so aborted, at the end); their
        # readers are kept, as dropping one closes its connection.
        readers = []
        for _ in range(8):
            body = {"model": "sim", "prompt": "Load", "max_tokens": 4000, "ignore_eos": True, "stream": True}
            stream = stack.enter_context(client.stream("POST", busy.base_url + "/v1/completions", json=body))
            readers.append(stream.iter_bytes())
            next(readers[-1])
        assert httpx.get(busy.base_url + "/get_load").json() == {"load": 8}
        argv = [VLLM_ROUTER, "--worker-urls", busy.base_url, idle.base_url, "--policy", "power_of_two"]
        router = stack.enter_context(running_router(tmp_path, argv))
        # The router polls /get_load about every second: let it see the load (bounded, not asserted).
        time.sleep(2.5)
        for i in range(6):
            complete(router, prompt=f"Short question {i}")
        assert finished(metrics(idle), 0) == 6
        assert finished(metrics(busy), 0) == 0


@needs_vllm_router
def test_vllm_router_kv_aware_follows_each_ranks_kv_events(tmp_path: Path) -> None:
    """vllm-router --policy kv_aware with --kv-event-source (one ZMQ endpoint per rank, vLLM's
    port + rank): it indexes each rank's BlockStored events and sends a prompt to the rank that
    holds its blocks. Prompt A is first served on rank 0 and prompt B on rank 1 (pinned, straight
    to the server); then four of each through the router land on the rank holding them, each
    repeat a prefix-cache hit there."""
    assert VLLM_ROUTER is not None
    events = _two_free_ports()
    kv = config(2) + f'    kv_events: {{enable_kv_cache_events: true, endpoint: "tcp://*:{events}"}}\n'
    prompts = [PROMPT, "An entirely different question about ships, sails and the sea " * 6]
    with running_server(tmp_path, config=kv, responses=RESPONSES) as server:
        sources = f"{server.base_url}=tcp://127.0.0.1:{events},tcp://127.0.0.1:{events + 1}"
        argv = [VLLM_ROUTER, "--worker-urls", server.base_url, "--policy", "kv_aware"]
        argv += ["--intra-node-data-parallel-size", "2", "--kv-event-source", sources, "--kv-event-model", "sim"]
        with running_router(tmp_path, argv) as router:
            # The router's SUB sockets connect as it starts: give them a moment before the events
            # it must see (ZMQ drops what a PUB sends before a subscriber is there).
            time.sleep(1.0)
            for rank, prompt in enumerate(prompts):
                body = {"model": "sim", "prompt": prompt, "max_tokens": 2}
                r = httpx.post(
                    server.base_url + "/v1/completions", json=body, headers={"X-data-parallel-rank": str(rank)}
                )
                assert r.status_code == 200
            time.sleep(1.0)
            for _ in range(4):
                for prompt in prompts:
                    complete(router, prompt=prompt)
        page = metrics(server)
    assert [finished(page, r) for r in range(2)] == [5, 5]
    assert hits(page, 0) > 0
    assert hits(page, 1) > 0


@needs_sglang_router
def test_sglang_router_dp_aware_pins_ranks_through_the_body(tmp_path: Path) -> None:
    """sglang-router --dp-aware --policy cache_aware: it reads ``dp_size`` (4) from /server_info,
    treats each rank as a worker and names it in the body's ``data_parallel_rank``; a repeated
    prompt goes back to the rank whose prefix cache holds it."""
    with running_server(tmp_path, config=config(4), responses=RESPONSES) as server:
        argv = sglang_argv("--worker-urls", server.base_url, "--policy", "cache_aware", "--dp-aware")
        with running_router(tmp_path, argv) as router:
            for _ in range(6):
                complete(router)
        page = metrics(server)
    landed = [finished(page, r) for r in range(4)]
    assert sorted(landed) == [0, 0, 0, 6]
    rank = landed.index(6)
    assert hits(page, rank) > 0
    assert all(hits(page, r) == 0 for r in range(4) if r != rank)


@needs_sglang_router
def test_sglang_router_round_robin_dp_aware_reaches_every_rank(tmp_path: Path) -> None:
    """sglang-router --dp-aware --policy round_robin: each of the 4 ranks is a worker, taken in
    turn, so 8 requests put 2 on each rank."""
    with running_server(tmp_path, config=config(4), responses=RESPONSES) as server:
        argv = sglang_argv("--worker-urls", server.base_url, "--policy", "round_robin", "--dp-aware")
        with running_router(tmp_path, argv) as router:
            for i in range(8):
                complete(router, prompt=f"Question number {i}")
        page = metrics(server)
    assert [finished(page, r) for r in range(4)] == [2, 2, 2, 2]


def _two_free_ports() -> int:
    """A port P with P + 1 free too (a server with two ranks on two ports)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two consecutive free ports")


def test_external_load_balancing_serves_each_rank_on_its_own_port(tmp_path: Path) -> None:
    """vLLM's --data-parallel-multi-port-external-lb in one process: rank r on port + r, each port's
    /metrics showing its own rank only (``dp_size: 1`` on /server_info)."""
    port = _two_free_ports()
    multi = config(2).replace("{size: 2}", "{size: 2, load_balancing: external}")
    with running_server(tmp_path, config=multi, responses=RESPONSES, port=port) as server:
        pages = {}
        for rank in range(2):
            url = f"http://127.0.0.1:{port + rank}"
            complete(url)
            # Streamed too: every port's step loops release on the one event loop they share.
            body = {"model": "sim", "prompt": "Hello", "max_tokens": 5, "ignore_eos": True, "stream": True}
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
                events = [line for line in r.iter_lines() if line.startswith("data: ")]
            assert events[-1] == "data: [DONE]"
            assert len(events) == 5 + 1
            pages[rank] = metrics(server, port + rank)
            assert httpx.get(url + "/server_info").json()["dp_size"] == 1
    for rank, page in pages.items():
        assert finished(page, rank) == 2
        assert not page.has("vllm:num_requests_running", model_name="sim", engine=str(1 - rank))


@needs_vllm_router
def test_vllm_router_treats_each_ranks_port_as_a_replica(tmp_path: Path) -> None:
    """vllm-router --policy cache_aware over the ports of an external-load-balancing server (the
    llm-d layout: one target per rank): a repeated prompt goes back to the port, so the rank, that
    cached it."""
    assert VLLM_ROUTER is not None
    port = _two_free_ports()
    multi = config(2).replace("{size: 2}", "{size: 2, load_balancing: external}")
    with running_server(tmp_path, config=multi, responses=RESPONSES, port=port) as server:
        urls = [f"http://127.0.0.1:{port + rank}" for rank in range(2)]
        argv = [VLLM_ROUTER, "--worker-urls", *urls, "--policy", "cache_aware"]
        with running_router(tmp_path, argv) as router:
            for _ in range(4):
                complete(router)
        landed = [finished(metrics(server, port + rank), rank) for rank in range(2)]
        cached = [hits(metrics(server, port + rank), rank) for rank in range(2)]
    assert sorted(landed) == [0, 4]
    assert cached[landed.index(4)] > 0
