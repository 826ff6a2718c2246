"""A real Prometheus server scrapes a live llmsim under load; its HTTP API must see vLLM's metrics
with values that follow from the config's timing.

Prometheus is Debian's ``prometheus`` package (``make test`` installs it: hack/system-deps.sh): its
own temp config and TSDB, loopback only, scrape every second. Everything waits on a deadline.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.metrics.buckets import TTFT_BUCKETS
from tests.support.server import free_port, running_server, stop_process

pytestmark = [pytest.mark.integration, pytest.mark.prometheus]

# "sched": a 1 GB model on a 50 GB/s GPU, so every step reads the weights in 20 ms (memory-bound;
# compute is 1 µs per token and the KV read 0.02 µs per token of context). "fixed": TTFT 30 ms.
BANDWIDTH = 50e9
WEIGHT_BYTES = 0.5e9 * 2
KV_BYTES_PER_TOKEN = 1000
HBM_GIB = 1.0378
FIXED_TTFT = 0.030
CONFIG = f"""
version: 1
hardware:
  tiny-gpu: {{hbm_gib: {HBM_GIB}, memory_bandwidth_gbps: {BANDWIDTH / 1e9:g}, peak_tflops: 1000}}
models:
  - name: sched
    engine: scheduler
    hardware: tiny-gpu
    context_length: 1024
    weights: {{parameters_billions: 0.5, bytes_per_parameter: 2}}
    kv_cache: {{bytes_per_token: {KV_BYTES_PER_TOKEN}, block_size: 16, gpu_memory_utilization: 0.9}}
  - name: fixed
    engine: fixed
    context_length: 1024
    latency: {{ttft_overhead_ms: {FIXED_TTFT * 1000:g}, itl_ms: 10}}
"""
PROMPT, OUTPUT = 100, 40
SCHED_STREAMS, SCHED_ROUNDS = 8, 4
FIXED_STREAMS, FIXED_ROUNDS = 4, 8
BLOCKS = math.floor((HBM_GIB * 2**30 * 0.9 - WEIGHT_BYTES) / (16 * KV_BYTES_PER_TOKEN))


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.fail(f"{binary} not found: install Debian's 'prometheus' package (make system-deps)")
    return path


@contextmanager
def prometheus(tmp_path: Path, target: str) -> Iterator[str]:
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: llmsim\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            require("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        until(lambda: proc.poll() is None and ready(base), 30, lambda: (tmp_path / "prometheus.log").read_text())
        yield base
    finally:
        stop_process(proc)
        log.close()


def ready(base: str) -> bool:
    try:
        return httpx.get(base + "/-/ready", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def until(condition: Callable[[], bool], seconds: float, explain: Callable[[], str] = lambda: "") -> None:
    """Poll ``condition`` until it holds, failing after ``seconds`` (a bound, not a measurement)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {seconds}s\n{explain()}")
        time.sleep(0.2)


def query(base: str, promql: str) -> list[dict[str, Any]]:
    r = httpx.get(base + "/api/v1/query", params={"query": promql}, timeout=10)
    r.raise_for_status()
    body = r.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def scalar(base: str, promql: str) -> float:
    result = query(base, promql)
    assert len(result) == 1, (promql, result)
    return float(result[0]["value"][1])


def drive(base_url: str, model: str, streams: int, rounds: int) -> int:
    """Closed-loop load: ``streams`` clients, each sending ``rounds`` requests one after another."""
    body = {"model": model, "prompt": [7] * PROMPT, "max_tokens": OUTPUT, "ignore_eos": True}

    def client(_: int) -> int:
        with httpx.Client(base_url=base_url, timeout=60) as c:
            for _ in range(rounds):
                r = c.post("/v1/completions", json=body)
                r.raise_for_status()
                assert r.json()["usage"]["completion_tokens"] == OUTPUT
        return rounds

    with ThreadPoolExecutor(streams) as pool:
        return sum(pool.map(client, range(streams)))


