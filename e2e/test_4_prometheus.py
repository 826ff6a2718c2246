"""A real Prometheus (Debian's `prometheus`) finds the fleets' endpoints and scrapes every pod.

The relabel rules are deploy/examples/prometheus-scrape-config.yaml's, the job we ship for a
Prometheus with Kubernetes service discovery (role ``endpoints``): keep the Services the operator
labelled, port ``http``, and add the ``namespace``, ``service`` and ``pod`` labels a ServiceMonitor
would. Debian's build has no Kubernetes service discovery, so the targets come through HTTP SD from
e2e/endpoints_sd.py, which serves the Endpoints API with the labels kubernetes_sd_configs sets.

Prometheus runs on this host: job ``llmsim`` scrapes the pod IPs (as an in-cluster Prometheus does;
this host routes to them on the local cluster), job ``llmsim-via-apiserver`` the same pods through the
API server's pod proxy (works on kind too). The assertions use the direct job when the host routes to
pod IPs, else the proxy job.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml
from tests.support.server import free_port, stop_process

from e2e.cluster import Cluster, connects
from e2e.conftest import FIXED, FIXED_TTFT_MS, MODEL, SCHEDULER, sdk, selector
from e2e.endpoints_sd import endpoints_discovery

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "charts" / "llmsim-operator" / "dashboards" / "llmsim.json"
EXAMPLE = ROOT / "deploy" / "examples" / "prometheus-scrape-config.yaml"
SCRAPE_INTERVAL = 2


def scrape_configs(cluster: Cluster, sd_url: str) -> list[dict[str, Any]]:
    shipped = yaml.safe_load(EXAMPLE.read_text())["scrape_configs"][0]
    assert shipped["kubernetes_sd_configs"] == [{"role": "endpoints"}]
    sd = [{"url": sd_url, "refresh_interval": f"{SCRAPE_INTERVAL}s"}]
    select = shipped["relabel_configs"]
    apiserver = urlsplit(cluster.host)
    tls: dict[str, Any] = {"ca_file": cluster.ca_file} if cluster.ca_file else {"insecure_skip_verify": True}
    if cluster.cert_file:
        tls |= {"cert_file": cluster.cert_file, "key_file": cluster.key_file}
    via_apiserver: dict[str, Any] = {
        "job_name": "llmsim-via-apiserver",
        "http_sd_configs": sd,
        "scheme": "https",
        "tls_config": tls,
        "relabel_configs": [
            *select,
            {"target_label": "__address__", "replacement": apiserver.netloc},
            {
                "source_labels": ["__meta_kubernetes_namespace", "__meta_kubernetes_pod_name"],
                "regex": "(.+);(.+)",
                "target_label": "__metrics_path__",
                "replacement": "/api/v1/namespaces/${1}/pods/${2}:8000/proxy/metrics",
            },
        ],
    }
    token = cluster.headers.get("authorization", "").removeprefix("Bearer ")
    if token:
        via_apiserver["authorization"] = {"credentials": token}
    return [{"job_name": "llmsim", "http_sd_configs": sd, "relabel_configs": select}, via_apiserver]


@pytest.fixture(scope="module")
def prometheus(
    cluster: Cluster, fleets: dict[str, dict[str, Any]], namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not found: install Debian's 'prometheus' package (make system-deps)")
    tmp = tmp_path_factory.mktemp("prometheus")
    discovery = contextlib.ExitStack()
    sd_url = discovery.enter_context(endpoints_discovery(cluster, namespace))
    config = {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL}s", "scrape_timeout": f"{SCRAPE_INTERVAL}s"},
        "scrape_configs": scrape_configs(cluster, sd_url),
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = tmp / "prometheus.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _ready(base):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not start:\n{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield base
    finally:
        stop_process(proc)
        discovery.close()


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/-/ready", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def query(base: str, promql: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{base}/api/v1/query", params={"query": promql}, timeout=10)
    body = response.json()
    assert body["status"] == "success", f"{promql}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def eventually(base: str, promql: str, check: Any, what: str, timeout: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        result = query(base, promql)
        if check(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: {promql} gave {result} for {timeout:.0f}s")
        time.sleep(1)


@pytest.fixture(scope="module")
def job(cluster: Cluster, namespace: str) -> str:
    """The job whose samples the assertions read: direct scrapes when this host routes to pod IPs."""
    pod = cluster.ready_pods(namespace, selector(SCHEDULER))[0]
    return "llmsim" if connects(pod.status.pod_ip, 8000) else "llmsim-via-apiserver"


def pods_of(cluster: Cluster, namespace: str, name: str) -> set[str]:
    return {p.metadata.name for p in cluster.ready_pods(namespace, selector(name))}


def test_service_discovery_finds_and_scrapes_every_pod(
    cluster: Cluster, namespace: str, prometheus: str, job: str
) -> None:
    expected = pods_of(cluster, namespace, SCHEDULER) | pods_of(cluster, namespace, FIXED)
    assert len(expected) == 3
    for scrape_job in ("llmsim", "llmsim-via-apiserver") if job == "llmsim" else (job,):
        up = eventually(
            prometheus,
            f'up{{job="{scrape_job}", namespace="{namespace}"}} == 1',
            lambda r: {s["metric"]["pod"] for s in r} == expected,
            f"every pod up in job {scrape_job}",
        )
        assert {s["metric"]["service"] for s in up} == {SCHEDULER, FIXED}
    running = query(
        prometheus, f'vllm:num_requests_running{{job="{job}", namespace="{namespace}", service="{SCHEDULER}"}}'
    )
    assert {s["metric"]["pod"] for s in running} == pods_of(cluster, namespace, SCHEDULER)
    assert {s["metric"]["model_name"] for s in running} == {MODEL}


def test_ttft_histogram_gives_the_configured_value(cluster: Cluster, namespace: str, prometheus: str, job: str) -> None:
    selector_ = f'job="{job}", namespace="{namespace}", service="{FIXED}"'
    count = f"sum(vllm:time_to_first_token_seconds_count{{{selector_}}})"
    before = float(eventually(prometheus, count, bool, "the fixed fleet's TTFT counter")[0]["value"][1])
    with sdk(cluster, cluster.service_url(namespace, FIXED)) as api:
        for i in range(10):
            api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"ping {i}"}], max_tokens=4)
    eventually(prometheus, count, lambda r: r and float(r[0]["value"][1]) == before + 10, "10 more TTFT observations")

    def value(promql: str) -> float:
        (sample,) = query(prometheus, promql)
        return float(sample["value"][1])

    ttft = FIXED_TTFT_MS / 1000  # fixed engine: TTFT = ttftOverheadMs, no prefill rate configured
    # Sum over count is exact: every request's TTFT is the configured 0.2 s of simulated time.
    mean = value(f"sum(vllm:time_to_first_token_seconds_sum{{{selector_}}}) / {count}")
    assert math.isclose(mean, ttft, abs_tol=1e-6)
    # histogram_quantile interpolates linearly inside the bucket holding every observation, vLLM's
    # (0.1, 0.25]: q -> 0.1 + (0.25 - 0.1) x q.
    buckets = f"sum by (le) (vllm:time_to_first_token_seconds_bucket{{{selector_}}})"
    for q in (0.5, 0.99):
        assert math.isclose(value(f"histogram_quantile({q}, {buckets})"), 0.1 + 0.15 * q, abs_tol=1e-9)
    # ... because none is at or below 0.1 s and all are at or below 0.25 s.
    assert value(f'sum(vllm:time_to_first_token_seconds_bucket{{{selector_}, le="0.1"}})') == 0
    assert value(f'sum(vllm:time_to_first_token_seconds_bucket{{{selector_}, le="0.25"}})') == before + 10


def test_every_dashboard_query_returns_data(namespace: str, prometheus: str, job: str) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    variables = {"$__rate_interval": "1m", "$namespace": namespace, "$model": MODEL}
    empty = []
    for expr in exprs:
        for name, value in variables.items():
            expr = expr.replace(name, value)
        if not query(prometheus, expr):
            empty.append(expr)
    assert empty == [], "dashboard queries without data"
