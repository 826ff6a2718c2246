"""What the e2e tests need from a real cluster: its credentials, LLMSimulators, waits, pods' HTTP, kubectl.

Traffic to the simulators goes through the API server (the service and pod proxies: no cluster DNS
needed, works on kind and on the local cluster alike) or, where the host can route to pod IPs, to
the pods directly, as an in-cluster gateway or Prometheus would.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import kubernetes
from prometheus_client.parser import text_string_to_metric_families

client: Any = kubernetes.client
config: Any = kubernetes.config
ApiException: Any = kubernetes.client.ApiException

GROUP, VERSION, PLURAL, KIND = "llmsim.io", "v1alpha1", "llmsimulators", "LLMSimulator"
API_VERSION = f"{GROUP}/{VERSION}"
OPERATOR_NAMESPACE = "llmsim-system"
OPERATOR_SELECTOR = "app.kubernetes.io/name=llmsim-operator"
#: Upper bound of any wait (a failure bound, not a measurement): pods start in seconds here.
WAIT = 180.0

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT, every: float = 1.0) -> T:
    """Poll ``probe`` until it returns something truthy; fail after ``timeout`` with ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


@dataclass
class Cluster:
    """An API client plus what a plain HTTP client needs to reach the API server as the same user."""

    api: Any
    host: str
    ssl_context: ssl.SSLContext
    headers: dict[str, str]
    kubeconfig: str
    # TLS files of the kubeconfig user (for other programs, e.g. Prometheus): CA, client cert and key.
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    # kubectl port-forwards started by pod_urls(), stopped at the end of the session.
    forwards: list[subprocess.Popen[str]] = field(default_factory=list)

    @classmethod
    def connect(cls) -> Cluster:
        cfg = client.Configuration()
        config.load_kube_config(client_configuration=cfg)
        api = client.ApiClient(cfg)
        client.VersionApi(api).get_code()  # fails here when nothing answers
        context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if not cfg.verify_ssl:  # insecure-skip-tls-verify in the kubeconfig
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            context.load_cert_chain(cfg.cert_file, cfg.key_file)
        headers = {}
        auth = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
        if auth:
            headers["authorization"] = auth if auth.startswith("Bearer ") else f"Bearer {auth}"
        kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        return cls(
            api=api,
            host=cfg.host,
            ssl_context=context,
            headers=headers,
            kubeconfig=kubeconfig,
            ca_file=cfg.ssl_ca_cert,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
        )

    def close(self) -> None:
        for forward in self.forwards:
            forward.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                forward.wait(timeout=10)
            if forward.stdout is not None:
                forward.stdout.close()
        self.api.close()

    # -- typed clients ----------------------------------------------------------------------------

    @property
    def core(self) -> Any:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> Any:
        return client.AppsV1Api(self.api)

    @property
    def custom(self) -> Any:
        return client.CustomObjectsApi(self.api)

    # -- HTTP through the API server --------------------------------------------------------------

    def http(self, timeout: float = 60.0) -> httpx.Client:
        """An httpx client for the API server's own URLs (proxies included), authenticated as the kubeconfig user."""
        return httpx.Client(base_url=self.host, verify=self.ssl_context, headers=self.headers, timeout=timeout)

    def service_url(self, namespace: str, service: str, port: str = "http") -> str:
        """Base URL of a Service's port (by name, ``http`` unless told) through the API server's service proxy."""
        return f"{self.host}/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy"

    def pod_proxy_path(self, namespace: str, pod: str, port: int = 8000) -> str:
        return f"/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy"

    def pod_metrics(
        self, namespace: str, pod: str, port: int = 8000
    ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """One pod's /metrics on ``port`` (through the pod proxy), as (sample name, sorted labels) -> value."""
        with self.http() as http:
            response = http.get(self.pod_proxy_path(namespace, pod, port) + "/metrics")
        response.raise_for_status()
        return parse_metrics(response.text)

    def pod_urls(self, namespace: str, selector: str) -> dict[str, str]:
        """Pod name -> base URL of its port 8000: the pod IP when this host routes to it, else a port-forward."""
        urls = {}
        for pod in self.ready_pods(namespace, selector):
            ip = pod.status.pod_ip
            if connects(ip, 8000):
                urls[pod.metadata.name] = f"http://{ip}:8000"
            else:
                urls[pod.metadata.name] = self.port_forward(namespace, f"pod/{pod.metadata.name}")
        return urls

    def port_forward(self, namespace: str, target: str, port: int = 8000) -> str:
        """``kubectl port-forward TARGET :PORT`` (e.g. svc/NAME, pod/NAME) until the session ends; its local base URL."""
        proc = subprocess.Popen(
            ["kubectl", "-n", namespace, "port-forward", target, f":{port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.forwards.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "Forwarding from 127.0.0.1:PORT -> 8000"
        local = line.split("127.0.0.1:")[1].split()[0] if "127.0.0.1:" in line else ""
        assert local.isdigit(), f"kubectl port-forward said: {line!r}"
        return f"http://127.0.0.1:{local}"

    # -- objects ----------------------------------------------------------------------------------

    def ready_pods(self, namespace: str, selector: str) -> list[Any]:
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        return [p for p in pods if p.metadata.deletion_timestamp is None and _ready(p)]

    def simulator(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    def create_simulator(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        return created

    def patch_simulator(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": spec})

    def wait_ready(self, namespace: str, name: str, replicas: int, timeout: float = WAIT) -> dict[str, Any]:
        """Until the LLMSimulator's status says Ready with ``replicas`` ready pods, for its current generation."""

        def ready() -> dict[str, Any] | None:
            obj = self.simulator(namespace, name)
            status = (obj or {}).get("status") or {}
            conds = {c["type"]: c["status"] for c in status.get("conditions", [])}
            current = obj is not None and status.get("observedGeneration") == obj["metadata"]["generation"]
            done = current and conds.get("Ready") == "True" and status.get("readyReplicas") == replicas
            return obj if done else None

        return wait_for(f"LLMSimulator {namespace}/{name} Ready with {replicas} replicas", ready, timeout)

    def operator_pod(self) -> Any:
        pods = self.core.list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=OPERATOR_SELECTOR).items
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        assert len(live) == 1, f"expected one operator pod, found {[p.metadata.name for p in live]}"
        return live[0]


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def connects(host: str | None, port: int) -> bool:
    if not host:
        return False
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A /metrics page as (sample name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sum_samples(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in metrics.items() if n == name and set(labels.items()) <= set(ls))


def kubectl(*args: str, timeout: float = 60.0, check: bool = True) -> str:
    done = subprocess.run(["kubectl", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout + (done.stderr if not check else "")


@contextlib.contextmanager
def deleting_namespace(cluster: Cluster, name: str) -> Iterator[str]:
    cluster.core.create_namespace({"metadata": {"name": name, "labels": {"llmsim.io/e2e": "true"}}})
    try:
        # Pods are admitted once the controller-manager has made the namespace's default ServiceAccount.
        wait_for(
            f"the default ServiceAccount of {name}", lambda: cluster.core.list_namespaced_service_account(name).items
        )
        yield name
    finally:
        with contextlib.suppress(ApiException):
            cluster.core.delete_namespace(name)


def diagnostics(namespaces: list[str]) -> str:
    """What a failed e2e test attaches: pods, events, the LLMSimulators, the operator's and pods' logs."""
    parts = []

    def section(title: str, *args: str) -> None:
        try:
            out = kubectl(*args, timeout=30, check=False)
        except subprocess.TimeoutExpired:
            out = "(kubectl timed out)"
        parts.append(f"--- {title}\n{out.rstrip()}")

    section("operator pods", "-n", OPERATOR_NAMESPACE, "get", "pods", "-o", "wide")
    section("operator log", "-n", OPERATOR_NAMESPACE, "logs", "-l", OPERATOR_SELECTOR, "--tail=80")
    section("operator log, previous container", "-n", OPERATOR_NAMESPACE, "logs", "-l", OPERATOR_SELECTOR,
            "--previous", "--tail=40")  # fmt: skip
    for ns in namespaces:
        section(f"{ns}: objects", "-n", ns, "get", "llmsimulators,deploy,rs,pods,svc,cm,pdb", "-o", "wide")
        section(f"{ns}: events", "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
        section(f"{ns}: LLMSimulators", "-n", ns, "get", "llmsimulators", "-o", "yaml")
        section(f"{ns}: simulator logs", "-n", ns, "logs", "-l", "app.kubernetes.io/name=llmsim", "--tail=20",
                "--prefix")  # fmt: skip
        section(f"{ns}: vllm-router logs", "-n", ns, "logs", "-l", "app.kubernetes.io/name=vllm-router", "--tail=40",
                "--prefix")  # fmt: skip
    return "\n".join(parts)


@contextlib.contextmanager
def simulator_for_the_test(cluster: Cluster, namespace: str, name: str, spec: dict[str, Any]) -> Iterator[None]:
    """An LLMSimulator for one test, Ready with its replicas; deleted after, and its pods waited out.

    The session's namespace lives until the end, and the one-node cluster has CPU for only a few
    fleets' requests: a test's fleet left behind starves the later tests' pods (FailedScheduling).
    """
    cluster.create_simulator(namespace, name, spec)
    try:
        cluster.wait_ready(namespace, name, spec["replicas"])
        yield
    finally:
        with contextlib.suppress(ApiException):
            cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        selector = f"app.kubernetes.io/name=llmsim,app.kubernetes.io/instance={name}"
        wait_for(
            f"the pods of {name} to go",
            lambda: not cluster.core.list_namespaced_pod(namespace, label_selector=selector).items or None,
        )
