"""The scheduler engine behind the real server: observed ITL follows the simulated step time."""

from __future__ import annotations

import asyncio
import time
from importlib import resources
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from tests.metrics.scrape import parse
from tests.support.server import running_server

pytestmark = pytest.mark.integration

# A deliberately slow GPU so a step is long against the machine's noise:
# decode step = (weights + KV read) / bandwidth = (1e9 params * 2 B + small) / 100 GB/s ≈ 20 ms;
# compute = 2 * 1e9 * batch tokens / 100 TFLOPS ≈ 0.02 ms per token: memory-bound.
CONFIG = """
version: 1
hardware:
  slow-gpu: {hbm_gib: 24, memory_bandwidth_gbps: 100, peak_tflops: 100}
models:
  - name: sim
    engine: scheduler
    hardware: slow-gpu
    context_length: 4096
    weights: {parameters_billions: 1.0, bytes_per_parameter: 2}
    kv_cache: {bytes_per_token: 12288, block_size: 16, gpu_memory_utilization: 0.9}
    scheduler: {max_batch_tokens: 2048, max_num_sequences: 64}
"""
RESPONSES = """
version: 1
responses: []
default:
  synthetic: {tokens: [30, 30]}
"""
WEIGHT_BYTES = 1e9 * 2
BANDWIDTH = 100e9
KV_PER_TOKEN = 12288


def decode_step_s(batch: int, context: int) -> float:
    return (WEIGHT_BYTES + batch * context * KV_PER_TOKEN) / BANDWIDTH


async def stream_times(client: openai.AsyncOpenAI, content: str) -> list[float]:
    times = []
    stream = await client.chat.completions.create(
        model="sim", messages=[{"role": "user", "content": content}], stream=True
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            times.append(time.monotonic())
    return times


def test_observed_itl_matches_simulated_step_time(tmp_path: Path) -> None:
    async def run(base_url: str) -> list[list[float]]:
        async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="x", max_retries=0) as client:
            return await asyncio.gather(*(stream_times(client, f"hello number {i}") for i in range(8)))

    with running_server(tmp_path, config=CONFIG, responses=RESPONSES) as server:
        streams = asyncio.run(run(server.base_url))
        info = httpx.get(server.base_url + "/v1/models", timeout=5).json()["data"][0]["llmsim"]
        page = parse(httpx.get(server.base_url + "/metrics", timeout=5).text)
    assert all(len(t) == 30 for t in streams)
    # 8 sequences of ~15-45 tokens of context: the KV read adds < 0.05 ms to the 20 ms weight read,
    # and a newcomer's short prompt rides along in a decode step's weight read. What the clients saw
    # (how late each token left on a busy machine) is bench/bench_live_timing.py's; here the
    # simulated gaps, which the releases follow: every one a decode step.
    expected = decode_step_s(8, 45)
    assert expected == pytest.approx(0.020, rel=0.01)
    labels = {"model_name": "sim", "engine": "0"}
    gaps = page.get("vllm:inter_token_latency_seconds_count", **labels)
    assert gaps == 8 * 29
    assert page.get("vllm:inter_token_latency_seconds_sum", **labels) / gaps == pytest.approx(expected, rel=0.01)
    # KV capacity reported at startup: floor((24 GiB * 0.9 - 2 GB) / (12288 B * 16)).
    assert info["kv_cache_blocks"] == int((24 * 2**30 * 0.9 - WEIGHT_BYTES) // (KV_PER_TOKEN * 16))


# A profile and a GPU, no timing: the server runs llmsim's calibration of llama-3.1-8b on an H100.
CALIBRATED = """
version: 1
models:
  - {name: llama, engine: scheduler, profile: llama-3.1-8b, hardware: h100-80gb, context_length: 4096}
"""


def test_a_profile_alone_serves_with_the_calibrated_request_overhead_and_step_cost(tmp_path: Path) -> None:
    table = yaml.safe_load(resources.files("llmsim").joinpath("data", "calibrated_timing.yml").read_text())
    knobs = table["pairs"]["h100-80gb"]["llama-3.1-8b"]

    async def run(base_url: str) -> tuple[float, list[float], int]:
        async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="x", max_retries=0) as client:
            sent = time.monotonic()
            stream = await client.chat.completions.create(
                model="llama",
                messages=[{"role": "user", "content": "hello there"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            times, prompt = [], 0
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    times.append(time.monotonic())
                if chunk.usage is not None:
                    prompt = chunk.usage.prompt_tokens
            return sent, times, prompt

    with running_server(tmp_path, config=CALIBRATED, responses=RESPONSES) as server:
        sent, times, prompt = asyncio.run(run(server.base_url))
        page = parse(httpx.get(server.base_url + "/metrics", timeout=5).text)
    # Alone on the GPU, the request waits the request overhead, then one step prefills its prompt
    # and releases the first token; every later step decodes one token. By hand from the table:
    # a step reads the weights and the context's KV at bandwidth x memory, plus one sequence's cost.
    bandwidth = 3350e9 * knobs["efficiency.memory"]
    per_step = knobs["latency.step_overhead_ms"] / 1000 + knobs["latency.step_overhead_per_sequence_ms"] / 1000
    prefill = (8.03e9 * 2 + 131072 * prompt) / bandwidth + per_step
    ttft = knobs["latency.request_overhead_ms"] / 1000 + prefill
    assert len(times) == 30
    # Tokens never leave before their deadlines; the client's clock adds the HTTP round trip.
    assert times[0] - sent >= ttft, (times[0] - sent, ttft)
    labels = {"model_name": "llama", "engine": "0"}
    assert page.get("vllm:time_to_first_token_seconds_count", **labels) == 1
    assert page.get("vllm:time_to_first_token_seconds_sum", **labels) == pytest.approx(ttft, rel=1e-6)
    # The 29 decode steps read contexts of prompt + 1 ... prompt + 29 tokens: on average prompt + 15.
    decode = (8.03e9 * 2 + 131072 * (prompt + 15)) / bandwidth + per_step
    assert page.get("vllm:inter_token_latency_seconds_count", **labels) == 29
    mean_gap = page.get("vllm:inter_token_latency_seconds_sum", **labels) / 29
    assert mean_gap == pytest.approx(decode, rel=0.01)