def test_prometheus_scrapes_vllm_metrics_under_load(tmp_path: Path) -> None:
    with running_server(tmp_path, config=CONFIG) as server, prometheus(tmp_path, f"127.0.0.1:{server.port}") as prom:
        until(lambda: query(prom, 'up{job="llmsim"} == 1') != [], 30)
        with ThreadPoolExecutor(2) as pool:
            sched = pool.submit(drive, server.base_url, "sched", SCHED_STREAMS, SCHED_ROUNDS)
            fixed = pool.submit(drive, server.base_url, "fixed", FIXED_STREAMS, FIXED_ROUNDS)
            done = {"sched": sched.result(timeout=120), "fixed": fixed.result(timeout=120)}

        # Wait until Prometheus has scraped the final counters (and the idle gauges after the load).
        def scraped_everything() -> bool:
            for model, n in done.items():
                r = query(prom, f'sum(vllm:request_success_total{{model_name="{model}"}})')
                if not r or float(r[0]["value"][1]) != n:
                    return False
            return scalar(prom, 'vllm:num_requests_running{model_name="sched"}') == 0

        until(scraped_everything, 30)
        window = "[5m]"

        # Fixed engine: every TTFT is 30 ms, all in one bucket, so histogram_quantile interpolates
        # to the middle of that bucket: (0.02, 0.04] -> 0.03.
        i = bisect_left(TTFT_BUCKETS, FIXED_TTFT)
        lo, hi = TTFT_BUCKETS[i - 1], TTFT_BUCKETS[i]
        q50 = scalar(
            prom,
            "histogram_quantile(0.5, sum by (le) "
            f'(rate(vllm:time_to_first_token_seconds_bucket{{model_name="fixed"}}{window})))',
        )
        assert q50 == pytest.approx(lo + (hi - lo) * 0.5)

        # Scheduler: a request waits at most for the step in flight and, with vLLM's async
        # scheduling (on by default: the next step was decided when the one in flight started),
        # one more; then its prompt fits one step (100 tokens << the 2,048-token budget): TTFT in
        # [step, 3 steps]. The step is 20 ms plus the KV read of at most 8 x 140 tokens of context,
        # plus compute (1 µs per token) ignored next to memory.
        step = WEIGHT_BYTES / BANDWIDTH
        step_max = step + KV_BYTES_PER_TOKEN * SCHED_STREAMS * (PROMPT + OUTPUT) / BANDWIDTH
        mean_ttft = scalar(
            prom,
            f'sum(rate(vllm:time_to_first_token_seconds_sum{{model_name="sched"}}{window})) / '
            f'sum(rate(vllm:time_to_first_token_seconds_count{{model_name="sched"}}{window}))',
        )
        assert step <= mean_ttft <= 3 * step_max
        q50_sched = scalar(
            prom,
            "histogram_quantile(0.5, sum by (le) "
            f'(rate(vllm:time_to_first_token_seconds_bucket{{model_name="sched"}}{window})))',
        )
        # Bucket interpolation: anywhere within the buckets that [step, 3 steps] touches.
        assert (
            TTFT_BUCKETS[bisect_left(TTFT_BUCKETS, step) - 1]
            <= q50_sched
            <= TTFT_BUCKETS[bisect_left(TTFT_BUCKETS, 3 * step_max)]
        )

        # Gauges seen while the load ran: at most 8 running; each running sequence holds the
        # blocks of its computed tokens, from ceil(100 / 16) = 7 up to ceil(139 / 16) = 9, out of
        # the BLOCKS - 1 that requests can use (block 0 is vLLM's null block).
        running = scalar(prom, f'max_over_time(vllm:num_requests_running{{model_name="sched"}}{window})')
        assert 1 <= running <= SCHED_STREAMS
        kv = scalar(prom, f'max_over_time(vllm:kv_cache_usage_perc{{model_name="sched"}}{window})')
        per_seq_min = math.ceil(PROMPT / 16)
        per_seq_max = math.ceil((PROMPT + OUTPUT - 1) / 16)
        assert per_seq_min / (BLOCKS - 1) <= kv <= SCHED_STREAMS * per_seq_max / (BLOCKS - 1)
        assert scalar(prom, 'vllm:kv_cache_usage_perc{model_name="sched"}') == 0
        # A fixed-rate engine has no KV cache.
        assert scalar(prom, f'max_over_time(vllm:kv_cache_usage_perc{{model_name="fixed"}}{window})') == 0

        # Token counters: every request had a 100-token prompt and 40 output tokens.
        for model, n in done.items():
            assert scalar(prom, f'vllm:prompt_tokens_total{{model_name="{model}"}}') == n * PROMPT
            assert scalar(prom, f'vllm:generation_tokens_total{{model_name="{model}"}}') == n * OUTPUT
        # cache_config_info is there for the endpoint picker, with the block count from the config.
        (info,) = query(prom, "vllm:cache_config_info")
        assert info["metric"]["model_name"] == "sched"
        assert int(info["metric"]["num_gpu_blocks"]) == BLOCKS
