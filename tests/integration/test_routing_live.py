"""Prefix caching and KV-cache events on the real server: the openai SDK, a ZMQ SUB socket, /metrics."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import openai
import pytest
import zmq

from tests.kv_events.vllm_structs import BlockStored, decode_batch
from tests.metrics.scrape import parse
from tests.support.server import free_port, running_server

pytestmark = pytest.mark.integration

RESPONSES = """
version: 1
responses: []
default:
  content: "Fine."
"""
# "word" then 98 x " word" = 99 tokens; the chat template adds 4 + 3: 106 prompt tokens, whose
# first 6 blocks of 16 (96 tokens) are full. A repeat hits floor(105 / 16) x 16 = 96 tokens.
CONTENT = " ".join(["word"] * 99)
WARM = " ".join(["other"] * 40)  # 47 prompt tokens, 2 full blocks


def text_id(text: str) -> int:
    """The regex tokenizer's id formula (llmsim/llm/vocabulary.py), computed independently."""
    return 256 + int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") % (2**31 - 256)


def config(events_port: int) -> str:
    # The server *connects* to the subscriber's bound socket (llm-d's centralized indexer style:
    # an endpoint without '*' is connected to, as in vLLM).
    return f"""
version: 1
hardware:
  toy: {{hbm_gib: 2, memory_bandwidth_gbps: 2000, peak_tflops: 400}}
models:
  - name: sim
    engine: scheduler
    hardware: toy
    context_length: 1024
    weights: {{parameters_billions: 0.01}}
    kv_cache: {{bytes_per_token: 1024, block_size: 16}}
    enable_prompt_tokens_details: true
    kv_events:
      enable_kv_cache_events: true
      endpoint: tcp://127.0.0.1:{events_port}
      topic: "kv@{{pod_ip}}@{{model}}"
"""


def test_cached_tokens_metrics_and_kv_events_on_the_live_server(tmp_path: Path) -> None:
    port = free_port()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.bind(f"tcp://127.0.0.1:{port}")
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    try:
        with running_server(tmp_path, config=config(port), responses=RESPONSES, env={"POD_IP": "10.1.2.3"}) as server:
            client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)

            def ask(content: str) -> openai.types.chat.ChatCompletion:
                return client.chat.completions.create(model="sim", messages=[{"role": "user", "content": content}])

            # Until the subscription has reached the server, ZMQ drops what it publishes.
            for _ in range(50):
                ask(WARM)
                if sub.poll(200):
                    break
            else:
                pytest.fail("no KV events reached the subscriber")
            while sub.poll(300):
                sub.recv_multipart()
            warmups = parse(httpx.get(server.base_url + "/metrics").text)

            first, second = ask(CONTENT), ask(CONTENT)
            assert first.usage is not None
            assert second.usage is not None
            assert first.usage.prompt_tokens == 106
            assert first.usage.prompt_tokens_details is not None
            assert second.usage.prompt_tokens_details is not None
            assert first.usage.prompt_tokens_details.cached_tokens == 0
            assert second.usage.prompt_tokens_details.cached_tokens == 96

            stored = []
            while sub.poll(500):
                topic, _, payload = sub.recv_multipart()
                assert topic == b"kv@10.1.2.3@sim"
                stored += [e for e in decode_batch(payload).events if isinstance(e, BlockStored)]
            # The first request stored its 6 full prompt blocks in one event, chained from no
            # parent; the second hit them and stored nothing (106 + 2 output tokens < 7 blocks).
            (event,) = stored
            assert len(event.block_hashes) == 6
            assert event.parent_block_hash is None
            header = [2, 7, 3]  # <|start_header_id|> user <|end_header_id|>
            assert event.token_ids == [*header, text_id("word"), *[text_id(" word")] * 92]

            page = parse(httpx.get(server.base_url + "/metrics").text)
            labels = {"model_name": "sim", "engine": "0"}
            queries = page.get("vllm:prefix_cache_queries_total", **labels)
            hits = page.get("vllm:prefix_cache_hits_total", **labels)
            assert queries - warmups.get("vllm:prefix_cache_queries_total", **labels) == 2 * 106
            assert hits - warmups.get("vllm:prefix_cache_hits_total", **labels) == 96
    finally:
        sub.close()
        ctx.term()
