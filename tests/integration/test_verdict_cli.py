"""``llmsim verdict`` as users run it: two real replicas, JSON on stdout, a PNG written.

With no gateway to test, the "gateway" is replica 0 itself: every request goes there, so replica 1,
bad from 3 s to 8 s (recipes/envoy/models.yml), receives nothing, which the verdict must report as
an ejection at 0 s after 0 requests and no return. The numbers checked follow from that routing
alone, not from timing: 2.5 requests a second for 4 s sent (at 0, 0.4, ... 3.6 s: none within 0.2 s of
the phase boundary at 3 s, far more than the start calls' spread that separates the client's time 0
from a replica's), all answered by replica 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.replica_fleet import start_replicas

RECIPE = Path(__file__).parents[2] / "recipes" / "envoy" / "models.yml"


def test_the_verdict_of_a_run_that_never_reached_the_bad_replica(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    with ExitStack() as stack:
        r0, r1 = start_replicas(stack, tmp_path, RECIPE.read_text(), 2)
        done = subprocess.run(
            [sys.executable, "-m", "llmsim.cli", "verdict", "--gateway", r0.base_url, "--replica", r0.base_url,
             "--replica", r1.base_url, "--model", "llama-3.1-8b", "--rate", "2.5", "--duration", "4",
             "--json", "--plot", str(tmp_path / "v.png")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert (verdict["sent"], verdict["errors"]) == (10, 0)
    # The run's 4 s end before the fault's phase (3 s) ends: base and replica-1-down, recovered left out.
    assert [p["name"] for p in verdict["phases"]] == ["base", "replica-1-down"]
    assert [[row["received"] for row in p["replicas"]] for p in verdict["phases"]] == [[8, 0], [2, 0]]
    assert [row["answered"]["n"] for row in verdict["phases"][0]["replicas"]] == [8, 0]
    (ejection,) = verdict["ejections"]
    assert ejection["replica"] == "replica-1"
    assert (ejection["ejected_after_s"], ejection["requests_before_ejection"]) == (0.0, 0)
    assert (ejection["recovery_phase"], ejection["returned_after_s"]) == (None, None)
    assert (tmp_path / "v.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_arguments_are_refused_before_anything_is_sent() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llmsim.cli", "verdict", "--gateway", "http://127.0.0.1:1", "--replica",
         "http://127.0.0.1:1", "--model", "m", "--rate", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--rate, --duration and --gap must be > 0" in done.stderr


def test_an_unreachable_replica_is_one_line_and_status_1() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llmsim.cli", "verdict", "--gateway", "http://127.0.0.1:1", "--replica",
         "http://127.0.0.1:1", "--model", "m", "--duration", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("llmsim verdict: ")
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_cli_loads_without_the_benchmark_client() -> None:
    # The server's image has no aiohttp: `llmsim serve` goes through llmsim.cli, which must not load
    # the benchmark client (llmsim bench and llmsim verdict import it when they run).
    code = (
        "import sys; sys.modules['aiohttp'] = None; import llmsim.cli; "
        "assert not any(m.startswith('llmsim.benchmark') for m in sys.modules), sorted(sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
