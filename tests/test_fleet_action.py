"""hack/fleet-action.sh, the fleet action's steps, against a stand-in kubectl that logs its calls.

The real thing runs in a gateway project's kind cluster (docs/ci.md); here the order of the calls,
the arguments the inputs become, the endpoints output and the failure path are checked.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "hack" / "fleet-action.sh"

# Answers as kubectl would: `apply -o name` names what it applied, the jsonpath query gives
# name=endpoint, `wait` fails for the object named in FAKE_NOT_READY.
FAKE_KUBECTL = """#!/usr/bin/env bash
echo "kubectl $*" >>"$FAKE_LOG"
[[ "$*" != *"-f -"* ]] || cat >/dev/null  # as kubectl, read the manifests piped in
case "$*" in
    *"-o name"*) printf 'configmap/script\\nllmsimulator.llmsim.io/llama-8b\\nllmsimulator.llmsim.io/qwen\\n' ;;
    *jsonpath*)
        for arg in "$@"; do [[ $arg != llmsimulator.* ]] || name="${arg#*/}"; done
        echo "$name=http://$name.ci.svc:8000" ;;
    *"condition=Ready"*) [[ "$*" != *"${FAKE_NOT_READY:-none}"* ]] ;;
esac
"""
FAKE_OPERATOR = """#!/usr/bin/env bash
echo "llmsim-operator $*" >>"$FAKE_LOG"
echo "kind: Namespace"
"""


def fake(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def run_script(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake(bin_dir / "kubectl", FAKE_KUBECTL)
    log = tmp_path / "calls.log"
    log.touch()
    environ = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_LOG": str(log),
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        **env,
    }
    result = subprocess.run(
        [str(SCRIPT), *args], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=60, check=False
    )
    return result, log.read_text().splitlines()


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    (tmp_path / "fleet.yaml").write_text("kind: LLMSimulator\n")
    return tmp_path / "fleet.yaml"


def test_release_install_then_apply_then_wait_for_each(tmp_path: Path, fleet: Path) -> None:
    result, calls = run_script(tmp_path, str(fleet), FLEET_NAMESPACE="ci", FLEET_TIMEOUT="90s")
    assert result.returncode == 0, result.stderr
    assert calls == [
        f"kubectl apply --server-side --force-conflicts -f {ROOT}/deploy/llmsim-operator.yaml",
        "kubectl wait --for condition=established --timeout=60s crd/llmsimulators.llmsim.io",
        "kubectl -n llmsim-system rollout status deploy/llmsim-operator --timeout=90s",
        f"kubectl apply --server-side --namespace ci -o name --recursive -f {fleet}",
        "kubectl wait --namespace ci --for condition=Ready --timeout=90s llmsimulator.llmsim.io/llama-8b",
        "kubectl wait --namespace ci --for condition=Ready --timeout=90s llmsimulator.llmsim.io/qwen",
        'kubectl get --namespace ci llmsimulator.llmsim.io/llama-8b -o jsonpath={.metadata.name}={.status.endpoint}{"\\n"}',
        'kubectl get --namespace ci llmsimulator.llmsim.io/qwen -o jsonpath={.metadata.name}={.status.endpoint}{"\\n"}',
    ]
    endpoints = "llama-8b=http://llama-8b.ci.svc:8000\nqwen=http://qwen.ci.svc:8000"
    assert result.stdout.strip() == endpoints
    assert (tmp_path / "output").read_text() == f"endpoints<<LLMSIM_ENDPOINTS\n{endpoints}\nLLMSIM_ENDPOINTS\n"


def test_manifests_install_with_images_and_manifests_from_the_env(tmp_path: Path, fleet: Path) -> None:
    operator = fake(tmp_path / "llmsim-operator", FAKE_OPERATOR)
    (tmp_path / "more").mkdir()
    result, calls = run_script(
        tmp_path,
        FLEET_INSTALL="manifests",
        FLEET_LLMSIM_OPERATOR=str(operator),
        FLEET_OPERATOR_IMAGE="op:ci",
        FLEET_SIMULATOR_IMAGE="sim:ci",
        FLEET_MANIFESTS=f"{fleet}\n  {tmp_path / 'more'} ",
    )
    assert result.returncode == 0, result.stderr
    # The two ends of one pipe: either may log first.
    assert sorted(calls[:2]) == [
        "kubectl apply --server-side --force-conflicts -f -",
        "llmsim-operator manifests --kube-version auto --image op:ci --simulator-image sim:ci",
    ]
    assert f"kubectl apply --server-side -o name --recursive -f {fleet} -f {tmp_path / 'more'}" in calls


def test_install_none_skips_the_operator(tmp_path: Path, fleet: Path) -> None:
    result, calls = run_script(tmp_path, str(fleet), FLEET_INSTALL="none")
    assert result.returncode == 0, result.stderr
    assert calls[0].startswith("kubectl apply --server-side -o name")


def test_a_simulator_that_never_gets_ready_fails_the_step(tmp_path: Path, fleet: Path) -> None:
    result, _ = run_script(tmp_path, str(fleet), FAKE_NOT_READY="qwen")
    assert result.returncode == 1
    assert "llmsimulator.llmsim.io/qwen is not Ready" in result.stderr
    assert "not every LLMSimulator became Ready" in result.stderr
    assert not (tmp_path / "output").exists()


def test_a_missing_manifest_fails_before_any_call(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path, "nowhere.yaml")
    assert result.returncode == 1
    assert "nowhere.yaml: no such file or directory" in result.stderr
    assert calls == []
