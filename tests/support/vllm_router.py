"""vllm-router (the vllm-router wheel's binary) running recipes/vllm-router/router.args in front of given workers."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.server import free_port, running_process

RECIPE = Path(__file__).parents[2] / "recipes" / "vllm-router"
#: The binary the dev extra installs next to this interpreter (None: not installed).
VLLM_ROUTER = shutil.which("vllm-router", path=str(Path(sys.executable).parent))


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
