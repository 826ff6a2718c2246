"""The real server started with ``vllm serve``'s ``-tp 4`` on a 70B model, driven by the openai SDK.

The values checked are the simulated ones the server reports (its KV blocks and the gaps between
tokens in ``vllm:inter_token_latency_seconds``), worked out by hand from the TP model: no
wall-clock assertion.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from tests.metrics.scrape import parse
from tests.support.server import running_server

MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def test_a_70b_over_four_gpus_serves_with_a_shard_per_gpu(tmp_path: Path) -> None:
    args = [MODEL, "--served-model-name", "llama-70b", "-tp", "4", "--max-model-len", "8192", "--hardware", "h100-80gb"]
    with running_server(tmp_path, extra_args=args) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
        reply = client.completions.create(model="llama-70b", prompt="hi", max_tokens=6, extra_body={"ignore_eos": True})
        assert reply.usage is not None
        assert reply.usage.completion_tokens == 6
        page = parse(httpx.get(server.base_url + "/metrics", timeout=5).text)
    # One rank's blocks, as vLLM reports num_gpu_blocks: (0.9 x 80 GiB - 141.2 GB / 4) / (327,680 / 4 x 16 B).
    blocks = {labels for name, labels in page.values if name == "vllm:cache_config_info"}
    assert ("num_gpu_blocks", "32050") in next(iter(blocks))
    # Each decode step of the lone sequence, with the calibrated knobs of the H100 (memory efficiency,
    # per-sequence cost, no fixed cost): a quarter of the weights at 3,350 GB/s x efficiency, a few
    # tokens of KV (< 0.001 ms), and 160 all-reduces of one token's 8,192 x 2 B activations.
    knobs = yaml.safe_load(resources.files("llmsim").joinpath("data", "calibrated_timing.yml").read_text())
    h100 = knobs["pairs"]["h100-80gb"]["llama-3.1-8b"]
    weights = 141.2e9 / 4 / (3350e9 * h100["efficiency.memory"])
    all_reduce = 160 * (40e-6 + 2 * 3 / 4 * 8192 * 2 / 450e9)
    step = weights + all_reduce + h100["latency.step_overhead_per_sequence_ms"] / 1000
    assert step == pytest.approx(0.02060, rel=1e-3)
    labels = {"model_name": "llama-70b", "engine": "0"}
    gaps = page.get("vllm:inter_token_latency_seconds_count", **labels)
    assert gaps == 5
    assert page.get("vllm:inter_token_latency_seconds_sum", **labels) / gaps == pytest.approx(step, rel=1e-3)
