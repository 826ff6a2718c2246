"""KV events of data-parallel ranks: vLLM's endpoint per rank (port + rank), the rank in each batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import zmq

from llmsim.errors import ConfigError
from llmsim.kv_events import offset_endpoint_port
from tests.api.app_client import app_client, runtime_of
from tests.support.server import free_port

from .vllm_structs import BlockStored, decode_batch


def test_vllms_endpoint_offsets() -> None:
    # vLLM's ZmqEventPublisher.offset_endpoint_port, case by case.
    assert offset_endpoint_port("tcp://*:5557", 0) == "tcp://*:5557"
    assert offset_endpoint_port("tcp://*:5557", 3) == "tcp://*:5560"
    assert offset_endpoint_port("tcp://indexer:5557", 1) == "tcp://indexer:5558"
    assert offset_endpoint_port("inproc://cache", 2) == "inproc://cache_dp2"
    assert offset_endpoint_port("ipc:///tmp/kv", 1) == "ipc:///tmp/kv_dp1"
    with pytest.raises(ValueError, match="65535"):
        offset_endpoint_port("tcp://*:65535", 1)
    with pytest.raises(ValueError, match="no port"):
        offset_endpoint_port("tcp://*:*", 1)


CONFIG = """
version: 1
hardware:
  toy: {{hbm_gib: 2, memory_bandwidth_gbps: 2000, peak_tflops: 400}}
models:
  - name: base
    engine: scheduler
    hardware: toy
    context_length: 1024
    weights: {{parameters_billions: 0.01}}
    kv_cache: {{bytes_per_token: 1024, block_size: 16}}
    data_parallel: {{size: 2}}
    kv_events: {{enable_kv_cache_events: true, endpoint: "{endpoint}", topic: "kv@{{model}}"}}
"""
RESPONSES = "version: 1\nresponses: []\ndefault:\n  content: Fine.\n"
PROMPT = "Tell me about the history of the printing press in Europe " * 6


async def test_each_rank_publishes_on_its_own_port_with_its_rank(tmp_path: Path) -> None:
    port = free_port()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    subs = []
    for rank in range(2):
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.bind(f"tcp://127.0.0.1:{port + rank}")
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        subs.append(sub)
    runtime = runtime_of(tmp_path, CONFIG.format(endpoint=f"tcp://127.0.0.1:{port}"), RESPONSES)
    try:
        async with app_client(runtime) as http:
            # Until the subscription reaches the publisher, ZMQ drops what it sends: new prompts until one arrives.
            for i in range(50):
                body = {"model": "base", "prompt": f"{i} {PROMPT}", "max_tokens": 1}
                r = await http.post("/v1/completions", json=body, headers={"X-data-parallel-rank": "1"})
                assert r.status_code == 200
                if subs[1].poll(100):
                    break
            else:
                pytest.fail("no KV events reached rank 1's subscriber")
        topic, _, payload = subs[1].recv_multipart()
        batch = decode_batch(payload)
        assert topic == b"kv@base"
        assert batch.data_parallel_rank == 1
        assert any(isinstance(e, BlockStored) for e in batch.events)
        # Rank 0 served nothing, so it stored nothing.
        assert not subs[0].poll(100)
    finally:
        for sub in subs:
            sub.close()
        ctx.term()


def test_an_endpoint_without_a_port_cannot_be_given_to_each_rank(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"kv_events\.endpoint"):
        runtime_of(tmp_path, CONFIG.format(endpoint="tcp://*:*"), RESPONSES)
