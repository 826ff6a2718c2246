"""GitHub workflows and actions, linted: actionlint (with shellcheck on every `run:`) and zizmor.

Both run on a copy of ``.github/`` that also holds the example workflow of docs/ci.md, with its
``uses:`` of the fleet action pointed at the local copy, so actionlint checks the inputs it passes
against the action's own metadata. zizmor runs offline: its audits that ask GitHub (impostor
commits, a SHA that does not match its version comment) cannot run here; the pinned SHAs were
checked against the actions' tags by hand.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from llmsim_operator.crd import custom_resource_definition

ROOT = Path(__file__).resolve().parents[1]
GITHUB = ROOT / ".github"
CI_DOC = ROOT / "docs" / "ci.md"
# How docs/ci.md names the fleet action; the lint runs on the local copy instead.
FLEET_USES = re.compile(r"llmsim/llmsim/\.github/actions/fleet@\S+")


def doc_blocks(language: str) -> list[str]:
    """The fenced code blocks of docs/ci.md in ``language``."""
    return re.findall(rf"^```{language}\n(.*?)^```", CI_DOC.read_text(), flags=re.DOTALL | re.MULTILINE)


def doc_yaml() -> list[dict[str, Any]]:
    return [yaml.safe_load(block) for block in doc_blocks("yaml")]


def tool(name: str) -> str:
    """The dev extra's executable next to this Python, else on PATH."""
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: pip install -e '.[dev]'")
    return path


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def make_project(root: Path, fleet_uses: str) -> Path:
    """A repository holding a copy of .github/ and the example workflow of docs/ci.md, whose fleet
    action step ``uses:`` ``fleet_uses``."""
    shutil.copytree(GITHUB, root / ".github")
    (workflow,) = [block for block in doc_blocks("yaml") if yaml.safe_load(block).get("jobs")]
    assert FLEET_USES.search(workflow), "the example uses the fleet action"
    (root / ".github" / "workflows" / "docs-ci-example.yml").write_text(FLEET_USES.sub(fleet_uses, workflow))
    # actionlint finds the project (and its local actions) by the repository around the workflows.
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_there_are_workflows() -> None:
    assert {p.name for p in (GITHUB / "workflows").glob("*.yml")} >= {"ci.yml", "e2e.yml", "release.yml"}


def test_every_action_is_pinned_by_a_full_commit_sha() -> None:
    # zizmor offline accepts a tag on a well-known action; the project pins all of them.
    for path in [*(GITHUB / "workflows").glob("*.yml"), *GITHUB.glob("actions/*/action.yml")]:
        for uses in re.findall(r"^\s*(?:- )?uses:\s*(\S+)", path.read_text(), flags=re.MULTILINE):
            if not uses.startswith("./"):
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", uses), f"{path.name}: {uses}"


def test_the_release_workflow_runs_on_version_tags_with_only_what_it_publishes() -> None:
    workflow = yaml.safe_load((GITHUB / "workflows" / "release.yml").read_text())
    # PyYAML reads the key `on` as True (YAML 1.1).
    assert workflow[True] == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {}
    (job,) = workflow["jobs"].values()
    # Write access to the release (contents) and to ghcr.io (packages), nothing else.
    assert job["permissions"] == {"contents": "write", "packages": "write"}
    runs = [step.get("run", "") for step in job["steps"]]
    assert any('make release PYTHON=python VERSION="${TAG#v}"' in run for run in runs)
    assert job["env"]["TAG"] == "${{ github.ref_name }}"
    # Publication after the checksums are checked, from dist/ as make release left it.
    (check,) = [i for i, run in enumerate(runs) if "sha256sum --check" in run]
    (push,) = [i for i, run in enumerate(runs) if "skopeo copy" in run]
    (publish,) = [i for i, run in enumerate(runs) if "gh release create" in run]
    assert check < push < publish
    assert '"$TAG" dist/*' in runs[publish]


def test_actionlint_finds_nothing(tmp_path: Path) -> None:
    # The local copy of the fleet action: actionlint checks the example's inputs against its metadata.
    project = make_project(tmp_path, "./.github/actions/fleet")
    # -pyflakes "": no Python in any run: step; shellcheck checks each one's bash.
    result = run([tool("actionlint"), "-shellcheck", tool("shellcheck"), "-pyflakes", "", "-no-color"], project)
    assert result.returncode == 0, result.stdout + result.stderr


def test_zizmor_finds_nothing(tmp_path: Path) -> None:
    # A release's commit, as the docs tell users to pin it (zizmor offline cannot tell a real one).
    project = make_project(tmp_path, f"llmsim/llmsim/.github/actions/fleet@{'0' * 40} # v0.1.0")
    result = run([tool("zizmor"), "--offline", "--no-progress", "--format", "plain", str(project / ".github")], project)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_docs_fleet_is_a_valid_llmsimulator() -> None:
    (version,) = custom_resource_definition()["spec"]["versions"]
    validator = jsonschema.Draft4Validator(version["schema"]["openAPIV3Schema"])
    fleets = [doc for doc in doc_yaml() if doc.get("kind") == "LLMSimulator"]
    assert fleets
    for fleet in fleets:
        validator.validate(fleet)


def test_the_docs_gateway_test_compiles() -> None:
    (source,) = doc_blocks("python")
    compile(source, "tests/test_gateway.py", "exec")


@pytest.mark.parametrize("script", ["hack/fleet-action.sh", "hack/release.sh"])
def test_the_scripts_the_workflows_run_pass_shellcheck(script: str) -> None:
    result = run([tool("shellcheck"), script], ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
