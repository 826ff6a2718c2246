"""GitHub workflows and actions, linted: actionlint (with shellcheck on every `run:`) and zizmor.

Both run on a copy of ``.github/`` that also holds the example workflow of docs/ci.md, with its
``uses:`` of the fleet action pointed at the local copy, so actionlint checks the inputs it passes
against the action's own metadata. zizmor runs offline: its audits that ask GitHub (impostor
commits, a SHA that does not match its version comment) cannot run here; the pinned SHAs were
checked against the actions' tags by hand.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GITHUB = ROOT / ".github"


def tool(name: str) -> str:
    """The dev extra's executable next to this Python, else on PATH."""
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: pip install -e '.[dev]' (shellcheck: make system-deps)")
    return path


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project holding a copy of .github/ (and, once there, the docs' example workflow)."""
    shutil.copytree(GITHUB, tmp_path / ".github")
    # actionlint finds the project (and its local actions) by the repository around the workflows.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


def test_there_are_workflows() -> None:
    assert {p.name for p in (GITHUB / "workflows").glob("*.yml")} >= {"ci.yml", "e2e.yml"}


def test_actionlint_finds_nothing(project: Path) -> None:
    # -pyflakes "": no Python in any run: step; shellcheck checks each one's bash.
    result = run([tool("actionlint"), "-shellcheck", tool("shellcheck"), "-pyflakes", "", "-no-color"], project)
    assert result.returncode == 0, result.stdout + result.stderr


def test_zizmor_finds_nothing(project: Path) -> None:
    result = run([tool("zizmor"), "--offline", "--no-progress", "--format", "plain", str(project / ".github")], project)
    assert result.returncode == 0, result.stdout + result.stderr
