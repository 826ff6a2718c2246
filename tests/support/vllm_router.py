"""vllm-router (the vllm-router wheel's binary) running recipes/vllm-router/router.args in front of given workers."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.server import free_port, running_process

RECIPE = Path(__file__).parents[2] / "recipes" / "vllm-router"


def find_router(name: str) -> str | None:
    """A router's binary: the one the dev extra installs beside this interpreter (a venv's bin/ may not
    be on PATH), else the one on PATH; None: not installed."""
    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)


def router_binary(name: str) -> str:
    """``find_router``, failing the test when the router is not installed."""
    path = find_router(name)
    if path is None:
        pytest.fail(f"{name} not found: install the dev extra (pyproject.toml pins its version)")
    return path


VLLM_ROUTER = find_router("vllm-router")
SGLANG_ROUTER = find_router("sglang-router")


def recipe_args() -> list[str]:
    """The recipe's flags: router.args without its comment lines, split on whitespace."""
    lines = (RECIPE / "router.args").read_text().splitlines()
    return [word for line in lines if not line.lstrip().startswith("#") for word in line.split()]


def flag(args: Sequence[str], name: str) -> str:
    """The value after ``name`` in ``args`` (KeyError when the recipe lacks it)."""
    for i, arg in enumerate(args[:-1]):
        if arg == name:
            return args[i + 1]
    raise KeyError(name)


@contextmanager
def running_vllm_router(tmp_path: Path, workers: Sequence[str], args: Sequence[str]) -> Iterator[str]:
    """vllm-router with ``args`` on a loopback port until the block ends; yields its base URL once /health is 200.

    Its Prometheus exporter binds 29000 by default: it gets a free port of its own.
    """
    if VLLM_ROUTER is None:
        raise RuntimeError("vllm-router is not installed (dev extra)")
    port = free_port()
    argv = [VLLM_ROUTER, *args, "--worker-urls", *workers, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    url = f"http://127.0.0.1:{port}"
    with running_process(argv, tmp_path / "vllm-router.log", url + "/health", name="vllm-router"):
        yield url
