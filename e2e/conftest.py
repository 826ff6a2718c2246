"""End-to-end fixtures: the cluster, a namespace, two fleets, and a dump of the cluster when a test fails.

The tests run only when asked (``E2E=1``; ``make e2e`` brings up a cluster, builds and loads both
images and installs the operator first, see e2e/run.sh). Asked for without a reachable cluster they
fail: CI must not skip silently.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Generator, Iterator
from typing import Any

import openai
import pytest

from e2e.cluster import Cluster, deleting_namespace, diagnostics

#: Namespaces whose objects a failure report shows.
WATCHED: list[str] = []

#: The two fleets every test may use (module e2e/test_2_fleets.py checks them in detail).
SCHEDULER = "sched"
FIXED = "fixed"
MODEL = "e2e-model"
#: Fixed engine: TTFT = ttftOverheadMs (no prefill rate given), then one token every itlMs.
FIXED_TTFT_MS = 200
FIXED_ITL_MS = 20
SCHEDULER_SPEC: dict[str, Any] = {
    "model": {"name": MODEL, "profile": "qwen2.5-0.5b"},
    "hardware": {"profile": "l4-24gb"},
    "engine": "scheduler",
    "replicas": 2,
    "latency": {"stepOverheadMs": 1},
    "podDisruptionBudget": {"enabled": True},
}
FIXED_SPEC: dict[str, Any] = {
    "model": {"name": MODEL},
    "engine": "fixed",
    "replicas": 1,
    "latency": {"ttftOverheadMs": FIXED_TTFT_MS, "itlMs": FIXED_ITL_MS},
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("E2E") == "1":
        return
    skip = pytest.mark.skip(reason="end-to-end tests run with E2E=1 (make e2e brings up a cluster)")
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test carries the cluster's pods, events, LLMSimulators and logs."""
    report: pytest.TestReport = yield
    if report.failed and os.environ.get("E2E") == "1" and "e2e" in item.keywords:
        report.sections.append(("cluster state", diagnostics(WATCHED)))
    return report


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    try:
        connected = Cluster.connect()
    except Exception as exc:  # any failure here means "no cluster"
        pytest.fail(f"E2E=1 but no reachable cluster from KUBECONFIG: {exc}", pytrace=False)
    yield connected
    connected.close()


@pytest.fixture(scope="session")
def namespace(cluster: Cluster) -> Iterator[str]:
    with deleting_namespace(cluster, f"llmsim-e2e-{uuid.uuid4().hex[:6]}") as name:
        WATCHED.append(name)
        yield name


@pytest.fixture(scope="session")
def fleets(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    """Both fleets, created together, each Ready with all its replicas (the LLMSimulator objects)."""
    cluster.create_simulator(namespace, SCHEDULER, SCHEDULER_SPEC)
    cluster.create_simulator(namespace, FIXED, FIXED_SPEC)
    return {
        SCHEDULER: cluster.wait_ready(namespace, SCHEDULER, SCHEDULER_SPEC["replicas"]),
        FIXED: cluster.wait_ready(namespace, FIXED, FIXED_SPEC["replicas"]),
    }


def sdk(cluster: Cluster, base_url: str) -> openai.OpenAI:
    """The openai SDK at ``base_url`` (e.g. a Service through the API server), with the cluster's TLS and token."""
    # The SDK sends its api_key as the Authorization header: the kubeconfig's bearer token, if it has one.
    token = cluster.headers.get("authorization", "").removeprefix("Bearer ") or "unused"
    http = openai.DefaultHttpxClient(verify=cluster.ssl_context, timeout=60)
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=token, http_client=http, max_retries=0)


def selector(name: str) -> str:
    """The pods of one LLMSimulator (the operator's selector labels)."""
    return f"app.kubernetes.io/name=llmsim,app.kubernetes.io/instance={name}"
