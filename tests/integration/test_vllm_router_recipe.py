"""The vllm-router recipe (recipes/vllm-router/) against three real replicas whose health check fails on a timeline.

Three ``llmsim serve`` processes serve recipes/vllm-router/models.yml: replica 1's ``/health``
answers 503 from 3 s to 9 s after the start (``set: {unhealthy: true}``) while it keeps answering
requests. vllm-router 0.1.17 (the dev extra's binary) runs with the recipe's flags
(router.args) in front of them; ``llmsim verdict``'s run sends 10 requests a second for 14 s
through it and reads the replicas' records. vllm-router's background health checker GETs each
worker's /health every ``--health-check-interval-secs`` (I = 1 s) and marks a worker unhealthy after
``--health-failure-threshold`` (F = 2) failures in a row, healthy again after
``--health-success-threshold`` (S = 1) successes in a row; round robin picks only among available
(healthy) workers. The bounds, from those flags:

- no client errors: the replica is never broken, only reported unhealthy, so nothing fails;
- out of rotation within I × F + 0.5 s of the phase's start: the first failing check comes at most
  I after the start, the F-th one (F - 1) × I later; the 0.5 s covers the check's own round trip
  and the request already routed when the flag flips. "Out" is a silence of ``GAP``: round robin
  over three workers at 10 requests a second sends each one a request every 0.3 s, so a silence
  of 1 s is more than three turns missed;
- no request at all after that, for the rest of the phase: the router never picks an unhealthy
  worker (not even a probe, unlike Envoy's outlier detection);
- at most (I × F + 0.5) × RATE / 3 + 1 requests before it: its third of the load until then;
- back within I × S + 3 / RATE + 0.5 s of the recovery: the next check passes at most I after it,
  S passes bring it back, and round robin reaches it within three requests.

The run is 14 s, so the recovery (9 s) plus that bound fits in it; the test takes about 20 s. The
seconds to ejection and back are asserted in the e2e run of the recipe
(e2e/test_8_vllm_router_timeline.py); make test asserts no wall-clock time, so here the bounds are
counts and order.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from llmsim.benchmark.verdict import judge, render
from llmsim.benchmark.verdict_run import VerdictRun
from tests.support.replica_fleet import start_replicas
from tests.support.server import ServerProcess
from tests.support.verdict import run_verdict
from tests.support.vllm_router import RECIPE, VLLM_ROUTER, flag, recipe_args, running_vllm_router

pytestmark = pytest.mark.skipif(VLLM_ROUTER is None, reason="vllm-router is not installed (dev extra)")

MODEL = "llama-3.1-8b"
RATE, DURATION = 10.0, 14.0
GAP = 1.0
# The health check's round trip and the request routed while the flag flips (see above).
SLACK = 0.5


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[str, list[ServerProcess]]]:
    with ExitStack() as stack:
        replicas = start_replicas(stack, tmp_path, (RECIPE / "models.yml").read_text(), 3)
        workers = [r.base_url for r in replicas]
        yield stack.enter_context(running_vllm_router(tmp_path, workers, recipe_args())), replicas


def test_vllm_router_stops_routing_to_the_unhealthy_replica_and_takes_it_back(
    fleet: tuple[str, list[ServerProcess]],
) -> None:
    gateway, replicas = fleet
    args = recipe_args()
    interval = float(flag(args, "--health-check-interval-secs"))
    failures = int(flag(args, "--health-failure-threshold"))
    assert flag(args, "--policy") == "round_robin"

    run = VerdictRun(gateway, [r.base_url for r in replicas], MODEL, RATE, DURATION)
    records, client = run_verdict(run)
    verdict = judge(records, client, DURATION, gap=GAP)
    report = render(verdict)
    print(report)

    assert [p.name for p in verdict.phases] == ["base", "replica-1-unhealthy", "recovered"]
    assert verdict.sent == int(RATE * DURATION)
    assert verdict.errors == 0, report
    unhealthy = verdict.phases[1]
    bad = next(row for row in unhealthy.replicas if row.affected)
    assert (bad.replica, bad.faults) == ("replica-1", 0)

    (ejection,) = verdict.ejections
    assert ejection.replica == "replica-1"
    assert ejection.ejected_after_s is not None, report
    # Counts and order only here (make test asserts no wall-clock time); the e2e run of this recipe also
    # bounds the seconds to ejection and back by the configured intervals.
    assert ejection.requests_before_ejection <= (interval * failures + SLACK) * RATE / 3 + 1, report
    assert bad.received == ejection.requests_before_ejection, report
    assert ejection.recovery_phase == "recovered"
    assert ejection.returned_after_s is not None, report
