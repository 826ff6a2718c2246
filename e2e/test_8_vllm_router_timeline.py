"""The vllm-router recipe on the cluster: a fleet whose timeline fails one pod's health check, vllm-router in front.

Three replicas of an LLMSimulator whose ``spec.faults.timeline`` makes ordinal 1's ``/health``
answer 503 from 3 s to 9 s after the start while it keeps answering requests (recipes/vllm-router/
models.yml, in the CR's camelCase). vllm-router (the dev extra's binary) runs on this host with
the recipe's flags (recipes/vllm-router/router.args) and the pods as its workers (pod IPs, or
port-forwards where the host cannot route to them), in pod-name order; ``llmsim verdict``'s run
gives each pod its ordinal in the start call in that order, sends 10 requests a second for 14 s
through the router and reads the pods' records.

The bounds are the local test's (tests/integration/test_vllm_router_recipe.py), from the recipe's
health-check flags (interval I = 1 s, failure threshold F = 2, success threshold S = 1):

- no client errors: the pod is never broken, only reported unhealthy;
- out of rotation within I × F + 0.5 s of the phase's start (the F-th failing check, plus the
  check's round trip and the request routed while the flag flips), and no request after that for
  the rest of the phase: the router picks only healthy workers;
- back within I × S + 3 / RATE + 0.5 s of the recovery: the next check passes at most I later, and
  round robin reaches the pod within three requests.

The kubelet's readiness probe reads the same ``/health``: the pod is NotReady in that phase, which
the test does not mind (it reaches the pods at the addresses it listed before the start).
Time: the pods are Ready in ~20 s, the router in under a second, the run 14 s, then the fleet is
deleted and its pods waited out (so later tests have the CPU): 68 s on the local cluster.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.verdict import run_verdict
from tests.support.vllm_router import VLLM_ROUTER, flag, recipe_args, running_vllm_router

from e2e.cluster import Cluster, simulator_for_the_test
from e2e.gateway_fleet import DURATION, MODEL, fleet_pods, fleet_spec, judged
from llmsim.benchmark.verdict_run import VerdictRun

pytestmark = pytest.mark.e2e

NAME = "vllm-router-timeline"
RATE = 10.0
# Round robin over three pods at 10 requests a second: a request to each every 0.3 s, so a 1 s
# silence is more than three turns missed.
GAP = 1.0
SLACK = 0.5
SPEC = fleet_spec("replica-1-unhealthy", {"unhealthy": True}, recovered_at=9)


def test_vllm_router_in_front_of_a_fleet_stops_routing_to_the_unhealthy_pod_and_takes_it_back(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    if VLLM_ROUTER is None:
        pytest.fail("vllm-router is not installed (the dev extra provides it)")
    args = recipe_args()
    interval = float(flag(args, "--health-check-interval-secs"))
    failures = int(flag(args, "--health-failure-threshold"))
    successes = int(flag(args, "--health-success-threshold"))
    with simulator_for_the_test(cluster, namespace, NAME, SPEC):
        pods = fleet_pods(cluster, namespace, NAME)
        with running_vllm_router(tmp_path, [url for _, url in pods], args) as gateway:
            run = VerdictRun(gateway, [url for _, url in pods], MODEL, RATE, DURATION)
            records, client = run_verdict(run)
    verdict, report = judged(pods, records, client, GAP)

    assert verdict.sent == int(RATE * DURATION)
    assert verdict.errors == 0, report
    bad = next(row for row in verdict.phases[1].replicas if row.affected)
    assert (bad.replica, bad.faults) == (pods[1][0], 0)
    (ejection,) = verdict.ejections
    assert ejection.replica == pods[1][0]
    assert ejection.ejected_after_s is not None, report
    assert ejection.ejected_after_s <= interval * failures + SLACK, report
    assert bad.received == ejection.requests_before_ejection, report
    assert ejection.recovery_phase == "recovered"
    assert ejection.returned_after_s is not None, report
    assert ejection.returned_after_s <= interval * successes + 3 / RATE + SLACK, report
