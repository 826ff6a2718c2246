"""The image's ``vllm`` entry points (deploy/vllm-shim) hand their arguments to ``llmsim serve``.

Run as scripts against the local tree, as the image runs them; each case ends before a port is bound
(an answer only ``llmsim serve``'s vLLM form gives proves the handoff).
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "deploy" / "vllm-shim"


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(str(p) for p in (SHIM / "python", ROOT / "simulator", ROOT / "operator"))
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=60, check=False)


VLLM = str(SHIM / "bin" / "vllm")
API_SERVER = ["-m", "vllm.entrypoints.openai.api_server"]


@pytest.mark.parametrize(
    "entry",
    [[VLLM, "serve", "meta-llama/Llama-3.1-8B-Instruct"], [*API_SERVER, "--model", "meta-llama/Llama-3.1-8B-Instruct"]],
    ids=["vllm serve", "api_server"],
)
def test_the_arguments_reach_llmsim_serve(entry: list[str]) -> None:
    refused = run(*entry, "--max-model-len", "32768", "--tensor-parallel-size", "3")
    assert refused.returncode == 2
    assert refused.stderr == (
        "llmsim: --tensor-parallel-size: Total number of attention heads (32) must be divisible by tensor "
        "parallel size (3).\n"
    )
    unknown = run(*entry, "--no-such-flag")
    assert unknown.returncode == 2
    assert "error: unrecognized arguments: --no-such-flag" in unknown.stderr


def test_vllm_serve_help_is_llmsim_serves() -> None:
    shown = run(VLLM, "serve", "--help")
    assert shown.returncode == 0
    assert "vLLM's command line" in shown.stdout


def test_other_vllm_commands_are_refused() -> None:
    other = run(VLLM, "bench", "serve")
    assert other.returncode == 2
    assert "only `vllm serve ...` is simulated" in other.stderr


def test_the_shims_are_not_in_the_wheel() -> None:
    """A wheel installed beside a real vLLM must not shadow it: no ``vllm`` package, no ``vllm`` script."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found = pyproject["tool"]["setuptools"]["packages"]["find"]
    assert not any(fnmatch.fnmatch("vllm", pattern) for pattern in found["include"])
    assert all(not (ROOT / where / "vllm").exists() for where in found["where"])
    assert "vllm" not in pyproject["project"].get("scripts", {})
