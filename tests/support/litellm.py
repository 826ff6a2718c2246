"""A LiteLLM proxy (the ``gateway`` extra, in its own venv: hack/gateway-venv.sh) running recipes/litellm/config.yaml."""

from __future__ import annotations

import glob
import os
import secrets
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.server import free_port, stop_process

RECIPE = Path(__file__).parents[2] / "recipes" / "litellm"
#: The proxy's key for the run (LITELLM_MASTER_KEY): clients send it as their API key.
MASTER_KEY = f"sk-{secrets.token_hex(16)}"


def litellm_executable() -> str | None:
    """``LLMSIM_LITELLM`` or ``E2E_LITELLM`` (e2e/run.sh sets it), else the one hack/gateway-venv.sh installed."""
    given = os.environ.get("LLMSIM_LITELLM") or os.environ.get("E2E_LITELLM")
    if given:
        return given
    cache = os.environ.get("LLMSIM_CACHE_DIR", os.path.expanduser("~/.cache/llmsim"))
    found = sorted(glob.glob(f"{cache}/gateway/*/bin/litellm"))
    return found[-1] if found else None


def recipe_config(api_bases: Sequence[str]) -> dict[str, Any]:
    """The recipe with these replicas' base URLs (``.../v1``) as its deployments' ``api_base``, in order."""
    config: dict[str, Any] = yaml.safe_load((RECIPE / "config.yaml").read_text())
    for deployment, base in zip(config["model_list"], api_bases, strict=True):
        deployment["litellm_params"]["api_base"] = base
    return config


@contextmanager
def running_litellm(executable: str, tmp_path: Path, config: dict[str, Any]) -> Iterator[str]:
    """The proxy with ``config`` on a loopback port until the block ends; yields its base URL once it is alive.

    Starting takes about 50 s on two shared cores (imports, then a client per deployment): 180 s at most.
    """
    (tmp_path / "litellm.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = tmp_path / "litellm.log"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "WARNING", "NO_PROXY": "*",
           "LITELLM_MASTER_KEY": MASTER_KEY}  # fmt: skip
    command = [executable, "--config", str(tmp_path / "litellm.yaml"), "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("wb") as log:
        proc = subprocess.Popen([*command, "--num_workers", "1"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"litellm exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health/liveliness", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"litellm not ready after 180 s:\n{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)
