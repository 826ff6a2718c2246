"""The fleet action's script (hack/fleet-action.sh, all .github/actions/fleet runs) against the cluster.

It runs as the action's step runs it: no arguments, the inputs as FLEET_* variables, GITHUB_OUTPUT
set. The inputs are a user's: the fleet of docs/ci.md's example, read from the doc itself, in a
namespace of its own, and ``install: manifests`` with the images make e2e built, which is what
docs/ci.md tells a job with images of its own to give (the release's images are not in this
cluster). That reinstall renders what run.sh applied, so the running operator is left as it is.
The fleet the action reports must then be up: each endpoint, as the output names it, answers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from e2e.cluster import OPERATOR_NAMESPACE, Cluster, deleting_namespace
from e2e.conftest import WATCHED

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "hack" / "fleet-action.sh"
CI_DOC = ROOT / "docs" / "ci.md"
OPERATOR = "llmsim-operator"
#: The action's timeout input (a failure bound).
TIMEOUT = "180s"


def docs_fleet() -> dict[str, Any]:
    """The LLMSimulator a gateway project keeps in ci/llmsim-fleet.yaml (docs/ci.md)."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", CI_DOC.read_text(), flags=re.DOTALL | re.MULTILINE)
    (fleet,) = [doc for doc in map(yaml.safe_load, blocks) if doc.get("kind") == "LLMSimulator"]
    return dict(fleet)


@pytest.fixture(scope="module")
def fleet_namespace(cluster: Cluster) -> Iterator[str]:
    with deleting_namespace(cluster, f"llmsim-fleet-{uuid.uuid4().hex[:6]}") as name:
        WATCHED.append(name)
        yield name


@pytest.fixture(scope="module")
def action(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, fleet_namespace: str) -> dict[str, Any]:
    """One run of the action's step: its exit status, stdout, stderr and GITHUB_OUTPUT file, and the
    operator's pod and Deployment generation from before it."""
    pod_before = cluster.operator_pod().metadata.name
    generation_before = cluster.apps.read_namespaced_deployment(OPERATOR, OPERATOR_NAMESPACE).metadata.generation
    work = tmp_path_factory.mktemp("fleet-action")
    manifests = work / "ci" / "llmsim-fleet.yaml"
    manifests.parent.mkdir()
    manifests.write_text(yaml.safe_dump(docs_fleet()))
    output = work / "github-output"
    output.touch()
    env = {
        **os.environ,
        "FLEET_MANIFESTS": "ci/llmsim-fleet.yaml",
        "FLEET_INSTALL": "manifests",
        "FLEET_OPERATOR_IMAGE": os.environ.get("E2E_OPERATOR_IMAGE", "llmsim-operator:e2e"),
        "FLEET_SIMULATOR_IMAGE": os.environ.get("E2E_SIMULATOR_IMAGE", "llmsim:e2e"),
        "FLEET_NAMESPACE": fleet_namespace,
        "FLEET_TIMEOUT": TIMEOUT,
        # The action's own venv holds llmsim-operator; here, the e2e's.
        "FLEET_LLMSIM_OPERATOR": str(Path(sys.executable).parent / "llmsim-operator"),
        "GITHUB_OUTPUT": str(output),
    }
    # In the caller's checkout, as the action's step runs (the manifests' paths are relative to it).
    done = subprocess.run([str(SCRIPT)], cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False)
    return {
        "returncode": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "output": output.read_text(),
        "pod_before": pod_before,
        "generation_before": generation_before,
    }


def endpoints(action: dict[str, Any]) -> dict[str, str]:
    """The action's ``endpoints`` output, name -> URL, read from GITHUB_OUTPUT as Actions would."""
    match = re.fullmatch(r"endpoints<<LLMSIM_ENDPOINTS\n(.*)\nLLMSIM_ENDPOINTS\n", action["output"], flags=re.DOTALL)
    assert match, action["output"]
    return dict(line.split("=", 1) for line in match.group(1).splitlines())


def test_the_action_succeeds_and_reports_each_simulator_of_the_fleet(
    cluster: Cluster, fleet_namespace: str, action: dict[str, Any]
) -> None:
    assert action["returncode"] == 0, action["stderr"]
    name = docs_fleet()["metadata"]["name"]
    # docs/ci.md's promise: one name=http://name.namespace.svc:8000 line per LLMSimulator.
    assert endpoints(action) == {name: f"http://{name}.{fleet_namespace}.svc:8000"}
    assert action["stdout"].strip() == f"{name}=http://{name}.{fleet_namespace}.svc:8000"


def test_the_reinstall_left_the_running_operator_alone(cluster: Cluster, action: dict[str, Any]) -> None:
    # Same manifests as run.sh applied: the Deployment's spec unchanged, the same pod still serving.
    assert action["returncode"] == 0, action["stderr"]
    deployment = cluster.apps.read_namespaced_deployment(OPERATOR, OPERATOR_NAMESPACE)
    assert deployment.metadata.generation == action["generation_before"]
    pod = cluster.operator_pod()
    assert pod.metadata.name == action["pod_before"]
    assert pod.status.container_statuses[0].ready


def test_every_reported_endpoint_has_all_replicas_up_and_answers(
    cluster: Cluster, fleet_namespace: str, action: dict[str, Any]
) -> None:
    fleet = docs_fleet()
    reported = endpoints(action)
    assert reported
    for name, url in reported.items():
        # No cluster DNS here: the Service the URL names, reached through the API server's proxy.
        parts = urlsplit(url)
        service, namespace = parts.hostname.split(".")[:2]  # type: ignore[union-attr]
        assert (service, namespace) == (name, fleet_namespace)
        addresses = [
            address
            for subset in cluster.core.read_namespaced_endpoints(service, namespace).subsets or []
            for address in subset.addresses or []
        ]
        assert len(addresses) == fleet["spec"]["replicas"]
        base = f"{cluster.host}/api/v1/namespaces/{namespace}/services/{service}:{parts.port}/proxy/v1"
        with cluster.http() as http:
            models = http.get(f"{base}/models")
            reply = http.post(
                f"{base}/chat/completions",
                json={
                    "model": fleet["spec"]["model"]["name"],
                    "messages": [{"role": "user", "content": "ping"}],
                    "max_tokens": 16,
                },
            )
        assert models.status_code == 200, models.text
        assert [m["id"] for m in models.json()["data"]] == [fleet["spec"]["model"]["name"]]
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["choices"][0]["message"]["content"]
        assert 0 < body["usage"]["completion_tokens"] <= 16
