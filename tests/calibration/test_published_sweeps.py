"""Every published vLLM sweep, replayed through ``llmsim plan`` with nothing but the model profile, the GPU and
the server's flags: the built-in timing (llmsim/data/calibrated_timing.yml) must reproduce TPOT/ITL p50 within
10 % and TTFT p50 within 20 % at every point, except those listed in OUTSIDE with the reason each is off.

No published point is queue-bound: each is a closed loop of at most 64 clients on a server that runs 64 or
more sequences at once, and the replays preempt nothing (checked below). The sweeps, their sources and caveats
are in tests/calibration/data (sweeps.yml and each CSV's header).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmsim.calibration import Measurement, load_measurements
from llmsim.cli import main
from llmsim.config import load_models_config
from llmsim.fleet import FleetRequest, FleetSpec, FleetWorkload, Prompt, ReplicaGroup, RouterSpec, simulate_fleet
from llmsim.runtime import scheduler_params

DATA = Path(__file__).parent / "data"
INDEX = yaml.safe_load((DATA / "sweeps.yml").read_text())
SWEEPS = {s["id"]: s for s in INDEX["sweeps"]}
BOUNDS = {"ttft": 0.20, "itl": 0.10, "tpot": 0.10}

OUT_OF_STEP = (
    "clients out of step: outputs end on EOS and the harness's clients drift apart, so a request reaches a "
    "running batch and waits for the step in flight (and, with async scheduling, one more) before its prefill; "
    "llmsim's replay sends each wave together to an idle engine. Checked: the published TTFT lies between that "
    "replay and one with the clients spread evenly over a request's duration, or within 20 % of the latter"
)
CLIENT_BOUND = "client-bound: LiteLLM in one Python thread per client (throughput falls from c=16 to c=64)"
CLIENT_INFLATED = "client-inflated: a batch of 16 adds 0.5 ms to a 6.5 ms H100 step, the sweep shows 4.4 ms"
SHARED_PROMPTS = (
    "10 distinct long prompts: vLLM serves their prefills from its prefix cache, llmsim's closed-loop replay "
    "sends distinct prompts (no prefix to share), whose 2,000-token prefills stall the decodes and, at c=64, "
    "outgrow the L4's KV cache (preemptions)"
)
CACHE_HITS = "TTFT of a 2,000-token prompt served from vLLM's prefix cache (10 distinct prompts)"

# (sweep, row of the CSV from 1, metric) -> why the point is outside its bound.
OUTSIDE: dict[tuple[str, int, str], str] = {
    ("A1", 2, "ttft"): OUT_OF_STEP,
    ("A1", 3, "ttft"): OUT_OF_STEP,
    ("A1", 4, "ttft"): CLIENT_INFLATED,
    ("A1", 4, "tpot"): CLIENT_INFLATED,
    ("A1", 5, "tpot"): CLIENT_BOUND,
    ("A1b-qwen", 1, "ttft"): OUT_OF_STEP,
    ("A1b-mistral", 1, "ttft"): OUT_OF_STEP,
    ("A5", 2, "ttft"): OUT_OF_STEP,
    ("A5", 6, "ttft"): CACHE_HITS,
    ("A5", 7, "ttft"): SHARED_PROMPTS,
    ("A5", 7, "tpot"): SHARED_PROMPTS,
    ("A5", 8, "ttft"): SHARED_PROMPTS,
    ("A5", 8, "tpot"): SHARED_PROMPTS,
}


@dataclass(frozen=True, slots=True)
class Replay:
    """One published point and llmsim's p50s for it (seconds)."""

    sweep: str
    row: int
    point: Measurement
    predicted: dict[str, float]
    num_preemptions: int

    def error(self, metric: str) -> float | None:
        measured = self.point.measured(metric)
        return None if measured is None else (self.predicted[metric] - measured) / measured


def models_yaml(sweep: dict[str, Any]) -> str:
    """The measured server as a models.yml: profile, GPU and the run's flags, no timing knob."""
    entry = {"name": sweep["id"], "engine": "scheduler", "profile": sweep["profile"], "hardware": sweep["hardware"]}
    return yaml.safe_dump({"models": [{**entry, **sweep.get("server", {})}]}, sort_keys=False)


