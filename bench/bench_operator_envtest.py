"""Operator convergence at N LLMSimulators against a real kube-apiserver (envtest), no cluster needed.

The same case as ``bench_operator_fleet.py --scale N``'s bulk part, on the envtest control plane
(etcd, kube-apiserver 1.20 and kube-controller-manager; ``KUBEBUILDER_ASSETS``, see
``hack/envtest-assets.sh``), with the operator as a process authenticated as its ServiceAccount:

- bulk: N LLMSimulators (0 replicas) in one ``kubectl apply -f``; convergence = every Deployment
  exists and every status says generation 1, Ready, not Degraded (``bench_operator_fleet.converged``),
  timed from kubectl's return (goal <= 10 s at 1,000);
- the API server's ``apiserver_request_total`` (non-WATCH) from before the apply to convergence,
  by verb and resource, minus kubectl's and the bench's own: the operator's API calls per LLMSimulator;
- the operator's CPU seconds (``/proc/PID/stat``) over the same span (and after kubectl returned)
  and its peak RSS (VmHWM).

``--profile FILE`` runs the operator under cProfile and writes its stats to FILE when it stops.
Writes bench/results/operator_envtest_N.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kubernetes  # noqa: E402
from tests.kube.envtest import EnvTest, find_assets  # noqa: E402
from tests.operator.cluster import (  # noqa: E402
    OperatorProcess,
    install_rbac,
    service_account_kubeconfig,
)

from bench.bench_operator_fleet import bulk_manifest, converged  # noqa: E402
from llmsim_operator.crd import custom_resource_definition  # noqa: E402

client: Any = kubernetes.client
config: Any = kubernetes.config
GOAL_S = 10.0
_PAGE = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _PAGE  # utime + stime


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def request_counts(api: Any) -> Counter[tuple[str, str, str]]:
    """apiserver_request_total, non-WATCH, by (verb, resource, subresource)."""
    kubectl = str(find_assets() / "kubectl")
    text = subprocess.run(
        [kubectl, "--kubeconfig", KUBECONFIG, "get", "--raw", "/metrics"], check=True, capture_output=True, text=True
    ).stdout
    counts: Counter[tuple[str, str, str]] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line[len("apiserver_request_total{") :].rpartition("} ")
        labels = dict(part.split("=", 1) for part in labels_text.split('",') if "=" in part)
        labels = {k: v.strip('"') for k, v in labels.items()}
        if labels.get("verb") in ("WATCH", "WATCHLIST", "CONNECT"):
            continue
        counts[(labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))] += int(float(value))
    return counts


def _not_operator(key: tuple[str, str, str]) -> bool:
    """Requests that are not the operator's: kubectl apply's (a GET of the object and of its namespace,
    a POST), the bench's polls (LISTs), the controller-manager's (ReplicaSets, Deployment status)."""
    verb, resource, subresource = key
    return (
        (verb in ("GET", "POST") and resource in ("llmsimulators", "namespaces"))
        or verb == "LIST"
        or resource in ("replicasets", "endpoints", "endpointslices", "leases")
        or (resource == "deployments" and subresource == "status")
    )


def wait_operator_ready(api: Any, ns: str, timeout: float = 120.0) -> None:
    """One probe LLMSimulator converged: the operator is up and its watches run."""
    path = Path(tempfile.mkdtemp()) / "probe.json"
    path.write_text(bulk_manifest(ns, ["probe"]))
    kubectl_apply(path)
    deadline = time.monotonic() + timeout
    while not converged(api, ns, {"probe"}):
        if time.monotonic() > deadline:
            raise SystemExit("the operator did not converge one LLMSimulator")
        time.sleep(0.5)


KUBECONFIG = ""


def kubectl_apply(path: Path) -> None:
    kubectl = str(find_assets() / "kubectl")
    subprocess.run([kubectl, "--kubeconfig", KUBECONFIG, "apply", "-f", str(path)], check=True, capture_output=True)


def run(count: int, timeout: float, profile: Path | None, out: Path, operator_root: Path) -> int:
    global KUBECONFIG
    tmp = Path(tempfile.mkdtemp(prefix="llmsim-opbench-"))
    # A /16 of Service addresses: envtest's default /24 runs out at 254 Services.
    with EnvTest(extra_apiserver_args=("--service-cluster-ip-range=10.0.0.0/16",)) as env:
        KUBECONFIG = str(env.kubeconfig_path)
        api = config.new_client_from_config(str(env.kubeconfig_path))
        client.ApiextensionsV1Api(api).create_custom_resource_definition(custom_resource_definition())
        time.sleep(2)  # the CRD established
        install_rbac(api)
        kubeconfig = service_account_kubeconfig(api, env.server_url, env.ca_path, tmp / "kubeconfig")
        prelude = ""
        if profile is not None:
            prelude = (
                "import atexit, cProfile\n_p = cProfile.Profile(); _p.enable()\n"
                f"atexit.register(lambda: (_p.disable(), _p.dump_stats({str(profile)!r})))"
            )
        operator = OperatorProcess(
            kubeconfig, tmp / "operator.log", "--simulator-image", "llmsim:bench", prelude=prelude, root=operator_root
        )
        operator.start()
        assert operator.process is not None
        pid = operator.process.pid
        try:
            ns = "bench"
            client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
            wait_operator_ready(api, ns)
            names = [f"s-{i:05d}" for i in range(count)]
            manifest = tmp / "bulk.json"
            manifest.write_text(bulk_manifest(ns, names))
            before, cpu_before = request_counts(api), cpu_seconds(pid)
            start = time.perf_counter()
            kubectl_apply(manifest)
            applied, cpu_at_applied = time.perf_counter(), cpu_seconds(pid)
            converged_s = poll_s = None
            while time.perf_counter() - applied < timeout:
                polled = time.perf_counter()
                done = converged(api, ns, set(names))
                poll_s = time.perf_counter() - polled
                if done:
                    converged_s = time.perf_counter() - applied
                    break
                time.sleep(0.5)
            cpu_now = cpu_seconds(pid)
            cpu, cpu_tail = cpu_now - cpu_before, cpu_now - cpu_at_applied
            delta = request_counts(api) - before
            operator_calls = Counter({k: v for k, v in delta.items() if not _not_operator(k)})
            result: dict[str, Any] = {
                "bench": "operator_envtest",
                "count": count,
                "bulk_apply_s": round(applied - start, 1),
                "converge_after_apply_s": None if converged_s is None else round(converged_s, 1),
                "goal_s": GOAL_S,
                # Seconds the last convergence check took (listing every LLMSimulator and Deployment):
                # convergence is seen up to that much late.
                "last_poll_s": None if poll_s is None else round(poll_s, 1),
                "operator_cpu_s": round(cpu, 1),
                "operator_cpu_ms_per_sim": round(1000 * cpu / count, 1),
                # CPU seconds after kubectl returned: close to converge_after_apply_s means the operator's
                # CPU is the bound; far below it, the API server (or the machine's other work) is.
                "operator_cpu_after_apply_s": round(cpu_tail, 1),
                "operator_peak_rss_mib": peak_rss_mib(pid),
                "operator_writes_per_sim": round(sum(operator_calls.values()) / count, 2),
                "operator_calls": {"/".join(p for p in k if p): v for k, v in operator_calls.most_common()},
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "operator_root": str(operator_root),
            }
        finally:
            operator.stop()
    print(json.dumps(result, indent=2))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if converged_s is not None and converged_s <= GOAL_S else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="100 LLMSimulators")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--profile", type=Path, default=None, help="cProfile the operator into this file")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--operator-root", type=Path, default=ROOT, help="run the operator of this checkout (A/B runs)")
    args = ap.parse_args()
    count = 100 if args.quick else args.count
    out = args.out or ROOT / "bench" / "results" / f"operator_envtest_{count}.json"
    return run(count, args.timeout, args.profile, out, args.operator_root.resolve())


if __name__ == "__main__":
    sys.exit(main())
