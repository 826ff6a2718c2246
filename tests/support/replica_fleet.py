"""Replicas for a gateway recipe's test: ``llmsim serve`` processes, each told its pod name."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from tests.support.server import ServerProcess, running_server


def start_replicas(stack: ExitStack, tmp_path: Path, config: str, n: int) -> list[ServerProcess]:
    """``n`` servers of ``config``, named ``replica-0`` ... (their ``x-llmsim-pod``), stopped with ``stack``."""
    replicas = []
    for i in range(n):
        home = tmp_path / f"replica-{i}"
        home.mkdir()
        replicas.append(
            stack.enter_context(running_server(home, config=config, extra_args=["--pod-name", f"replica-{i}"]))
        )
    return replicas