@cache
def replays(sweep_id: str, tmp: Path) -> list[Replay]:
    sweep = SWEEPS[sweep_id]
    config = tmp / f"{sweep_id}.yml"
    config.write_text(models_yaml(sweep))
    out = []
    for row, point in enumerate(load_measurements(DATA / sweep["data"]), start=1):
        assert point.concurrency is not None, "every published point is a closed loop"
        assert point.rate is None, "every published point is a closed loop"
        report = tmp / f"{sweep_id}-{row}.json"
        args = ["plan", "--config", str(config), "--model", sweep_id, "--concurrency", str(point.concurrency)]
        args += ["--num-requests", str(point.num_requests), "--prompt-tokens", str(round(point.prompt_tokens))]
        args += ["--output-tokens", str(round(point.output_tokens)), "--json", str(report)]
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(args) == 0
        summary = json.loads(report.read_text())["summary"]
        predicted = {m: summary[m]["p50"] for m in BOUNDS}
        out.append(Replay(sweep_id, row, point, predicted, summary["num_preemptions"]))
    return out


@pytest.fixture(scope="module")
def replay_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("published")


def format_table(rows: list[Replay]) -> str:
    lines = [f"{'sweep':<12}{'row':>4}{'load':>7}{'prompt':>8}{'out':>5}  metric  published    llmsim    error"]
    for r in rows:
        for metric in BOUNDS:
            error = r.error(metric)
            if error is None:
                continue
            measured = r.point.measured(metric)
            assert measured is not None
            mark = "  (outside: documented)" if (r.sweep, r.row, metric) in OUTSIDE else ""
            lines.append(
                f"{r.sweep:<12}{r.row:>4}{r.point.load:>7}{r.point.prompt_tokens:>8.0f}{r.point.output_tokens:>5.0f}"
                f"  {metric.upper():<6}{measured * 1e3:>10.2f}{r.predicted[metric] * 1e3:>10.2f}{error:>+9.1%}{mark}"
            )
    return "\n".join(lines)


@pytest.mark.parametrize("sweep_id", list(SWEEPS))
def test_a_profile_alone_times_like_the_published_run(sweep_id: str, replay_dir: Path) -> None:
    rows = replays(sweep_id, replay_dir)
    print("\n" + format_table(rows))
    for r in rows:
        if (sweep_id, r.row, "tpot") not in OUTSIDE:
            assert r.num_preemptions == 0, "a published point is not queue-bound: its replay must not preempt"
        for metric, bound in BOUNDS.items():
            error = r.error(metric)
            if error is None:
                continue
            where = f"{sweep_id} row {r.row} ({r.point.load}) {metric.upper()}: {error:+.1%}"
            if (sweep_id, r.row, metric) in OUTSIDE:
                # The documentation stays true: a point that comes back within bounds leaves the list.
                assert abs(error) > bound, f"{where} is within {bound:.0%} now: drop it from OUTSIDE"
            else:
                assert abs(error) <= bound, f"{where} is outside {bound:.0%}"


def test_every_documented_point_exists() -> None:
    for sweep_id, row, metric in OUTSIDE:
        points = load_measurements(DATA / SWEEPS[sweep_id]["data"])
        assert points[row - 1].measured(metric) is not None, (sweep_id, row, metric)


def staggered_clients(point: Measurement, offset: float) -> FleetWorkload:
    """The point's closed loop with client k starting at k x offset (each then sends back to back)."""
    assert point.concurrency is not None
    c = point.concurrency
    requests = []
    for i in range(point.num_requests):
        prompt = Prompt.unique(f"request:{i}", round(point.prompt_tokens))
        first = i < c
        arrival = i * offset if first else 0.0
        requests.append(FleetRequest(prompt, round(point.output_tokens), arrival, None if first else i - c))
    return FleetWorkload(tuple(requests))


