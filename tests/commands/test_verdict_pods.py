"""``llmsim verdict --pods``: the replicas are a selector's Ready pods, in name order, from kubectl's answer.

kubectl is a stand-in script on PATH printing a pod list, so the test checks which pods are kept
and in what order, and the refusals, without a cluster.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from llmsim.commands.verdict import pod_urls


def pod(name: str, ip: str | None, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip is not None:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


@pytest.fixture
def kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the stand-in kubectl reads its answer from (answer.json) and writes its arguments (args)."""
    script = tmp_path / "kubectl"
    script.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\ncat {tmp_path}/answer.json\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_ready_pods_in_name_order_at_their_ips(kubectl: Path) -> None:
    pods = [
        pod("sim-c", "10.0.0.3"),
        pod("sim-a", "10.0.0.1"),
        pod("sim-b", "10.0.0.2", ready=False),
        pod("sim-d", "10.0.0.4", deleting=True),
        pod("sim-e", None),
        pod("sim-f", "fd00::6"),
    ]
    (kubectl / "answer.json").write_text(json.dumps({"items": pods}))
    urls = pod_urls("ns", "app.kubernetes.io/instance=sim", 8000)
    assert urls == ["http://10.0.0.1:8000", "http://10.0.0.3:8000", "http://[fd00::6]:8000"]
    assert (kubectl / "args").read_text().split() == [
        "get", "pods", "-n", "ns", "-l", "app.kubernetes.io/instance=sim", "-o", "json",
    ]  # fmt: skip


def test_a_broken_answer_is_an_error(kubectl: Path) -> None:
    (kubectl / "answer.json").write_text("not json")
    with pytest.raises(RuntimeError, match="not a pod list"):
        pod_urls("ns", "x=y", 8000)
