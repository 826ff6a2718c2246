"""The LiteLLM recipe (recipes/litellm/config.yaml) against three real replicas following a fault timeline.

The same fleet as the Envoy recipe's test (recipes/envoy/models.yml: replica 1 answers 503 from 3 s to
8 s) behind a LiteLLM proxy (the ``gateway`` extra, in its own venv: hack/gateway-venv.sh), loaded at
10 requests a second for 14 s by ``llmsim verdict``'s run. Marked slow: the proxy takes about 50 s
to start on two shared cores, past make test's budget; ``make test-slow`` runs it where a litellm
executable is found (``LLMSIM_LITELLM``, else the one hack/gateway-venv.sh installed).

Bounds, from the recipe's router_settings (``num_retries: 2``, ``allowed_fails: 1``, ``cooldown_time: 3``):

- client error rate at most 1 %: a call that lands on the bad replica is tried again, and two
  replicas are healthy;
- cooled down within ``cooldown_time``: more than ``allowed_fails`` failures within a minute cool it
  down (``allowed_fails`` differs from litellm's default 3, so the router counts failures rather than
  a failure rate), and simple-shuffle sends it a third of ~10 attempts a second, so two reach it
  within a few tenths of a second (20 attempts all missing it: (2/3)^20 < 0.1 %). LiteLLM counts a
  failure and sets the cooldown in its failure callback, after the call, so attempts keep coming
  meanwhile: at most ``allowed_fails`` + 1 + a second's worth of the whole load (``RATE``) reach it
  first (6 in the run that set this bound);
- taken back (within ``cooldown_time`` + 2 s of the recovery, asserted by the e2e run only: make
  test asserts no wall-clock time): a cooldown lasts ``cooldown_time``,
  then a third of the attempts go to it again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from llmsim.benchmark.verdict import judge, render
from llmsim.benchmark.verdict_run import VerdictRun
from tests.support.litellm import MASTER_KEY, litellm_executable, recipe_config, running_litellm
from tests.support.replica_fleet import start_replicas
from tests.support.server import ServerProcess
from tests.support.verdict import run_verdict

pytestmark = pytest.mark.slow

RECIPES = Path(__file__).parents[2] / "recipes"
MODEL = "llama-3.1-8b"
RATE, DURATION = 10.0, 14.0
ERROR_BOUND = 0.01
# A silence this long is a cooldown: shorter than cooldown_time (3 s), and simple-shuffle at RATE
# leaves a replica in rotation silent that long with probability (2/3) ** (2 * RATE) < 0.1 %.
GAP = 2.0


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[str, list[ServerProcess], dict[str, Any]]]:
    litellm = litellm_executable()
    if litellm is None or not os.access(litellm, os.X_OK):
        pytest.skip("no litellm executable (hack/gateway-venv.sh installs one; or set LLMSIM_LITELLM)")
    with ExitStack() as stack:
        replicas = start_replicas(stack, tmp_path, (RECIPES / "envoy" / "models.yml").read_text(), 3)
        config = recipe_config([f"{replica.base_url}/v1" for replica in replicas])
        yield stack.enter_context(running_litellm(litellm, tmp_path, config)), replicas, config


def test_litellm_cools_the_bad_replica_down_hides_its_errors_and_takes_it_back(
    fleet: tuple[str, list[ServerProcess], dict[str, Any]],
) -> None:
    gateway, replicas, config = fleet
    settings = config["router_settings"]
    allowed_fails = int(settings["allowed_fails"])

    # Warmed up: LiteLLM's first answers take seconds (it sets up a client per deployment).
    run = VerdictRun(
        gateway, [r.base_url for r in replicas], MODEL, RATE, DURATION, api_key=MASTER_KEY, timeout=30, warmup=9
    )
    records, client = run_verdict(run)
    verdict = judge(records, client, DURATION, gap=GAP)
    report = render(verdict)
    print(report)

    assert verdict.sent == int(RATE * DURATION)
    assert verdict.error_rate <= ERROR_BOUND, report
    down = verdict.phases[1]
    bad = next(row for row in down.replicas if row.affected)
    assert (bad.replica, bad.faults) == ("replica-1", bad.received)
    (ejection,) = verdict.ejections
    assert ejection.ejected_after_s is not None, report
    # Counts and order only here (make test asserts no wall-clock time); the e2e run of this recipe also
    # bounds the seconds to ejection and back by the configured intervals.
    # LiteLLM cools a deployment down only after more than allowed_fails failures: a silence before
    # that many reached it would be chance, not the cooldown.
    assert allowed_fails + 1 <= ejection.requests_before_ejection <= allowed_fails + 1 + RATE, report
    assert ejection.returned_after_s is not None, report
