"""``llmsim verdict``: what a gateway did while its replicas followed a fault timeline (docs/gateways.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

# NOTE: the benchmark package (aiohttp, the client) is imported inside run(): `llmsim serve` goes
# through this CLI too and must not load the client (the server's image has no aiohttp).

#: A bad replica silent this long is taken as ejected (--gap's default).
DEFAULT_GAP_S = 1.0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "verdict", help="start the replicas' fault timelines, load a gateway, and report what it did"
    )
    p.add_argument("--gateway", required=True, help="the gateway's base URL (requests go to /v1/chat/completions)")
    p.add_argument(
        "--replica",
        action="append",
        default=[],
        help="a replica's base URL, in ordinal order (repeat for each; its ordinal is its place in the list)",
    )
    p.add_argument(
        "--pods",
        metavar="NAMESPACE/SELECTOR",
        help="the replicas are these Ready pods (kubectl get pods -n NAMESPACE -l SELECTOR), in name order, "
        "at their pod IPs: from a host that routes to pod IPs (e.g. NAMESPACE/app.kubernetes.io/instance=NAME)",
    )
    p.add_argument("--pod-port", type=int, default=8000, help="the pods' port with --pods (default 8000)")
    p.add_argument("--model", required=True, help="the model to ask for")
    p.add_argument("--rate", type=float, default=20.0, help="requests per second (open loop; default 20)")
    p.add_argument(
        "--duration", type=float, default=30.0, help="seconds of load from the timeline's start (default 30)"
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="requests sent one by one through the gateway before the start, not judged (default 0)",
    )
    p.add_argument("--max-tokens", type=int, default=8, help="max_tokens of each request (default 8)")
    p.add_argument("--timeout", type=float, default=10.0, help="a request's timeout in seconds (default 10)")
    p.add_argument(
        "--gap",
        type=float,
        default=DEFAULT_GAP_S,
        help="a bad replica silent this long is taken as ejected (seconds; default 1)",
    )
    p.add_argument(
        "--no-start",
        dest="start",
        action="store_false",
        help="do not start the timelines (someone else did: phases are then read on each replica's own time)",
    )
    p.add_argument("--admin-key", default=os.environ.get("LLMSIM_ADMIN_KEY"), help="env LLMSIM_ADMIN_KEY")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="the gateway's key (env OPENAI_API_KEY)")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--plot", type=Path, help="write requests per replica over time, phases shaded, to this PNG")
    p.set_defaults(func=run)


def pod_urls(namespace: str, selector: str, port: int) -> list[str]:
    """Base URLs of the Ready, not terminating pods ``kubectl`` lists, in pod-name order (their ordinals).

    Raises RuntimeError when kubectl fails or its answer is not a pod list.
    """
    try:
        done = subprocess.run(
            ["kubectl", "get", "pods", "-n", namespace, "-l", selector, "-o", "json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"kubectl: {exc}") from None
    if done.returncode != 0:
        raise RuntimeError(f"kubectl get pods: {done.stderr.strip()}")
    try:
        items = json.loads(done.stdout)["items"]
    except (ValueError, KeyError, TypeError):
        raise RuntimeError("kubectl get pods: not a pod list") from None
    ready = []
    for pod in items:
        conditions = pod.get("status", {}).get("conditions") or []
        is_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        ip = pod.get("status", {}).get("podIP")
        if is_ready and ip and not pod["metadata"].get("deletionTimestamp"):
            host = f"[{ip}]" if ":" in ip else ip
            ready.append((pod["metadata"]["name"], f"http://{host}:{port}"))
    return [url for _, url in sorted(ready)]


def run(args: argparse.Namespace) -> int:
    if args.pods:
        namespace, _, selector = args.pods.partition("/")
        if not namespace or not selector:
            print("llmsim verdict: --pods takes NAMESPACE/SELECTOR", file=sys.stderr)
            return 2
        try:
            args.replica = [*args.replica, *pod_urls(namespace, selector, args.pod_port)]
        except RuntimeError as exc:
            print(f"llmsim verdict: {exc}", file=sys.stderr)
            return 1
    if not args.replica:
        print(
            "llmsim verdict: no replicas: give --replica URL (repeated) or --pods NAMESPACE/SELECTOR", file=sys.stderr
        )
        return 2
    from llmsim.benchmark.verdict import judge, render
    from llmsim.benchmark.verdict_run import VerdictRun, verdict_run

    if args.rate <= 0 or args.duration <= 0 or args.gap <= 0 or args.warmup < 0:
        print("llmsim verdict: --rate, --duration and --gap must be > 0, --warmup >= 0", file=sys.stderr)
        return 2
    spec = VerdictRun(
        gateway=args.gateway,
        replicas=args.replica,
        model=args.model,
        rate=args.rate,
        duration=args.duration,
        admin_key=args.admin_key,
        api_key=args.api_key,
        max_tokens=args.max_tokens,
        timeout=args.timeout,
        start=args.start,
        warmup=args.warmup,
    )
    try:
        replicas, client = asyncio.run(verdict_run(spec))
    except (OSError, RuntimeError) as exc:
        print(f"llmsim verdict: {exc}", file=sys.stderr)
        return 1
    verdict = judge(replicas, client, args.duration, args.gap)
    print(json.dumps(verdict.to_json(), indent=2) if args.json else render(verdict))
    if args.plot is not None:
        from llmsim.benchmark.verdict_plot import plot_verdict

        plot_verdict(verdict, replicas, client, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    return 0
