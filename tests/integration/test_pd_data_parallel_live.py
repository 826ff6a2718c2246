"""Disaggregated prefill/decode with data-parallel ranks behind one port, in real processes: a
prefill server (kv_producer) and a decode server (kv_consumer), two ranks each with internal load
balancing, legs sent by hand and through ``vllm-router --vllm-pd-disaggregation``.

What must hold, from vLLM (each DP rank is its own engine with its own NIXL side channel on
``side_channel_port + rank``; docs/pd.md): a prefill answer's ``remote_port`` is the side-channel
port plus the rank that served the leg; the blocks are held on that rank and freed there once the
decode leg (on whichever rank) has pulled them; afterwards no rank of either server holds a block
(per-rank ``vllm:kv_cache_usage_perc{engine="r"}``); the prefill ranks' prompt tokens and the
decode ranks' pulled tokens each add up to the prompts' tokens. Waits are bounded polls; nothing
asserts on wall-clock time.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from tests.metrics.scrape import Page, parse
from tests.support.server import ServerProcess, free_port, running_server, stop_process
from tests.support.vllm_router import router_binary

pytestmark = pytest.mark.integration

MODEL = "m"
CONFIG = """
version: 1
hardware:
  toy: {{hbm_gib: 2, memory_bandwidth_gbps: 2000, peak_tflops: 400}}
models:
  - name: m
    engine: scheduler
    hardware: toy
    context_length: 4096
    weights: {{parameters_billions: 0.01}}
    kv_cache: {{bytes_per_token: 1024, block_size: 16}}
    data_parallel: {{size: 2}}
    kv_transfer: {{kv_role: {role}, side_channel_host: 127.0.0.1, side_channel_port: {side_port}}}