@pytest.mark.parametrize("key", [k for k, why in OUTSIDE.items() if why is OUT_OF_STEP], ids=str)
def test_out_of_step_clients_explain_the_documented_ttfts(key: tuple[str, int, str], tmp_path: Path) -> None:
    sweep_id, row, _ = key
    sweep = SWEEPS[sweep_id]
    (tmp_path / "m.yml").write_text(models_yaml(sweep))
    params = scheduler_params(load_models_config(tmp_path / "m.yml"), sweep_id, str(tmp_path / "m.yml"))
    point = load_measurements(DATA / sweep["data"])[row - 1]
    assert point.concurrency is not None
    assert point.ttft_p50 is not None
    assert point.tpot_p50 is not None
    # Spread the clients evenly over one published request's duration.
    cycle = point.ttft_p50 + (point.output_tokens - 1) * point.tpot_p50
    fleet = FleetSpec((ReplicaGroup("replica", sweep_id, params, 1),), RouterSpec("round-robin", 0.0))
    spread = simulate_fleet(fleet, staggered_clients(point, cycle / point.concurrency)).summary().latencies.ttft.p50
    in_step = simulate_fleet(fleet, staggered_clients(point, 0.0)).summary().latencies.ttft.p50
    print(
        f"{key}: in step {in_step * 1e3:.2f} ms, published {point.ttft_p50 * 1e3:.2f} ms, spread {spread * 1e3:.2f} ms"
    )
    # Clients anywhere between in step and evenly spread: the published TTFT lies between the two
    # replays, or within the TTFT bound of the spread one.
    assert in_step < point.ttft_p50
    assert point.ttft_p50 <= spread or abs(spread - point.ttft_p50) / point.ttft_p50 <= BOUNDS["ttft"]


def test_the_shipped_table_is_what_llmsim_calibrate_fits() -> None:
    # Refit two sweeps with `llmsim calibrate` as hack/calibrate_profiles.py does (the others take
    # minutes): the shipped knobs are the fit's, rounded, not edited by hand.
    script = Path(__file__).parents[2] / "hack" / "calibrate_profiles.py"
    args = [sys.executable, str(script), "--check", "--only", "A1", "--only", "A1b-mistral"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "the table matches the fit" in done.stdout


def plan_summary(config: Path, model: str, concurrency: int, prompt: int, output: int, out: Path) -> dict[str, Any]:
    args = ["plan", "--config", str(config), "--model", model, "--concurrency", str(concurrency)]
    args += ["--num-requests", str(20 * concurrency), "--prompt-tokens", str(prompt), "--output-tokens", str(output)]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*args, "--json", str(out)]) == 0
    summary: dict[str, Any] = json.loads(out.read_text())["summary"]
    return summary


def test_the_a100_sweeps_headline_gain_at_eight_streams(tmp_path: Path) -> None:
    # A2's other published claim (its CSV's header): "a 6.6x gain [in throughput at C=8] with almost no
    # latency cost", `vllm bench serve` 1,024 -> 128 with --num-prompts 20 x C. llmsim, with the profile
    # alone: ITL p50 at C=8 within the 10 % bound of C=1's ("almost no latency cost"), and the gain 5.85x,
    # 11 % short of 6.6x. Documented rather than fitted: every new request's 1,024-token prefill is a
    # compute-bound chunk in the other seven's decode steps, timed at the compute efficiency borrowed
    # from A4 (no A2 point pins it; even 1.0 gives 6.39x), and the post does not say whether its gain
    # is over C=1's output throughput (TTFT included) or its 75 tok/s decode rate. Bound: 15 %.
    sweep = SWEEPS["A2"]
    config = tmp_path / "A2.yml"
    config.write_text(models_yaml(sweep))
    one = plan_summary(config, "A2", 1, 1024, 128, tmp_path / "c1.json")
    eight = plan_summary(config, "A2", 8, 1024, 128, tmp_path / "c8.json")
    gain = eight["output_tokens_per_s"] / one["output_tokens_per_s"]
    itl_cost = eight["itl"]["p50"] / one["itl"]["p50"] - 1
    print(f"A2: throughput gain at C=8 {gain:.2f}x (published 6.6x), ITL p50 {itl_cost:+.1%}")
    assert eight["num_preemptions"] == 0
    assert abs(itl_cost) <= BOUNDS["itl"]
    assert abs(gain - 6.6) / 6.6 <= 0.15
