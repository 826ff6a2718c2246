"""/metrics on the real server: promtool accepts the page, and the names the Gateway API Inference
Extension's endpoint picker reads are there with the right types and labels.

promtool comes from Debian's ``prometheus`` package (``make test`` installs it: hack/system-deps.sh).
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import ServerProcess, running_server

pytestmark = pytest.mark.integration

CONFIG = """
version: 1
hardware:
  tiny-gpu: {hbm_gib: 1.0378, memory_bandwidth_gbps: 50, peak_tflops: 1000}
models:
  - name: sched
    engine: scheduler
    hardware: tiny-gpu
    context_length: 1024
    weights: {parameters_billions: 0.5, bytes_per_parameter: 2}
    kv_cache: {bytes_per_token: 1000, block_size: 16, gpu_memory_utilization: 0.9}
  - name: fixed
    engine: fixed
    context_length: 1024
    latency: {ttft_overhead_ms: 30, itl_ms: 10}
  - name: instant-legacy
    engine: instant
    context_length: 1024
    legacy_metrics: true
"""

# The KV cache of "sched", by the formula in the config docs: floor((HBM x utilisation - weights) / block bytes).
SCHED_BLOCKS = math.floor((1.0378 * 2**30 * 0.9 - 0.5e9 * 2) / (16 * 1000))

# promtool's lint rules that vLLM's own names break; nothing else may show up.
VLLM_LINT = (
    re.compile(r"^vllm:\w+ metric names should not contain ':'$"),
    # vLLM's histogram is called ..._total.
    re.compile(r'^vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix$'),
)


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.fail(f"{binary} not found: install Debian's 'prometheus' package (make system-deps)")
    return path


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require("promtool"), "check", "metrics"], input=text, capture_output=True, text=True, timeout=30, check=False
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("metrics"), config=CONFIG) as s:
        # Some traffic on every model so every histogram has samples.
        for model in ("sched", "fixed", "instant-legacy"):
            body = {"model": model, "prompt": [7] * 100, "max_tokens": 5, "ignore_eos": True}
            httpx.post(s.base_url + "/v1/completions", json=body, timeout=30).raise_for_status()
        yield s


@pytest.fixture
def page(server: ServerProcess) -> str:
    r = httpx.get(server.base_url + "/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    return r.text


@pytest.mark.prometheus
def test_promtool_accepts_the_live_page(page: str) -> None:
    result = promtool_check(page)
    # Exit code 1: the page did not parse. 3: lint findings only, each checked below.
    assert result.returncode in (0, 3), result.stdout + result.stderr
    findings = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    unexpected = [f for f in findings if not any(rule.match(f) for rule in VLLM_LINT)]
    assert unexpected == []
    # llmsim's own names are lint-clean.
    assert not [f for f in findings if f.startswith("llmsim")]


@pytest.mark.prometheus
def test_promtool_check_would_catch_a_broken_page(page: str) -> None:
    # The guard above must be able to fail: the same page with one sample line corrupted.
    broken = page.replace(
        'vllm:num_requests_running{engine="0",model_name="sched"}', "vllm:num_requests_running{engine=", 1
    )
    assert broken != page
    assert promtool_check(broken).returncode == 1


def families(text: str) -> dict[str, tuple[str, list[dict[str, str]]]]:
    return {f.name: (f.type, [s.labels for s in f.samples]) for f in text_string_to_metric_families(text)}


@pytest.mark.parametrize("name", ["vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"])
def test_endpoint_picker_required_gauges(page: str, name: str) -> None:
    # Gateway API Inference Extension model-server protocol: TotalQueuedRequests, TotalRunningRequests
    # and KVCacheUtilization, gauges, one series per served model.
    fams = families(page)
    assert name in fams, name
    kind, labels = fams[name]
    assert kind == "gauge"
    assert {lab["model_name"] for lab in labels} == {"sched", "fixed", "instant-legacy"}
    assert all(lab["engine"] == "0" for lab in labels)


def test_endpoint_picker_cache_config_info(server: ServerProcess, page: str) -> None:
    # Optional for the picker's prefix scorer: labels block_size and num_gpu_blocks on vllm:cache_config_info.
    kind, labels = families(page)["vllm:cache_config_info"]
    assert kind == "gauge"
    (sched,) = labels  # only the engine with a KV cache has one
    assert sched["model_name"] == "sched"
    assert sched["block_size"] == "16"
    assert int(sched["num_gpu_blocks"]) == SCHED_BLOCKS
    models = httpx.get(server.base_url + "/v1/models", timeout=10).json()["data"]
    info = next(m["llmsim"] for m in models if m["id"] == "sched")
    assert info["kv_cache_blocks"] == SCHED_BLOCKS


def test_no_lora_metric_without_lora(page: str) -> None:
    # vllm:lora_requests_info exists only when LoRA adapters are configured (not simulated yet).
    assert "vllm:lora_requests_info" not in families(page)


def test_traffic_shows_in_counters_and_legacy_names_only_where_asked(page: str) -> None:
    fams = families(page)
    samples = {
        (s.name, s.labels["model_name"]): s.value
        for f in text_string_to_metric_families(page)
        for s in f.samples
        if "model_name" in s.labels and "le" not in s.labels and "finished_reason" not in s.labels
    }
    for model in ("sched", "fixed", "instant-legacy"):
        assert samples[("vllm:prompt_tokens_total", model)] == 100
        assert samples[("vllm:generation_tokens_total", model)] == 5
        assert samples[("vllm:time_to_first_token_seconds_count", model)] == 1
    # The fixed engine's TTFT is its overhead: 30 ms.
    assert samples[("vllm:time_to_first_token_seconds_sum", "fixed")] == pytest.approx(0.030)
    legacy = {lab["model_name"] for lab in fams["vllm:gpu_cache_usage_perc"][1]}
    assert legacy == {"instant-legacy"}
    # The scheduler stepped: 5 steps (one prefill producing the first token, then 4 decodes).
    assert samples[("vllm:iteration_tokens_total_count", "sched")] == 5
    assert samples[("vllm:iteration_tokens_total_sum", "sched")] == 100 + 4


def test_summary_reset_on_the_live_server(server: ServerProcess) -> None:
    base = server.base_url
    assert httpx.delete(base + "/metrics/summary", timeout=10).status_code == 204
    assert httpx.get(base + "/metrics/summary", timeout=10).json()["models"]["fixed"]["requests"]["total"] == 0
    body = {"model": "fixed", "prompt": [7] * 10, "max_tokens": 3, "ignore_eos": True}
    httpx.post(base + "/v1/completions", json=body, timeout=30).raise_for_status()
    s = httpx.get(base + "/metrics/summary", timeout=10).json()["models"]["fixed"]
    assert s["requests"]["length"] == 1
    assert s["generation_tokens"] == 3
    assert s["ttft"]["max"] == pytest.approx(0.030)
    # 3 tokens 10 ms apart: two gaps.
    assert s["itl"]["count"] == 2
    assert s["itl"]["p50"] == pytest.approx(0.010, rel=0.01)
    assert s["lag"]["count"] == 3