"""
RESPONSES = "version: 1\nresponses: []\ndefault:\n  content: Fine, thank you.\n"
RANKS = (0, 1)
# Distinct first words: no prompt shares a first block with another, so no rank's prefix cache
# serves part of a prompt and every decode leg pulls its whole prompt.
PROMPTS = [
    f"{word} river ran to the sea, and the sea was wide. Once upon a time, a river met the sea {i}."
    for i, word in enumerate(["Once", "The", "Hello", "River", "Sea", "Time", "Wide", "How", "Today", "Upon"])
]


@dataclass
class Pair:
    prefill: ServerProcess
    decode: ServerProcess
    side_port: int
    router_url: str
    root: Path


def _two_free_ports() -> int:
    """A port p with p + 1 also free: the prefill server's two ranks' side channels."""
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


@contextmanager
def _router(root: Path, prefill: ServerProcess, decode: ServerProcess, *extra: str) -> Iterator[str]:
    """``vllm-router --vllm-pd-disaggregation`` in front of the pair, healthy; its URL."""
    port = free_port()
    args = [router_binary("vllm-router"), "--host", "127.0.0.1", "--port", str(port), "--vllm-pd-disaggregation"]
    args += ["--prefill", prefill.base_url, "--decode", decode.base_url, "--policy", "round_robin", *extra]
    args += ["--log-level", "warning", "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    log_path = root / f"router-{port}.log"
    with log_path.open("wb") as log:
        router = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert router.poll() is None, log_path.read_text()
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "vllm-router not healthy after 60 s"
            time.sleep(0.2)
        yield url
    finally:
        stop_process(router)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("pddp")
    with ExitStack() as stack:

        def start(role: str, side_port: int) -> ServerProcess:
            where = root / role
            where.mkdir()
            config = CONFIG.format(role=role, side_port=side_port)
            return stack.enter_context(running_server(where, config=config, responses=RESPONSES))

        side_port = _two_free_ports()
        prefill = start("kv_producer", side_port)
        decode = start("kv_consumer", _two_free_ports())
        url = stack.enter_context(_router(root, prefill, decode))
        yield Pair(prefill, decode, side_port, url, root)


def _page(server: ServerProcess) -> Page:
    return parse(httpx.get(server.base_url + "/metrics", timeout=5).text)


def _usage(server: ServerProcess, rank: int) -> float:
    return _page(server).get("vllm:kv_cache_usage_perc", model_name=MODEL, engine=str(rank))


def _until_freed(servers: list[ServerProcess], bound_s: float = 30.0) -> None:
    """Poll (bounded) until no rank of ``servers`` holds a block."""
    deadline = time.monotonic() + bound_s
    while any(_usage(s, r) != 0.0 for s in servers for r in RANKS):
        assert time.monotonic() < deadline, [(s.base_url, r, _usage(s, r)) for s in servers for r in RANKS]
        time.sleep(0.1)


def _by_source(page: Page, rank: int, source: str) -> float:
    return page.get("vllm:prompt_tokens_by_source_total", model_name=MODEL, engine=str(rank), source=source)


@pytest.mark.parametrize(("prefill_rank", "decode_rank"), [(0, 1), (1, 0), (1, 1)])
def test_a_leg_by_hand_names_its_rank_and_is_freed_there(pair: Pair, prefill_rank: int, decode_rank: int) -> None:
    _until_freed([pair.prefill, pair.decode])
    # Its own first block: no other test's prompt is in a decode rank's prefix cache.
    prompt = f"By hand {prefill_rank}{decode_rank}: " + PROMPTS[0]
    before = _page(pair.decode)
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}
    pinned = {"X-data-parallel-rank": str(prefill_rank)}
    answer = httpx.post(pair.prefill.base_url + "/v1/completions", json=body, headers=pinned, timeout=30).json()
    params = answer["kv_transfer_params"]
    # vLLM: the serving rank's side channel, VLLM_NIXL_SIDE_CHANNEL_PORT + dp rank.
    assert params["remote_port"] == pair.side_port + prefill_rank
    # vLLM's engine core appends "_dp<rank>" to the server's engine id.
    assert params["remote_engine_id"].endswith(f"_dp{prefill_rank}")
    assert params["remote_block_ids"][0]
    # Held on the serving rank only, until pulled.
    assert _usage(pair.prefill, prefill_rank) > 0
    assert _usage(pair.prefill, 1 - prefill_rank) == 0
    leg = {"model": MODEL, "prompt": prompt, "max_tokens": 4, "kv_transfer_params": params}
    decoded = httpx.post(
        pair.decode.base_url + "/v1/completions",
        json=leg,
        headers={"X-data-parallel-rank": str(decode_rank)},
        timeout=30,
    )
    assert decoded.status_code == 200
    assert decoded.json()["usage"]["completion_tokens"] == 4
    _until_freed([pair.prefill, pair.decode])
    after = _page(pair.decode)
    prompt_tokens = answer["usage"]["prompt_tokens"]
    pulled = [
        _by_source(after, r, "external_kv_transfer") - _by_source(before, r, "external_kv_transfer") for r in RANKS
    ]
    assert pulled[decode_rank] == prompt_tokens
    assert pulled[1 - decode_rank] == 0


def _through_router(pair: Pair, router_url: str, prompts: list[str]) -> tuple[list[float], list[float]]:
    """Send ``prompts`` through the router (streamed and not); check every prompt token was computed
    once on some prefill rank and pulled once by some decode rank, and no block is left held.
    Returns the prefill legs each prefill rank served and the tokens each decode rank pulled."""
    _until_freed([pair.prefill, pair.decode])
    prefill_before, decode_before = _page(pair.prefill), _page(pair.decode)
    client = openai.OpenAI(base_url=router_url + "/v1", api_key="none", max_retries=0, timeout=60)
    prompt_tokens = 0
    for i, prompt in enumerate(prompts):
        if i % 2:
            stream = client.completions.create(
                model=MODEL, prompt=prompt, max_tokens=5, stream=True, stream_options={"include_usage": True}
            )
            chunks = list(stream)
            assert "".join(c.choices[0].text for c in chunks if c.choices)
            usage = chunks[-1].usage
        else:
            completion = client.completions.create(model=MODEL, prompt=prompt, max_tokens=5)
            assert completion.choices[0].text
            usage = completion.usage
        assert usage is not None
        prompt_tokens += usage.prompt_tokens
    _until_freed([pair.prefill, pair.decode])
    prefill_after, decode_after = _page(pair.prefill), _page(pair.decode)

    def rise(before: Page, after: Page, name: str, rank: int, **labels: str) -> float:
        return after.get(name, model_name=MODEL, engine=str(rank), **labels) - before.get(
            name, model_name=MODEL, engine=str(rank), **labels
        )

    # Every prompt token computed once on some prefill rank and pulled once by some decode rank.
    assert sum(rise(prefill_before, prefill_after, "vllm:prompt_tokens_total", r) for r in RANKS) == prompt_tokens
    pulled = [
        rise(decode_before, decode_after, "vllm:prompt_tokens_by_source_total", r, source="external_kv_transfer")
        for r in RANKS
    ]
    assert sum(pulled) == prompt_tokens
    legs = [
        rise(prefill_before, prefill_after, "vllm:request_success_total", r, finished_reason="length") for r in RANKS
    ]
    assert sum(legs) == len(prompts)
    return legs, pulled


def test_requests_through_vllm_router_use_both_prefill_ranks_and_add_up(pair: Pair) -> None:
    legs, _ = _through_router(pair, pair.router_url, PROMPTS)
    # The router sends no rank: the prefill server's own balancer spread the legs over both ranks.
    assert all(n > 0 for n in legs)


def test_with_vllm_routers_rank_pins_the_legs_still_pair_up(pair: Pair) -> None:
    # --intra-node-data-parallel-size 2: each rank is a worker, x-data-parallel-rank on both legs
    # (that pins land is test_data_parallel_routers.py's); round_robin over two workers per role
    # puts half the prefill legs on each rank, and every pull still finds its rank's blocks.
    prompts = [f"Pinned {i}: " + p for i, p in enumerate(PROMPTS[:4])]
    with _router(pair.root, pair.prefill, pair.decode, "--intra-node-data-parallel-size", "2") as url:
        legs, pulled = _through_router(pair, url, prompts)
    assert legs == [2, 2]
    assert all(n > 0 for n in pulled)
