"""Helpers of the integration tests: a real API server (envtest), the operator as a process, watches.

Waiting is event-driven: every wait is a watch on the object, with a deadline only as a failure bound.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from llmsim_operator.conventions import API_VERSION, KIND
from llmsim_operator.manifests import install_manifests

ROOT = Path(__file__).resolve().parents[2]
WAIT = 90.0

client: Any = kubernetes.client
dynamic: Any = kubernetes.dynamic
ApiException: Any = kubernetes.client.ApiException

Predicate = Callable[[dict[str, Any] | None], bool]


def wait_for(
    dyn: Any,
    api_version: str,
    kind: str,
    namespace: str,
    name: str,
    predicate: Predicate,
    what: str,
    timeout: float = WAIT,
) -> dict[str, Any] | None:
    """Watch one object until ``predicate(object or None)`` holds; return it. Fails after ``timeout``.

    A watch whose resource version has expired (410 Gone: the API server's watch cache of a kind whose
    CRD was just established can start past the listing's version) lists again and watches from there.
    """
    resource = dyn.resources.get(api_version=api_version, kind=kind)
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    while (left := deadline - time.monotonic()) > 0:
        listing = resource.get(namespace=namespace, field_selector=f"metadata.name={name}")
        current = listing.items[0].to_dict() if listing.items else None
        last = current
        if predicate(current):
            return current
        try:
            for event in resource.watch(
                namespace=namespace,
                name=name,
                resource_version=listing.metadata.resourceVersion,
                timeout=max(1, int(left)),
            ):
                if event["type"] == "ERROR":
                    raise AssertionError(f"watch error while waiting for {what}: {event['raw_object']}")
                current = None if event["type"] == "DELETED" else event["raw_object"]
                last = current
                if predicate(current):
                    return current
        except ApiException as exc:
            if exc.status != 410:
                raise
    raise AssertionError(f"{kind} {namespace}/{name}: timed out after {timeout:.0f}s waiting for {what}; last: {last}")


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return {}


def simulator_body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}


def install_rbac(api: Any) -> None:
    """Namespace, ServiceAccount, ClusterRole and binding exactly as `llmsim-operator manifests` prints them."""
    dyn = dynamic.DynamicClient(api)
    for obj in install_manifests():
        if obj["kind"] in ("CustomResourceDefinition", "Deployment"):
            continue
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        resource.server_side_apply(body=obj, field_manager="llmsim-tests", force_conflicts=True)


def service_account_kubeconfig(
    api: Any, server: str, ca_path: Path, path: Path, account: str = "llmsim-operator"
) -> Path:
    """A kubeconfig authenticating as a ServiceAccount of llmsim-system (TokenRequest API)."""
    core = client.CoreV1Api(api)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 7200}}
    token = core.create_namespaced_service_account_token(account, "llmsim-system", request).status.token
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "envtest", "cluster": {"server": server, "certificate-authority": str(ca_path)}}],
        "users": [{"name": "llmsim-operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "envtest", "user": "llmsim-operator"}}],
        "current-context": "operator",
    }
    path.write_text(json.dumps(cfg))
    path.chmod(0o600)
    return path


class OperatorProcess:
    """``python -m llmsim_operator run`` as a child process, logging to a file."""

    def __init__(self, kubeconfig: Path, log_path: Path, *args: str, prelude: str = "", root: Path = ROOT) -> None:
        self.kubeconfig = kubeconfig
        # The checkout whose operator runs (the benches compare another tree's with this one's).
        self.root = root
        self.log_path = log_path
        self.args = args
        # Python run before the CLI in the same interpreter (e.g. to break getpass as uid 65532 has it).
        self.prelude = prelude
        self.process: subprocess.Popen[bytes] | None = None
        self.liveness = ""

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(self.root / "operator"), str(self.root / "simulator"), env.get("PYTHONPATH", "")]
        )
        env["KUBECONFIG"] = str(self.kubeconfig)
        entry = ["-m", "llmsim_operator"]
        if self.prelude:
            entry = ["-c", f"{self.prelude}\nimport runpy\nrunpy.run_module('llmsim_operator', run_name='__main__')"]
        argv = [
            sys.executable,
            *entry,
            "run",
            *([] if "-n" in self.args else ["--all-namespaces"]),
            "--kubeconfig",
            str(self.kubeconfig),
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen([*argv, *self.args], stdout=log, stderr=subprocess.STDOUT, env=env)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def parse_models_yml(config_map: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(config_map["data"]["models.yml"])
    return doc


def wait_event(dyn: Any, namespace: str, involved_kind: str, involved_name: str, reason: str,
               timeout: float = WAIT) -> dict[str, Any]:  # fmt: skip
    """Watch the namespace's events until one with ``reason`` about the object appears."""
    events = dyn.resources.get(api_version="v1", kind="Event")
    selector = f"involvedObject.kind={involved_kind},involvedObject.name={involved_name}"
    listing = events.get(namespace=namespace, field_selector=selector)
    for item in listing.items:
        if item.reason == reason:
            found: dict[str, Any] = item.to_dict()
            return found
    for event in events.watch(
        namespace=namespace,
        field_selector=selector,
        resource_version=listing.metadata.resourceVersion,
        timeout=int(timeout),
    ):
        if event["raw_object"].get("reason") == reason:
            return dict(event["raw_object"])
    raise AssertionError(f"no {reason} event for {involved_kind} {namespace}/{involved_name} within {timeout:.0f}s")


def merge_patch(dyn: Any, api_version: str, kind: str, namespace: str, name: str, body: dict[str, Any],
                subresource: str | None = None) -> dict[str, Any]:  # fmt: skip
    """JSON merge patch through the dynamic client (dicts in, dicts out; no typed-model decoding)."""
    resource = dyn.resources.get(api_version=api_version, kind=kind)
    if subresource is not None:
        resource = resource.subresources[subresource]
    patched = resource.patch(body=body, name=name, namespace=namespace, content_type="application/merge-patch+json")
    out: dict[str, Any] = patched.to_dict()
    return out


def delete(dyn: Any, api_version: str, kind: str, namespace: str, name: str) -> None:
    dyn.resources.get(api_version=api_version, kind=kind).delete(name=name, namespace=namespace)
