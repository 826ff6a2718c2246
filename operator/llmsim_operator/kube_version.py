"""Which Kubernetes the install manifests are for: a version named on the command line, or the server's.

Only one difference matters today: API servers before 1.25 do not know the CRD's CEL rules
(``x-kubernetes-validations``), and 1.20–1.22 refuse the field under server-side apply and
kubectl's validation. The operator re-checks every rule itself (:mod:`.spec`), so leaving them
out on old servers loses nothing.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Sequence

Version = tuple[int, int]

#: CEL validation rules in CRDs are on by default from Kubernetes 1.25 (beta; alpha behind a gate in 1.23).
CEL_SINCE: Version = (1, 25)

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:[.+\-].*)?$")

#: Runs a kubectl command and returns its stdout (tests substitute a fake).
Kubectl = Callable[[Sequence[str]], str]


class VersionError(ValueError):
    """No usable version: the message is one line for the command line."""


def parse_version(text: str) -> Version:
    """``1.20``, ``v1.20.2``, ``1.27.3-gke.100`` -> (major, minor)."""
    match = _VERSION.match(text.strip())
    if match is None:
        raise VersionError(f"not a Kubernetes version: {text!r} (expected e.g. 1.20 or v1.28.3)")
    return int(match.group(1)), int(match.group(2))


def supports_cel(version: Version) -> bool:
    return version >= CEL_SINCE


def run_kubectl(args: Sequence[str]) -> str:
    try:
        done = subprocess.run(["kubectl", *args], capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        raise VersionError("--kube-version auto needs kubectl on PATH (or give the version, e.g. 1.20)") from None
    except subprocess.TimeoutExpired:
        raise VersionError(f"kubectl {' '.join(args)} did not answer within 60 s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise VersionError(f"kubectl {' '.join(args)} failed: {last}")
    return done.stdout


def server_version(kubectl: Kubectl = run_kubectl) -> Version | None:
    """The API server's (major, minor), None when it does not say (source builds report v0.0.0)."""
    info = json.loads(kubectl(["version", "-o", "json"])).get("serverVersion") or {}
    major, minor = str(info.get("major", "")).rstrip("+"), str(info.get("minor", "")).rstrip("+")
    if major.isdigit() and minor.isdigit() and int(major) > 0:
        return int(major), int(minor)
    try:
        version = parse_version(str(info.get("gitVersion", "")))
    except VersionError:
        return None
    return version if version[0] > 0 else None


def server_knows_cel(kubectl: Kubectl = run_kubectl) -> bool:
    """Whether the server's own CRD schema has ``x-kubernetes-validations`` (its OpenAPI says)."""
    spec = json.loads(kubectl(["get", "--raw", "/openapi/v2"]))
    props = (
        spec.get("definitions", {})
        .get("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps", {})
        .get("properties", {})
    )
    return "x-kubernetes-validations" in props


def detect_cel(kubectl: Kubectl = run_kubectl) -> tuple[bool, str]:
    """(whether to keep the CEL rules, how that was decided) for the cluster kubectl points at."""
    version = server_version(kubectl)
    if version is not None:
        return supports_cel(version), f"server {version[0]}.{version[1]}"
    knows = server_knows_cel(kubectl)
    return knows, "server version unknown; its OpenAPI " + ("has" if knows else "lacks") + " x-kubernetes-validations"
