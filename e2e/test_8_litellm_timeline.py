"""The LiteLLM recipe on the cluster: a fleet with a fault timeline in its LLMSimulator, LiteLLM in front.

Three replicas of an LLMSimulator whose ``spec.faults.timeline`` makes ordinal 1 answer 503 from 3 s
to 8 s after the start (recipes/envoy/models.yml's timeline, in the CR's camelCase: the fleet of
e2e/test_8_envoy_timeline.py). A second LiteLLM proxy, not e2e/test_3_gateway.py's (that one has
``num_retries: 0`` and other tests count on it), runs on this host with recipes/litellm/config.yaml,
its three deployments the pods (pod IPs, or port-forwards where the host cannot route to them), in
pod-name order; ``llmsim verdict``'s run gives each pod its ordinal in the start call in that same
order, sends 10 requests a second for 14 s through the proxy and reads the pods' records.

The bounds are the local test's (tests/integration/test_litellm_recipe.py), from the recipe's
router_settings (``num_retries: 2``, ``allowed_fails: 1``, ``cooldown_time: 3``):

- client error rate at most 1 %: an attempt that lands on the bad pod is retried on another, and
  two pods are healthy;
- cooled down within ``cooldown_time``: more than ``allowed_fails`` failures cool the pod down, and
  simple-shuffle sends it a third of ~10 attempts a second, so two reach it within a few tenths of
  a second; the failure callback sets the cooldown after the call, so at most ``allowed_fails`` + 1
  + a second's worth of the load (``RATE``) reach it first;
- taken back within ``cooldown_time`` + 2 s of the recovery: the cooldown lasts ``cooldown_time``,
  then a third of the attempts go to it again (0.3 s apart on average).

Time: the pods are Ready in ~20 s, the proxy starts in ~50 s (one start, after the pods, since its
config names them), the warm-up (9 requests one after another: LiteLLM's first answers set up a
client per deployment) takes a few seconds and the run 14 s plus its last answers: about 1.5 min.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.support.litellm import MASTER_KEY, litellm_executable, recipe_config, running_litellm
from tests.support.verdict import run_verdict

from e2e.cluster import Cluster, simulator_for_the_test
from e2e.gateway_fleet import DURATION, MODEL, fleet_pods, fleet_spec, judged
from llmsim.benchmark.verdict_run import VerdictRun

pytestmark = pytest.mark.e2e

NAME = "litellm-timeline"
RATE = 10.0
ERROR_BOUND = 0.01
# A silence this long is a cooldown: shorter than cooldown_time (3 s), and simple-shuffle at RATE
# leaves a replica in rotation silent that long with probability (2/3) ** (2 * RATE) < 0.1 %.
GAP = 2.0
SPEC = fleet_spec("replica-1-down", {"rates": {"unavailable": 1}}, recovered_at=8)


def test_litellm_in_front_of_a_fleet_cools_the_bad_pod_down_and_takes_it_back(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    litellm = litellm_executable()
    if litellm is None or not os.access(litellm, os.X_OK):
        pytest.fail("E2E_LITELLM must name a litellm executable (e2e/run.sh sets it from hack/gateway-venv.sh)")
    with simulator_for_the_test(cluster, namespace, NAME, SPEC):
        pods = fleet_pods(cluster, namespace, NAME)
        config = recipe_config([f"{url}/v1" for _, url in pods])
        settings = config["router_settings"]
        cooldown = float(settings["cooldown_time"])
        allowed_fails = int(settings["allowed_fails"])
        with running_litellm(litellm, tmp_path, config) as gateway:
            run = VerdictRun(
                gateway, [url for _, url in pods], MODEL, RATE, DURATION, api_key=MASTER_KEY, timeout=30, warmup=9
            )
            records, client = run_verdict(run)
    verdict, report = judged(pods, records, client, GAP)

    assert verdict.sent == int(RATE * DURATION)
    assert verdict.error_rate <= ERROR_BOUND, report
    bad = next(row for row in verdict.phases[1].replicas if row.affected)
    # The bad pod failed every request it got in its phase (its own record).
    assert (bad.replica, bad.faults) == (pods[1][0], bad.received)
    (ejection,) = verdict.ejections
    assert ejection.replica == pods[1][0]
    assert ejection.ejected_after_s is not None, report
    assert ejection.ejected_after_s <= cooldown, report
    # LiteLLM cools a deployment down only after more than allowed_fails failures: a silence before
    # that many reached it would be chance, not the cooldown.
    assert allowed_fails + 1 <= ejection.requests_before_ejection <= allowed_fails + 1 + RATE, report
    assert ejection.recovery_phase == "recovered"
    assert ejection.returned_after_s is not None, report
    assert ejection.returned_after_s <= cooldown + 2.0, report
