"""/metrics/summary and its reset, through the Starlette routes (in-process ASGI, TestClient)."""

from __future__ import annotations

import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.testclient import TestClient

from llmsim.metrics import MetricsHub
from llmsim.types import FinishReason, RequestId, RequestStats, StepStats
from tests.metrics.scrape import parse


def finished(i: int, *, ttft: float, itl: float, n: int, reason: FinishReason = FinishReason.STOP) -> RequestStats:
    arrival = float(i)
    first = arrival + ttft
    times = [first + k * itl for k in range(n)]
    return RequestStats(RequestId(str(i)), 50, n, reason, arrival, arrival, first, times[-1], 0, times)


def client(hub: MetricsHub) -> TestClient:
    return TestClient(Starlette(routes=hub.routes()))


def load(hub: MetricsHub) -> None:
    m = hub.models["m"]
    # 100 requests: TTFT i ms (1..100), 5 tokens 20 ms apart; lags 0.1 ms .. 1 ms; batch sizes 1..10.
    for i in range(1, 101):
        m.on_first_token(i / 1000)
        m.on_request_finished(
            finished(i, ttft=i / 1000, itl=0.020, n=5, reason=FinishReason.LENGTH if i % 10 == 0 else FinishReason.STOP)
        )
        m.observe_lags([k / 10_000 for k in range(1, 11)])
    for s in range(10):
        m.on_step(StepStats(s, s * 0.01, 0.008, s + 1, 0, s + 1, s + 1, 0, 0, 0, 1 if s == 3 else 0, 0.0))


def test_summary_counts_and_quantiles() -> None:
    hub = MetricsHub()
    hub.add_model("m", max_model_len=1024)
    load(hub)
    with client(hub) as c:
        r = c.get("/metrics/summary")
    assert r.status_code == 200
    s = r.json()["models"]["m"]
    assert s["requests"] == {"stop": 90, "length": 10, "abort": 0, "error": 0, "total": 100}
    assert s["prompt_tokens"] == 100 * 50
    assert s["generation_tokens"] == 100 * 5
    assert s["preemptions"] == 1
    # TTFT 1..100 ms: p50 = value at rank floor(0.5 * 99) = 49 -> 50 ms; p90 rank 89 -> 90 ms; p99 -> 99 ms.
    ttft = s["ttft"]
    assert ttft["count"] == 100
    assert ttft["p50"] == pytest.approx(0.050, rel=0.01)
    assert ttft["p90"] == pytest.approx(0.090, rel=0.01)
    assert ttft["p99"] == pytest.approx(0.099, rel=0.01)
    assert ttft["max"] == 0.100
    # Every gap is 20 ms: 4 per request.
    assert s["itl"]["count"] == 400
    assert s["itl"]["p50"] == pytest.approx(0.020, rel=0.01)
    # E2E = TTFT + 4 * 20 ms; queue time 0 (scheduled on arrival).
    assert s["e2e"]["max"] == pytest.approx(0.100 + 0.080)
    assert s["queue_time"]["p99"] == 0.0
    # Lags 0.1..1.0 ms, 10 per request: p50 rank 499 of 1000 -> 0.5 ms.
    assert s["lag"]["count"] == 1000
    assert s["lag"]["p50"] == pytest.approx(0.0005, rel=0.01)
    assert s["lag"]["max"] == pytest.approx(0.001)
    assert s["batch_size"]["count"] == 10
    assert s["batch_size"]["max"] == 10
    assert s["batch_size"]["p50"] == pytest.approx(5, rel=0.01)
    assert s["step_duration"]["p90"] == pytest.approx(0.008, rel=0.01)


def test_delete_resets_the_summary_but_never_the_counters() -> None:
    hub = MetricsHub()
    hub.add_model("m", max_model_len=1024)
    load(hub)
    with client(hub) as c:
        r = c.delete("/metrics/summary")
        assert r.status_code == 204
        s = (c.get("/metrics/summary")).json()["models"]["m"]
        assert s["requests"]["total"] == 0
        assert s["generation_tokens"] == 0
        assert s["ttft"] == {"count": 0, "p50": None, "p90": None, "p99": None, "max": None}
        page = c.get("/metrics")
    labels = {"model_name": "m", "engine": "0"}
    p = parse(page.text)
    assert p.get("vllm:generation_tokens_total", **labels) == 500
    assert p.get("vllm:time_to_first_token_seconds_count", **labels) == 100
    # Only what happens after the reset shows up in the summary.
    hub.models["m"].on_first_token(0.042)
    assert hub.summary()["models"]["m"]["ttft"]["count"] == 1
    assert hub.summary()["models"]["m"]["ttft"]["max"] == 0.042


def test_metrics_endpoint_serves_the_text_format() -> None:
    hub = MetricsHub()
    hub.add_model("m", max_model_len=1024)
    with client(hub) as c:
        # Prometheus asks for OpenMetrics first; the text format is what it gets (see MetricsHub.render).
        r = c.get("/metrics", headers={"accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"})
        other = c.post("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"] == CONTENT_TYPE_LATEST
    assert r.content == hub.render()
    assert "# EOF" not in r.text
    assert other.status_code == 405
