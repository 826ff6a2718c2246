"""The chart's Grafana dashboard: every PromQL expression parses (promtool) and names metrics llmsim serves.

promtool comes from Debian's ``prometheus`` package (hack/system-deps.sh). The e2e suite also runs
every expression against a real Prometheus scraping a fleet (e2e/test_4_prometheus.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.server import running_server

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts" / "llmsim-operator" / "dashboards" / "llmsim.json"
#: Metric names in an expression: vLLM's (with a colon) and llmsim's own.
METRIC = re.compile(r"\b(vllm:[a-zA-Z0-9_:]+|llmsim_[a-zA-Z0-9_]+)\b")
#: Grafana's variables, as a Prometheus data source would see them substituted.
VARIABLES = {"$__rate_interval": "1m", "$namespace": ".*", "$model": ".*"}


def expressions() -> list[str]:
    """Every panel target's expression, with Grafana's variables substituted."""
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = str(target["expr"])
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            assert "$" not in expr, f"unsubstituted variable in {expr}"
            out.append(expr)
    return out


def promtool_check(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """promtool parses each expression as a recording rule's."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: install Debian's 'prometheus' package (make system-deps)")
    rules = {
        "groups": [
            {"name": "dashboard", "rules": [{"record": f"dashboard:expr{i}", "expr": e} for i, e in enumerate(exprs)]}
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    return subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60, check=False
    )


def test_every_expression_parses_with_promtool(tmp_path: Path) -> None:
    exprs = expressions()
    assert len(exprs) == 19
    done = promtool_check(exprs, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in done.stdout


def test_autoscaler_queries_parse_too(tmp_path: Path) -> None:
    examples = ROOT / "deploy" / "examples"
    keda = yaml.safe_load((examples / "keda-scaledobject.yaml").read_text())
    adapter = yaml.safe_load((examples / "prometheus-adapter-values.yaml").read_text())["rules"]["external"][0]
    metrics_query = adapter["metricsQuery"].replace("<<.Series>>", "vllm:num_requests_waiting")
    queries = [
        keda["spec"]["triggers"][0]["metadata"]["query"],
        metrics_query.replace("<<.LabelMatchers>>", 'service="x"'),
    ]
    done = promtool_check(queries, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_would_catch_a_broken_expression(tmp_path: Path) -> None:
    broken = expressions()[0].replace("sum by (le)", "sum by (le")
    assert promtool_check([broken], tmp_path).returncode != 0


def test_panels_cover_what_operators_watch() -> None:
    names = {m for e in expressions() for m in METRIC.findall(e)}
    for metric in (
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
        "llmsim_token_lag_seconds_bucket",
    ):
        assert metric in names, metric


@pytest.mark.integration
def test_every_expression_names_metrics_llmsim_serves(tmp_path: Path) -> None:
    # The embedded config: a scheduler, a fixed and an instant model, as `llmsim serve` starts with.
    with running_server(tmp_path) as server:
        page = httpx.get(server.base_url + "/metrics", timeout=10).text
    served = {line.split("{")[0].split(" ")[0] for line in page.splitlines() if line and not line.startswith("#")}
    for expr in expressions():
        names = set(METRIC.findall(expr))
        assert names, f"no llmsim metric in {expr}"
        assert names <= served, f"{sorted(names - served)} not served by llmsim (in {expr})"
