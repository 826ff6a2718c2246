"""The real server started with ``vllm serve``'s ``-tp`` and ``-pp`` on a 70B model, driven by the openai SDK.

The values checked are the simulated ones the server reports (its KV blocks and the gaps between
tokens in ``vllm:inter_token_latency_seconds``), worked out by hand from the tensor-parallel model
and vLLM's pipeline: no wall-clock assertion.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.metrics.scrape import Page, parse
from tests.support.server import running_server

MODEL = "meta-llama/Llama-3.1-70B-Instruct"
LABELS = {"model_name": "llama-70b", "engine": "0"}


def serve_six_tokens(tmp_path: Path, *parallel: str) -> Page:
    """One lone request of six tokens through the SDK on the 70B at ``parallel``; the metrics after it."""
    args = [MODEL, "--served-model-name", "llama-70b", *parallel, "--max-model-len", "8192", "--hardware", "h100-80gb"]
    with running_server(tmp_path, extra_args=args) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0)
        reply = client.completions.create(model="llama-70b", prompt="hi", max_tokens=6, extra_body={"ignore_eos": True})
        assert reply.usage is not None
        assert reply.usage.completion_tokens == 6
        return parse(httpx.get(server.base_url + "/metrics", timeout=5).text)


def h100_knobs() -> dict[str, Any]:
    """The H100's calibrated timing knobs (the 70B borrows the 8B's, the calibrated model nearest)."""
    knobs = yaml.safe_load(resources.files("llmsim").joinpath("data", "calibrated_timing.yml").read_text())
    pair: dict[str, Any] = knobs["pairs"]["h100-80gb"]["llama-3.1-8b"]
    return pair


def num_gpu_blocks(page: Page) -> str:
    (labels,) = {labels for name, labels in page.values if name == "vllm:cache_config_info"}
    return dict(labels)["num_gpu_blocks"]


def mean_gap(page: Page) -> float:
    gaps = page.get("vllm:inter_token_latency_seconds_count", **LABELS)
    assert gaps == 5
    return page.get("vllm:inter_token_latency_seconds_sum", **LABELS) / gaps


def test_a_70b_over_four_gpus_serves_with_a_shard_per_gpu(tmp_path: Path) -> None:
    page = serve_six_tokens(tmp_path, "-tp", "4")
    # One rank's blocks, as vLLM reports num_gpu_blocks: (0.9 x 80 GiB - 141.2 GB / 4) / (327,680 / 4 x 16 B).
    assert num_gpu_blocks(page) == "32050"
    # Each decode step of the lone sequence, with the calibrated knobs of the H100 (memory efficiency,
    # per-sequence cost, no fixed cost): a quarter of the weights at 3,350 GB/s x efficiency, a few
    # tokens of KV (< 0.001 ms), and 160 all-reduces of one token's 8,192 x 2 B activations.
    h100 = h100_knobs()
    weights = 141.2e9 / 4 / (3350e9 * h100["efficiency.memory"])
    all_reduce = 160 * (40e-6 + 2 * 3 / 4 * 8192 * 2 / 450e9)
    step = weights + all_reduce + h100["latency.step_overhead_per_sequence_ms"] / 1000
    assert step == pytest.approx(0.02060, rel=1e-3)
    assert mean_gap(page) == pytest.approx(step, rel=1e-3)


def test_a_70b_over_two_stages_of_two_gpus_decodes_through_both(tmp_path: Path) -> None:
    page = serve_six_tokens(tmp_path, "-tp", "2", "-pp", "2")
    # vLLM gives every stage the tightest stage's blocks: 40 layers and a TP-2 shard a GPU,
    # (0.9 x 80 GiB - 141.2 GB / 4) / (327,680 / 4 x 16 B), the same bytes a GPU as TP 4.
    assert num_gpu_blocks(page) == "32050"
    # Each token of the lone sequence (async scheduling, vLLM's default: its next decode waits for
    # the previous token's broadcast from the last stage) crosses both stages: per stage a quarter
    # of the weights at 3,350 GB/s x the H100's calibrated efficiency and 80 all-reduces of one
    # token over TP 2; between them a hand-over (half the 2 x 8,192 x 2 B activations sent, the
    # other half all-gathered: two collectives); and the per-sequence cost once.
    h100 = h100_knobs()
    stage = 141.2e9 / 4 / (3350e9 * h100["efficiency.memory"]) + 80 * (40e-6 + 8192 * 2 / 450e9)
    hand_over = 2 * 40e-6 + 32_768 / 450e9
    gap = 40e-6 + 2 * stage + hand_over + h100["latency.step_overhead_per_sequence_ms"] / 1000
    assert gap == pytest.approx(0.03488, rel=1e-3)
    assert mean_gap(page) == pytest.approx(gap, rel=1e-3)
