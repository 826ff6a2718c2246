"""What the gateway recipes' e2e runs share: an LLMSimulator of three fixed-engine pods whose
ordinal 1 has a bad phase on its fault timeline, and the verdict of what a gateway sent to them.

Each recipe's test keeps what is its own: the gateway, the bad state, and the bounds its recipe's
settings give.
"""

from __future__ import annotations

from typing import Any

from e2e.cluster import Cluster
from e2e.conftest import selector
from llmsim.benchmark.verdict import ClientRecord, ReplicaRecord, Verdict, judge, render

MODEL = "llama-3.1-8b"
DURATION = 14.0
#: The bad phase starts this long after the timeline's start (the verdict's warm-up is before it).
BAD_FROM = 3


def fleet_spec(phase: str, state: dict[str, Any], recovered_at: float) -> dict[str, Any]:
    """The LLMSimulator spec: ordinal 1 in ``state`` (phase ``phase``) from BAD_FROM to ``recovered_at``."""
    return {
        "model": {"name": MODEL},
        "engine": "fixed",
        "replicas": 3,
        "latency": {"ttftOverheadMs": 20, "itlMs": 2},
        "faults": {
            "timeline": {
                "start": "admin",
                "phases": [
                    {"name": phase, "at": BAD_FROM, "replicas": [1], "set": state},
                    {"name": "recovered", "at": recovered_at, "clear": True},
                ],
            }
        },
    }


def fleet_pods(cluster: Cluster, namespace: str, name: str) -> list[tuple[str, str]]:
    """The fleet's (pod name, URL) pairs in pod-name order: the verdict's ordinals."""
    pods = sorted(cluster.pod_urls(namespace, selector(name)).items())
    assert len(pods) == 3
    return pods


def judged(
    pods: list[tuple[str, str]], records: list[ReplicaRecord], client: list[ClientRecord], gap: float
) -> tuple[Verdict, str]:
    """The verdict of a run and its printed report; each pod's record is under its own name."""
    verdict = judge(records, client, DURATION, gap=gap)
    report = render(verdict)
    print(report)
    assert [r.name for r in records] == [name for name, _ in pods]  # x-llmsim-pod is the pod's name
    return verdict, report
