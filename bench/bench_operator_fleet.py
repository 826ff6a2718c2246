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
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import uuid
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "operator_fleet.json")
    args = ap.parse_args()

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
