"""A real LLM gateway in front of the fleet: a LiteLLM proxy (PyPI's litellm[proxy], the `gateway` extra,
installed by hack/gateway-venv.sh) with one deployment per simulator pod, routing simple-shuffle.

The gateway runs on this host and reaches each pod as an in-cluster gateway would, at its pod IP
(through a kubectl port-forward where the host cannot route to pod IPs, e.g. kind).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from tests.support.server import free_port, stop_process

from e2e.cluster import Cluster, sum_samples
from e2e.conftest import MODEL, SCHEDULER, selector

pytestmark = pytest.mark.e2e

#: The gateway's own API key (LiteLLM refuses to start without one): clients authenticate to it, not to the pods.
MASTER_KEY = f"sk-{secrets.token_hex(32)}"
PROMPTS = ["ping", "What is the capital of France?", "hello", "Repeat after me: through the gateway", "/help"]
GATEWAY_REQUESTS = 20


@pytest.fixture(scope="module")
def pods(cluster: Cluster, fleets: dict[str, dict[str, Any]], namespace: str) -> dict[str, str]:
    """Scheduler pod name -> its base URL, reachable from this host."""
    urls = cluster.pod_urls(namespace, selector(SCHEDULER))
    assert len(urls) == 2
    return urls


@pytest.fixture(scope="module")
def gateway(pods: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A LiteLLM proxy on a loopback port, one deployment per pod; yields its base URL."""
    litellm = os.environ.get("E2E_LITELLM", "")
    if not os.access(litellm, os.X_OK):
        pytest.fail("E2E_LITELLM must name a litellm executable (e2e/run.sh sets it from hack/gateway-venv.sh)")
    tmp = tmp_path_factory.mktemp("gateway")
    config = {
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {"model": f"openai/{MODEL}", "api_base": f"{url}/v1", "api_key": "unused"},
            }
            for url in pods.values()
        ],
        "router_settings": {"routing_strategy": "simple-shuffle", "num_retries": 0},
    }
    (tmp / "config.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = tmp / "litellm.log"
    # The bundled model-cost map instead of a download; no network but this machine's.
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "WARNING", "NO_PROXY": "*",
           "LITELLM_MASTER_KEY": MASTER_KEY}  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                litellm,
                "--config",
                str(tmp / "config.yaml"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--num_workers",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_alive(proc, base, log_path)
        yield base
    finally:
        stop_process(proc)


def _wait_alive(proc: subprocess.Popen[bytes], base: str, log_path: Path) -> None:
    deadline = time.monotonic() + 180  # LiteLLM's imports take a while on a busy 2-core machine
    while True:
        if proc.poll() is not None:
            pytest.fail(f"litellm exited with {proc.returncode}:\n{log_path.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(f"{base}/health/liveliness", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"litellm not alive after 180 s:\n{log_path.read_text(errors='replace')[-3000:]}")
        time.sleep(1)


def answer(base_url: str, prompt: str, api_key: str = "unused") -> str:
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0, timeout=60) as api:
        reply = api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}])
    return reply.choices[0].message.content or ""


def finished(cluster: Cluster, namespace: str, pods: dict[str, str]) -> dict[str, float]:
    return {
        pod: sum_samples(cluster.pod_metrics(namespace, pod), "vllm:request_success_total", model_name=MODEL)
        for pod in pods
    }


def test_gateway_routes_to_both_replicas_with_the_same_answers(
    cluster: Cluster, namespace: str, pods: dict[str, str], gateway: str
) -> None:
    # Direct, from one pod: the reference answers (the script is deterministic, the same on every pod).
    first = next(iter(pods.values()))
    direct = {prompt: answer(first, prompt) for prompt in PROMPTS}
    assert direct["ping"] == "pong"
    assert direct["What is the capital of France?"] == "The capital of France is Paris."
    before = finished(cluster, namespace, pods)
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(GATEWAY_REQUESTS)]
    through = [(prompt, answer(gateway, prompt, MASTER_KEY)) for prompt in prompts]
    after = finished(cluster, namespace, pods)
    assert [a for _, a in through] == [direct[p] for p, _ in through]
    served = {pod: after[pod] - before[pod] for pod in pods}
    # Each gateway request reached exactly one replica, and both replicas served: with simple-shuffle
    # (uniform random), all 20 on one pod has a probability of 2 x 2^-20.
    assert sum(served.values()) == GATEWAY_REQUESTS
    assert min(served.values()) >= 1, served


def test_gateway_streams(gateway: str) -> None:
    with openai.OpenAI(base_url=f"{gateway}/v1", api_key=MASTER_KEY, max_retries=0, timeout=60) as api:
        stream = api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "ping"}], stream=True)
        assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == "pong"
