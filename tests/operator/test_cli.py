"""`llmsim-operator manifests` / `crd` without the [operator] extra, `--kube-version`, and kopf's identity."""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmsim_operator import cli
from llmsim_operator.crd import custom_resource_definition
from llmsim_operator.kube_version import VersionError, detect_cel, parse_version, server_version
from llmsim_operator.options import OperatorOptions

ROOT = Path(__file__).resolve().parents[2]
#: What the [operator] extra adds; a plain `pip install llmsim` has none of them.
EXTRA_MODULES = ("kopf", "kubernetes_asyncio", "aiohttp", "kubernetes")


def run_without_extra(*argv: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a fresh interpreter where importing any [operator] module fails, as after a plain install."""
    code = (
        "import sys\n"
        f"for name in {EXTRA_MODULES!r}:\n"
        "    sys.modules[name] = None  # import raises ModuleNotFoundError, as when not installed\n"
        "from llmsim_operator.cli import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60, check=False, cwd=ROOT
    )


def cel_rules(doc: Any) -> int:
    if isinstance(doc, dict):
        return len(doc.get("x-kubernetes-validations", [])) + sum(cel_rules(v) for v in doc.values())
    if isinstance(doc, list):
        return sum(cel_rules(v) for v in doc)
    return 0


def test_manifests_and_crd_need_no_operator_extra() -> None:
    manifests = run_without_extra("manifests", "--image", "op:1")
    assert manifests.returncode == 0, manifests.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(manifests.stdout) if d]
    assert kinds[0] == "CustomResourceDefinition"
    assert "Deployment" in kinds
    crd = run_without_extra("crd")
    assert crd.returncode == 0, crd.stderr
    assert yaml.safe_load(crd.stdout) == custom_resource_definition()


def test_run_without_the_extra_says_which_extra_in_one_line() -> None:
    done = run_without_extra("run")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "pip install 'llmsim[operator]'" in lines[0]
    assert "kopf" in lines[0]


def test_default_crd_keeps_every_cel_rule() -> None:
    # crd.RULES: name, name of a disaggregated fleet, scheduler model, disaggregation and data-parallel
    # engine, hardware, responses, fault rates, disruption budget.
    assert cel_rules(custom_resource_definition()) == 9


@pytest.mark.parametrize(("version", "kept"), [("1.20", 0), ("v1.24.9", 0), ("1.25", 9), ("1.31.2-gke.100", 9)])
def test_kube_version_leaves_out_cel_rules_before_1_25(
    capsys: pytest.CaptureFixture[str], version: str, kept: int
) -> None:
    assert cli.main(["manifests", "--kube-version", version]) == 0
    out, err = capsys.readouterr()
    (crd,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "CustomResourceDefinition"]
    assert cel_rules(crd) == kept
    assert ("without CEL rules" in err) == (kept == 0)
    # Nothing else changes: the full CRD with the rules deleted by hand is what was printed.
    expected = custom_resource_definition()
    if kept == 0:
        schema = expected["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        schema = json.loads(json.dumps(schema))
        del schema["x-kubernetes-validations"]
        del schema["properties"]["spec"]["x-kubernetes-validations"]
        del schema["properties"]["spec"]["properties"]["hardware"]["x-kubernetes-validations"]
        del schema["properties"]["spec"]["properties"]["responses"]["x-kubernetes-validations"]
        del schema["properties"]["spec"]["properties"]["podDisruptionBudget"]["x-kubernetes-validations"]
        del schema["properties"]["spec"]["properties"]["faults"]["properties"]["rates"]["x-kubernetes-validations"]
        expected["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = schema
    assert crd == expected


def test_a_bad_kube_version_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["crd", "--kube-version", "latest"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == "llmsim-operator: not a Kubernetes version: 'latest' (expected e.g. 1.20 or v1.28.3)"


def test_parse_version() -> None:
    assert parse_version("1.20") == (1, 20)
    assert parse_version("v1.20.2") == (1, 20)
    assert parse_version("1.27+") == (1, 27)
    with pytest.raises(VersionError):
        parse_version("twenty")


def fake_kubectl(version: dict[str, str], openapi_props: list[str] | None = None) -> Any:
    calls: list[list[str]] = []

    def kubectl(args: Sequence[str]) -> str:
        calls.append(list(args))
        if args[0] == "version":
            return json.dumps({"clientVersion": {"major": "1", "minor": "32"}, "serverVersion": version})
        assert openapi_props is not None, "the server's version was enough; no OpenAPI read expected"
        props: dict[str, Any] = {p: {} for p in openapi_props}
        name = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps"
        return json.dumps({"definitions": {name: {"properties": props}}})

    kubectl.calls = calls  # type: ignore[attr-defined]
    return kubectl


def test_detection_reads_the_server_version() -> None:
    assert detect_cel(fake_kubectl({"major": "1", "minor": "20", "gitVersion": "v1.20.2"})) == (False, "server 1.20")
    # GKE and EKS report minors like "27+".
    assert detect_cel(fake_kubectl({"major": "1", "minor": "27+", "gitVersion": "v1.27.3-gke.100"})) == (
        True,
        "server 1.27",
    )


def test_a_server_without_a_version_is_asked_its_openapi() -> None:
    # A kube-apiserver built from source without version stamps reports v0.0.0 (the shared test cluster's does).
    unstamped = {"major": "", "minor": "", "gitVersion": "v0.0.0-master+faecb196815e2"}
    assert server_version(fake_kubectl(unstamped)) is None
    old = fake_kubectl(unstamped, ["type", "properties", "x-kubernetes-preserve-unknown-fields"])
    assert detect_cel(old) == (False, "server version unknown; its OpenAPI lacks x-kubernetes-validations")
    assert old.calls[-1] == ["get", "--raw", "/openapi/v2"]
    new = fake_kubectl(unstamped, ["type", "x-kubernetes-validations"])
    assert detect_cel(new)[0] is True


def test_kopf_identity_never_asks_getpass(monkeypatch: pytest.MonkeyPatch) -> None:
    # What getpass does for uid 65532 in the image without a passwd entry (kopf's crash before the image had one).
    def no_user() -> str:
        raise KeyError("getpwuid(): uid not found: 65532")

    monkeypatch.setattr(getpass, "getuser", no_user)
    monkeypatch.setenv("POD_NAME", "llmsim-operator-5d9c-x2x")
    assert cli.own_identity() == "llmsim-operator-5d9c-x2x"
    monkeypatch.delenv("POD_NAME")
    assert "/" in cli.own_identity()
    seen: dict[str, Any] = {}
    import kopf

    monkeypatch.setattr(kopf, "configure", lambda **_: None)
    monkeypatch.setattr(kopf, "run", lambda **kwargs: seen.update(kwargs))
    cli.run(OperatorOptions(identity="pod-7"))
    # Given an identity, kopf skips peering.detect_own_id, the only caller of getpass.getuser.
    assert seen["identity"] == "pod-7"
