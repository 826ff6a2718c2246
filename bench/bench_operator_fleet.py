"""Operator fleet: how fast the operator converges 100 LLMSimulators (0 replicas) on a real cluster.

Needs a cluster with the operator installed (``make e2e`` runs this after the suite; alone:
``KUBECONFIG=... .venv/bin/python bench/bench_operator_fleet.py``). In fresh namespaces it measures:

- baseline: this process server-side-applies the same 300 children (ConfigMap, Deployment with 0
  replicas, Service per LLMSimulator, as the operator renders them) one after another: the API
  server's own pace for that work, on this machine, now;
- single: one LLMSimulator created -> its Deployment exists (the operator's reaction time);
- fleet: 100 LLMSimulators created back to back -> every Deployment exists and every status is
  written for generation 1 (Ready, not Degraded).

Prints the figures and the fleet/baseline ratio, writes bench/results/operator_fleet.json, and exits
non-zero only if the fleet never converges (timeout). Goal: fleet <= 30 s.

``--scale N`` (the 1,000 case: ``--scale 1000``) is the operator at rest and under its own scale, on
the machine the cluster runs on (it reads the operator's memory from /proc):

- bulk: N LLMSimulators (0 replicas) in one ``kubectl apply -f``; convergence = every Deployment
  exists and every status says generation 1, Ready, not Degraded; timed from kubectl's return
  (goal <= 10 s);
- at rest: the API server's own ``apiserver_request_total`` (non-WATCH), over two windows of
  ``--window`` seconds, with the operator running and with it scaled to 0; the difference is the
  operator's (goal <= 1 request per LLMSimulator per 10 minutes);
- restart: the operator pod replaced; writes to the fleet (resourceVersions of every LLMSimulator
  and child before and after: goal 0), the new process's peak RSS, restarts of the pod;
- namespace deletion: the N LLMSimulators' namespace deleted; seconds until it is gone, the
  operator's peak RSS and restarts (goal: none), against the memory limit the manifests give it.

Writes bench/results/operator_scale_N.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import kubernetes

from llmsim_operator.render import Owner, render_children
from llmsim_operator.simulator_config import config_data
from llmsim_operator.spec import parse_spec

ROOT = Path(__file__).resolve().parent.parent
GROUP, VERSION, PLURAL = "llmsim.io", "v1alpha1", "llmsimulators"
SPEC: dict[str, Any] = {"model": {"name": "fleet"}, "engine": "instant", "replicas": 0}
GOAL_S = 30.0
MANAGED = "app.kubernetes.io/managed-by=llmsim-operator"

client: Any = kubernetes.client
config: Any = kubernetes.config
dynamic: Any = kubernetes.dynamic


def namespace(api: Any, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name, "labels": {"llmsim.io/bench": "true"}}})
    return name


def baseline(api: Any, count: int) -> float:
    """Seconds for this process to apply the operator's 3 children of ``count`` LLMSimulators itself."""
    ns = namespace(api, "llmsim-bench-base")
    dyn = dynamic.DynamicClient(api)
    objects = []
    for i in range(count):
        sim = parse_spec(f"base-{i}", ns, SPEC)
        children = render_children(sim, Owner(f"base-{i}", "none"), config_data(sim, None), "llmsim:bench")
        for obj in (children.config_map, children.deployment, children.service):
            # No owner: a reference to an LLMSimulator that does not exist would be garbage-collected.
            del obj["metadata"]["ownerReferences"]
            objects.append(obj)
    resources = {o["kind"]: dyn.resources.get(api_version=o["apiVersion"], kind=o["kind"]) for o in objects}
    start = time.perf_counter()
    for obj in objects:
        resources[obj["kind"]].server_side_apply(body=obj, field_manager="llmsim-bench", force_conflicts=True)
    elapsed = time.perf_counter() - start
    client.CoreV1Api(api).delete_namespace(ns)
    return elapsed


def converged(api: Any, ns: str, names: set[str]) -> bool:
    custom, apps = client.CustomObjectsApi(api), client.AppsV1Api(api)
    deployments = {d.metadata.name for d in apps.list_namespaced_deployment(ns, label_selector=MANAGED).items}
    if not names <= deployments:
        return False
    for obj in custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]:
        status = obj.get("status") or {}
        conds = {c["type"]: c["status"] for c in status.get("conditions", [])}
        if obj["metadata"]["name"] in names and not (
            status.get("observedGeneration") == 1 and conds.get("Ready") == "True" and conds.get("Degraded") == "False"
        ):
            return False
    return True


