"""A fault timeline in the real server: the ordinal from the environment or the flag, and the refusal without one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.server import running_server

# From time 0 (the process's start), replica 1 answers 500.
CONFIG = """
version: 1
models:
  - name: m
    engine: instant
    faults:
      timeline:
        phases:
          - {name: one-bad, at: 0, replicas: [1], set: {rates: {server_error: 1}}}
"""
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("how", "status"),
    [
        ({"env": {"LLMSIM_REPLICA_ORDINAL": "1"}}, 500),
        ({"extra_args": ["--replica-ordinal", "1"]}, 500),
        ({"env": {"LLMSIM_REPLICA_ORDINAL": "0"}}, 200),
        # The flag wins over the environment.
        ({"env": {"LLMSIM_REPLICA_ORDINAL": "1"}, "extra_args": ["--replica-ordinal", "0"]}, 200),
    ],
)
def test_the_replica_knows_its_ordinal_from_the_command_line(
    tmp_path: Path, how: dict[str, object], status: int
) -> None:
    with running_server(tmp_path, config=CONFIG, **how) as server:  # type: ignore[arg-type]
        assert httpx.post(server.base_url + "/v1/chat/completions", json=CHAT).status_code == status
        state = httpx.get(server.base_url + "/admin/timeline").json()["m"]
        assert state["phase"] == "one-bad"
        assert state["affected"] == {"one-bad": status == 500}


def test_a_timeline_naming_replicas_without_an_ordinal_stops_the_server_before_bind(tmp_path: Path) -> None:
    (tmp_path / "models.yml").write_text(CONFIG)
    done = subprocess.run(
        [sys.executable, "-m", "llmsim.cli", "serve", "--config", str(tmp_path / "models.yml"), "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "field 'faults.timeline': phase 'one-bad' names replicas" in done.stderr