def create(api: Any, ns: str, names: list[str]) -> float:
    custom = client.CustomObjectsApi(api)
    start = time.perf_counter()
    for name in names:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMSimulator", "metadata": {"name": name}, "spec": SPEC}
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    return time.perf_counter() - start


def until_converged(api: Any, ns: str, names: list[str], start: float, timeout: float) -> float | None:
    wanted = set(names)
    while time.perf_counter() - start < timeout:
        if converged(api, ns, wanted):
            return time.perf_counter() - start
        time.sleep(0.1)
    return None


# ---- the operator at scale (--scale N) ----

OPERATOR_NS, OPERATOR = "llmsim-system", "llmsim-operator"
SCALE_CONVERGE_GOAL_S = 10.0
#: Requests per LLMSimulator per 10 minutes the operator may make at rest.
AT_REST_GOAL = 1.0
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def kubectl(*args: str, stdin: str | None = None, timeout: float = 600) -> str:
    done = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args[:3])} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def request_counts() -> Counter[tuple[str, str, str]]:
    """The API server's apiserver_request_total, non-WATCH, summed by (verb, resource, subresource)."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for line in kubectl("get", "--raw", "/metrics").splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        if labels.get("verb") in ("WATCH", "WATCHLIST", "CONNECT"):
            continue
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        counts[key] += int(float(match["value"]))
    return counts


def window(seconds: float) -> tuple[float, Counter[tuple[str, str, str]]]:
    """Non-WATCH requests per second over ``seconds`` (minus this window's own 2 scrapes), and by kind."""
    before = request_counts()
    time.sleep(seconds)
    after = request_counts()
    delta = after - before
    total = sum(delta.values()) - 1  # the second /metrics GET is counted in its own answer
    return total / seconds, delta


def operator_pod() -> dict[str, Any] | None:
    pods = json.loads(
        kubectl("-n", OPERATOR_NS, "get", "pods", "-l", f"app.kubernetes.io/name={OPERATOR}", "-o", "json")
    )
    running = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    return running[0] if running else None


def restarts() -> int:
    pod = operator_pod()
    statuses = (pod or {}).get("status", {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount", 0)) for s in statuses)


def operator_pids() -> list[int]:
    """The operator's process on this node (the cluster runs on this machine)."""
    done = subprocess.run(["pgrep", "-f", "llmsim_operator|llmsim-operator run"], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split()]


def rss_mib() -> tuple[float, float]:
    """(current, peak) resident memory of the operator's process, MiB (0 when not found)."""
    cur = peak = 0.0
    for pid in operator_pids():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if "VmRSS" in fields:
            cur = max(cur, int(fields["VmRSS"].split()[0]) / 1024)
            peak = max(peak, int(fields.get("VmHWM", "0 kB").split()[0]) / 1024)
    return round(cur, 1), round(peak, 1)


def memory_limit() -> str:
    dep = json.loads(kubectl("-n", OPERATOR_NS, "get", "deploy", OPERATOR, "-o", "json"))
    limits = dep["spec"]["template"]["spec"]["containers"][0].get("resources", {}).get("limits", {})
    return str(limits.get("memory", "none"))


def wait_operator_ready(timeout: float = 300) -> None:
    kubectl(
        "-n", OPERATOR_NS, "rollout", "status", f"deploy/{OPERATOR}", f"--timeout={int(timeout)}s", timeout=timeout + 30
    )


def scale_operator(replicas: int) -> None:
    kubectl("-n", OPERATOR_NS, "scale", f"deploy/{OPERATOR}", f"--replicas={replicas}")
    if replicas:
        wait_operator_ready()
    else:
        deadline = time.monotonic() + 120
        while operator_pids() and time.monotonic() < deadline:
            time.sleep(1)


def fleet_versions(api: Any, ns: str) -> dict[str, str]:
    """resourceVersion of every LLMSimulator, ConfigMap, Deployment and Service in ``ns``."""
    custom, core, apps = client.CustomObjectsApi(api), client.CoreV1Api(api), client.AppsV1Api(api)
    out = {f"sim/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
           for o in custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]}  # fmt: skip
    for kind, items in (
        ("cm", core.list_namespaced_config_map(ns, label_selector=MANAGED).items),
        ("deploy", apps.list_namespaced_deployment(ns, label_selector=MANAGED).items),
        ("svc", core.list_namespaced_service(ns, label_selector=MANAGED).items),
    ):
        out.update({f"{kind}/{o.metadata.name}": o.metadata.resource_version for o in items})
    return out


def settle(api: Any, ns: str, quiet_s: float = 20.0, timeout: float = 600.0) -> float:
    """Seconds until no LLMSimulator or child in ``ns`` changed for ``quiet_s`` (then the fleet is at rest)."""
    start = time.perf_counter()
    previous = fleet_versions(api, ns)
    while time.perf_counter() - start < timeout:
        time.sleep(quiet_s)
        current = fleet_versions(api, ns)
        if current == previous:
            break
        previous = current
    return round(time.perf_counter() - start - quiet_s, 1)


def bulk_manifest(ns: str, names: list[str]) -> str:
    """One kubectl List of the LLMSimulators (kubectl applies its items one by one)."""
    items = [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "LLMSimulator",
            "metadata": {"name": n, "namespace": ns},
            "spec": SPEC,
        }
        for n in names
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def top(delta: Counter[tuple[str, str, str]], n: int = 8) -> dict[str, int]:
    return {"/".join(k for k in key if k): v for key, v in delta.most_common(n) if v > 0}


def install(image: str) -> None:
    """The operator as users install it (``llmsim-operator manifests``), on ``image``, freshly started."""
    manifests = subprocess.run(
        [sys.executable, "-m", "llmsim_operator", "manifests", "--kube-version", "auto", "--image", image],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifests)
    kubectl("wait", "--for", "condition=established", "--timeout=60s", "crd/llmsimulators.llmsim.io")
    kubectl("-n", OPERATOR_NS, "rollout", "restart", f"deploy/{OPERATOR}")
    wait_operator_ready()


def scale_case(api: Any, count: int, window_s: float, timeout: float, out: Path) -> int:
    """The operator at ``count`` LLMSimulators: see the module docstring."""
    server = client.VersionApi(api).get_code().git_version
    result: dict[str, Any] = {"bench": "operator_scale", "count": count, "spec": SPEC, "server_version": server}
    result["memory_limit"] = memory_limit()
    restarts_at_start = restarts()
    print(f"operator at {count} LLMSimulators on Kubernetes {server}; memory limit {result['memory_limit']}")

    ns = namespace(api, "llmsim-bench-scale")
    names = [f"s-{i:05d}" for i in range(count)]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as manifest:
        manifest.write(bulk_manifest(ns, names))
    try:
        start = time.perf_counter()
        kubectl("apply", "-f", manifest.name, timeout=timeout)
        applied = time.perf_counter()
        result["bulk_apply_s"] = round(applied - start, 1)
        print(f"  kubectl apply of {count}: {result['bulk_apply_s']} s", flush=True)
        converged_at = until_converged_all(api, ns, set(names), applied, timeout)
        result["converge_after_apply_s"] = None if converged_at is None else round(converged_at, 1)
        result["rss_after_bulk_mib"], result["peak_rss_bulk_mib"] = rss_mib()
        print(f"  converged {result['converge_after_apply_s']} s after kubectl returned; "
              f"RSS {result['rss_after_bulk_mib']} MiB (peak {result['peak_rss_bulk_mib']})", flush=True)  # fmt: skip

        result["settle_s"] = settle(api, ns)  # the last status writes and events land; then it is at rest
        rate_with, delta_with = window(window_s)
        result["rss_at_rest_mib"], _ = rss_mib()
        scale_operator(0)
        rate_without, delta_without = window(window_s)
        scale_operator(1)
        operator_rate = max(0.0, rate_with - rate_without)
        per_sim = operator_rate * 600 / count
        result["at_rest"] = {
            "window_s": window_s,
            "with_operator_rps": round(rate_with, 3),
            "without_operator_rps": round(rate_without, 3),
            "operator_per_sim_per_10min": round(per_sim, 3),
            "goal_per_sim_per_10min": AT_REST_GOAL,
            "top_with": top(delta_with),
            "top_without": top(delta_without),
        }
        print(f"  at rest: {rate_with:.2f} req/s with the operator, {rate_without:.2f} without "
              f"-> {per_sim:.3f} per LLMSimulator per 10 min (goal <= {AT_REST_GOAL})", flush=True)  # fmt: skip

        # The fresh pod just started (scale 0 -> 1) has resumed all of them: that was the restart.
        before = fleet_versions(api, ns)
        kubectl("-n", OPERATOR_NS, "rollout", "restart", f"deploy/{OPERATOR}")
        wait_operator_ready()
        time.sleep(max(30.0, count / 50))
        after = fleet_versions(api, ns)
        written = sorted(k for k in before if after.get(k) != before[k])
        result["restart"] = {
            "objects_written": len(written),
            "written_sample": written[:10],
            "rss_mib": rss_mib()[0],
            "peak_rss_mib": rss_mib()[1],
            "restarts": restarts() - restarts_at_start,
        }
        print(f"  restart: {len(written)} of {len(before)} objects written; RSS {result['restart']['rss_mib']} MiB "
              f"(peak {result['restart']['peak_rss_mib']}); pod restarts {result['restart']['restarts']}", flush=True)  # fmt: skip
    finally:
        Path(manifest.name).unlink(missing_ok=True)
        start = time.perf_counter()
        peak = 0.0
        kubectl("delete", "namespace", ns, "--wait=false")
        while time.perf_counter() - start < timeout:
            if subprocess.run(["kubectl", "get", "namespace", ns], capture_output=True).returncode != 0:
                break
            peak = max(peak, rss_mib()[1])
            time.sleep(1)
        deleted = time.perf_counter() - start
    result["namespace_deletion"] = {
        "seconds": round(deleted, 1),
        "peak_rss_mib": max(peak, rss_mib()[1]),
        "restarts": restarts() - restarts_at_start,
    }
    print(f"  namespace deletion: {deleted:.1f} s; peak RSS {result['namespace_deletion']['peak_rss_mib']} MiB; "
          f"pod restarts {result['namespace_deletion']['restarts']}")  # fmt: skip
    result["python"], result["machine"] = platform.python_version(), platform.machine()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    ok = (
        result["converge_after_apply_s"] is not None
        and result["converge_after_apply_s"] <= SCALE_CONVERGE_GOAL_S
        and result["at_rest"]["operator_per_sim_per_10min"] <= AT_REST_GOAL
        and result["restart"]["objects_written"] == 0
        and result["namespace_deletion"]["restarts"] == 0
    )
    return 0 if ok else 1


def until_converged_all(api: Any, ns: str, names: set[str], start: float, timeout: float) -> float | None:
    """Seconds from ``start`` until ``names`` converged (polled once a second: listing them is not free)."""
    while time.perf_counter() - start < timeout:
        if converged(api, ns, names):
            return time.perf_counter() - start
        time.sleep(1.0)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--scale", type=int, metavar="N", help="the operator at N LLMSimulators (e.g. 1000), see above")
    ap.add_argument("--window", type=float, default=120.0, help="seconds of each at-rest window (--scale)")
    ap.add_argument("--install", metavar="IMAGE", help="(re)install the operator with this image first (--scale)")
    args = ap.parse_args()
    if args.install:
        install(args.install)
    if args.scale:
        out = args.out or ROOT / "bench" / "results" / f"operator_scale_{args.scale}.json"
        return scale_case(config.new_client_from_config(), args.scale, args.window, max(args.timeout, 900.0), out)
    args.out = args.out or ROOT / "bench" / "results" / "operator_fleet.json"

    api = config.new_client_from_config()
    server = client.VersionApi(api).get_code().git_version

    base_s = baseline(api, args.count)

    ns = namespace(api, "llmsim-bench-fleet")
    try:
        start = time.perf_counter()
        create(api, ns, ["single"])
        single_s = until_converged(api, ns, ["single"], start, args.timeout)
        names = [f"fleet-{i:03d}" for i in range(args.count)]
        start = time.perf_counter()
        create_s = create(api, ns, names)
        fleet_s = until_converged(api, ns, names, start, args.timeout)
    finally:
        client.CoreV1Api(api).delete_namespace(ns)

    result = {
        "bench": "operator_fleet",
        "count": args.count,
        "spec": SPEC,
        "server_version": server,
        "baseline_apply_s": round(base_s, 2),
        "single_converge_s": None if single_s is None else round(single_s, 2),
        "create_s": round(create_s, 2),
        "fleet_converge_s": None if fleet_s is None else round(fleet_s, 2),
        "fleet_over_baseline": None if fleet_s is None else round(fleet_s / base_s, 2),
        "goal_s": GOAL_S,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"Operator fleet on Kubernetes {server}: {args.count} LLMSimulators, 0 replicas each")
    print(f"  baseline: this process applies their {3 * args.count} children itself  {base_s:7.2f} s")
    print(f"  one LLMSimulator -> Deployment and status                          {single_s or float('nan'):7.2f} s")
    print(f"  creating the {args.count} LLMSimulators                                      {create_s:7.2f} s")
    if fleet_s is None:
        print(f"  fleet: NOT converged within {args.timeout:.0f} s")
        return 1
    verdict = "meets" if fleet_s <= GOAL_S else "misses"
    print(
        f"  fleet converged (every Deployment, every status)                  {fleet_s:7.2f} s  ({verdict} the {GOAL_S:.0f} s goal)"
    )
    print(f"  fleet / baseline                                                  {fleet_s / base_s:7.2f} x")
    print(f"wrote {args.out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
