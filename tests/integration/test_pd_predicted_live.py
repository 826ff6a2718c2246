"""Predicted against measured for a disaggregated fleet behind the real vllm-router.

Two prefill and two decode llmsim processes (scheduler engine), ``vllm-router
--vllm-pd-disaggregation`` in front with round-robin picks, a seeded open loop of token-id prompts
sent through the router by an httpx client. The same requests, at the arrival times the client
actually sent them (written as a trace file, as ``llmsim plan --workload`` reads it), then go through
the planner's P/D fleet (``llmsim plan``'s core) with the same models and the same policy.

What is compared is the servers' own simulated timeline, never wall-clock time: each replica's
``/metrics/summary`` (TTFT from the request's arrival at that replica, ITL between its tokens)
against the planner's figures for the same leg:

- the prefill leg's TTFT on the prefill replica (its one token: queueing and the prefill step);
- the decode leg's TTFT on the decode replica, from the decode leg's own arrival (the pull, the
  wait for a step, the recompute of the last prompt token);
- ITL on the decode replica.

The router's hand-off between the legs (the prefill leg's last token to the decode leg's arrival)
varies from request to request by a few ms, and a decode leg that now becomes ready just after a
step started waits a whole step more: so each request's hand-off, measured, goes into the trace
(its ``handoff_ms``), as the arrivals do. Each decode server's fault timeline, which never faults,
records each request's arrival, started on this process's monotonic clock (the servers' clock
too): the k-th decode leg to reach the decode servers is the k-th the plan hands off (the router
sends them in the order the prefill answers come in, as the planner does), and its hand-off is
its measured arrival less the planned end of its prefill leg (the prefill legs are planned within
a fraction of a millisecond, and do not depend on the hand-offs).

The model is the reference GPU at a sixteenth of its speed (from the predict-then-measure
experiments, :mod:`llmsim.benchmark.experiments`): a decode step lasts ~75 ms and a 512-token
prefill ~112 ms, so the milliseconds of HTTP, router and event-loop jitter on a loaded 2-core
machine stay small against a step.

Bounds: the goal's 5 % on each replica's TTFT p50 and ITL p50, and on the decode legs' mean TTFT
over the fleet (exact, from the TTFT histograms' sums and counts). docs/pd.md has the figures.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from llmsim.cli import main
from llmsim.config import load_models_config
from llmsim.fleet import FleetSpec, load_fleet, load_trace, poisson_arrivals
from llmsim.fleet.simulation import FleetSimulation
from tests.metrics.scrape import parse
from tests.support.server import ServerProcess, free_port, running_server, stop_process
from tests.support.vllm_router import router_binary

pytestmark = pytest.mark.integration

#: Largest relative difference between a predicted and a measured p50 (the goal's bound).
BOUND = 0.05
RATE = 4.0
REQUESTS = 48
PROMPT = 512
OUTPUT = 16
SEED = 3

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples" / "fleet"
#: The planner's files; the servers serve their models (see served_config).
MODELS_FILE = EXAMPLES / "pd-live-models.yml"
FLEET_FILE = EXAMPLES / "pd-live-fleet.yml"
PREFILL, DECODE = 2, 2


def served_config(role: str) -> str:
    """One server's models.yml: the example's model of that role, named "m", with a side channel of its own."""
    planned = yaml.safe_load(MODELS_FILE.read_text())
    (model,) = [m for m in planned["models"] if m["kv_transfer"]["kv_role"] == role]
    model["name"] = "m"
    model["kv_transfer"]["side_channel_port"] = free_port()
    # A fault timeline that never faults: its record of each request's arrival times the hand-off.
    model["faults"] = {"timeline": {"start": "admin", "phases": [{"name": "never", "at": 3600, "clear": True}]}}
    return json.dumps({"version": 1, "hardware": planned["hardware"], "models": [model]})


@dataclass
class Fleet:
    prefill: list[ServerProcess]
    decode: list[ServerProcess]
    router_url: str


def start_router(stack: ExitStack, root: Path, prefill: list[str], decode: list[str], policy: str) -> str:
    """vllm-router in P/D mode in front of ``prefill`` and ``decode``; its URL once healthy."""
    port = free_port()
    args = [router_binary("vllm-router"), "--host", "127.0.0.1", "--port", str(port), "--vllm-pd-disaggregation"]
    for url in prefill:
        args += ["--prefill", url]
    for url in decode:
        args += ["--decode", url]
    args += ["--prefill-policy", policy, "--decode-policy", policy, "--log-level", "warning"]
    args += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    log = (root / "router.log").open("wb")
    stack.callback(log.close)
    router = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    stack.callback(stop_process, router)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert router.poll() is None, (root / "router.log").read_text()
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return url
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "vllm-router not healthy after 30 s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("pd-predicted")
    with ExitStack() as stack:

        def start(role: str, name: str) -> ServerProcess:
            where = root / name
            where.mkdir()
            return stack.enter_context(running_server(where, config=served_config(role)))

        prefill = [start("kv_producer", f"p{j}") for j in range(PREFILL)]
        decode = [start("kv_consumer", f"d{j}") for j in range(DECODE)]
        url = start_router(stack, root, [s.base_url for s in prefill], [s.base_url for s in decode], "round_robin")
        yield Fleet(prefill, decode, url)


def prompt_ids(i: int) -> list[int]:
    # Distinct first tokens; ids well inside any vocabulary.
    return [1000 + i] + [(7 * k + 13 * i) % 30000 + 100 for k in range(1, PROMPT)]


async def send_all(url: str, arrivals: list[float]) -> tuple[float, list[float], list[float]]:
    """Send request ``i`` at ``arrivals[i]`` (streamed completions): when the client started (this
    process's monotonic clock), the offsets from it they were actually sent at, and the client's
    TTFTs (wall clock: printed for docs/pd.md, never asserted)."""
    sent = [0.0] * len(arrivals)
    ttft = [0.0] * len(arrivals)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=64)) as client:
        start = time.monotonic()

        async def one(i: int) -> None:
            await asyncio.sleep(max(0.0, arrivals[i] - (time.monotonic() - start)))
            body: dict[str, Any] = {
                "model": "m",
                "prompt": prompt_ids(i),
                "max_tokens": OUTPUT,
                "ignore_eos": True,
                "stream": True,
            }
            sent[i] = time.monotonic() - start
            async with client.stream("POST", "/v1/completions", json=body) as response:
                assert response.status_code == 200, await response.aread()
                async for line in response.aiter_lines():
                    if line.startswith("data: {") and not ttft[i]:
                        ttft[i] = time.monotonic() - start - sent[i]

        await asyncio.gather(*(one(i) for i in range(len(arrivals))))
    return start, sent, ttft


def lower_median(values: list[float]) -> float:
    # The rank /metrics/summary reports: floor(q x (count - 1)).
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def summary(server: ServerProcess) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(server.base_url + "/metrics/summary", timeout=5).json()
    model: dict[str, Any] = body["models"]["m"]
    return model


def decode_ttft_sum_count(server: ServerProcess) -> tuple[float, float]:
    """The TTFT histogram's sum and count (Prometheus counters: read before and after a run)."""
    page = parse(httpx.get(server.base_url + "/metrics", timeout=5).text)
    labels = {"model_name": "m", "engine": "0"}
    return (
        page.get("vllm:time_to_first_token_seconds_sum", **labels),
        page.get("vllm:time_to_first_token_seconds_count", **labels),
    )


def timeline_origin(server: ServerProcess, samples: int = 9) -> float:
    """Time 0 of ``server``'s started timeline on this process's monotonic clock, which is the
    server's clock too (``time.monotonic``: one clock for every process of the machine).

    Each read of the timeline's elapsed time is placed in the middle of its round trip; the read
    with the shortest round trip is the closest (a busy machine delays some reads by ms).
    """
    best = (float("inf"), 0.0)
    with httpx.Client(base_url=server.base_url, timeout=5) as client:
        for _ in range(samples):
            before = time.monotonic()
            elapsed = client.get("/admin/timeline").json()["m"]["elapsed_s"]
            after = time.monotonic()
            best = min(best, (after - before, (before + after) / 2 - elapsed))
    return best[1]


def arrival_times(server: ServerProcess, start: float) -> list[float]:
    """When each request reached ``server`` (its timeline's record), on this process's monotonic clock."""
    body: dict[str, Any] = httpx.get(server.base_url + "/admin/timeline/requests", timeout=5).json()
    return [start + t for t in body["m"]["t"]]


def planned_legs(spec: FleetSpec, entries: list[dict[str, Any]], path: Path) -> list[tuple[float, int]]:
    """Per request of the plan of ``entries``: when its prefill leg answers (its one token), and
    the decode replica the router picked for it (picked with the prefill replica, as it came in)."""
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    simulation = FleetSimulation(spec, load_trace(path))
    result = simulation.run()
    legs = []
    for leg, outcome in zip(simulation.prefill_seqs, result.requests, strict=True):
        assert leg is not None
        assert leg.first_token_time is not None
        legs.append((leg.first_token_time, outcome.replica - PREFILL))
    return legs


def test_measured_legs_through_the_router_match_the_plan(fleet: Fleet, tmp_path: Path) -> None:
    before = [decode_ttft_sum_count(server) for server in fleet.decode]
    for server in [*fleet.prefill, *fleet.decode]:
        assert httpx.delete(server.base_url + "/metrics/summary", timeout=5).status_code == 204
    for server in fleet.decode:
        assert httpx.post(server.base_url + "/admin/timeline/start", timeout=5).status_code == 200
    arrivals = poisson_arrivals(RATE, 60.0, SEED)[:REQUESTS]
    start, sent, client_ttft = asyncio.run(send_all(fleet.router_url, arrivals))

    # The trace of what was actually sent, planned on the same models behind the same picks.
    first = min(sent)
    entries = [
        {"arrival": s - first, "prompt_token_ids": prompt_ids(i), "output_tokens": OUTPUT} for i, s in enumerate(sent)
    ]
    spec = load_fleet(FLEET_FILE, load_models_config(str(MODELS_FILE)), str(MODELS_FILE))
    assert [(g.count, g.kv_role) for g in spec.groups] == [(PREFILL, "kv_producer"), (DECODE, "kv_consumer")]
    legs = planned_legs(spec, entries, tmp_path / "arrivals.jsonl")

    # Each request's hand-off, from the servers' own records: on each decode server, the decode
    # legs' arrivals in the order they came (on the trace's time line), against the planned ends
    # of the prefill legs of the requests the router sent there, in the order they end.
    starts = [timeline_origin(server) for server in fleet.decode]
    handoffs = [0.0] * REQUESTS
    for j, (server, at) in enumerate(zip(fleet.decode, starts, strict=True)):
        arrived = sorted(t - start - first for t in arrival_times(server, at))
        ends = sorted((end, i) for i, (end, replica) in enumerate(legs) if replica == j)
        assert len(arrived) == len(ends)
        for t, (end, i) in zip(arrived, ends, strict=True):
            # A planned prefill end may be a fraction of a millisecond late: never a negative hand-off.
            handoffs[i] = max(0.0, t - end)
    print(f"router hand-off per request (ms): {sorted(round(h * 1000, 2) for h in handoffs)}")
    # The router sends a decode leg once the prefill answer is in: on the whole, hand-offs are positive.
    assert sum(handoffs) > 0
    trace = tmp_path / "trace.jsonl"
    lines = [json.dumps(e | {"handoff_ms": h * 1000}) for e, h in zip(entries, handoffs, strict=True)]
    trace.write_text("\n".join(lines) + "\n")
    simulation = FleetSimulation(spec, load_trace(trace, disaggregated=True), keep_token_times=True)
    result = simulation.run()

    # Per replica, in the order the router was given them (vllm-router's round robin starts at the
    # first, as the planner's does).
    prefill_ttft: list[list[float]] = [[] for _ in range(PREFILL)]
    decode_ttft: list[list[float]] = [[] for _ in range(DECODE)]
    itl: list[list[float]] = [[] for _ in range(DECODE)]
    for i, (outcome, leg, decode_leg) in enumerate(
        zip(result.requests, simulation.prefill_seqs, simulation.seqs, strict=True)
    ):
        assert leg is not None
        assert decode_leg is not None
        assert leg.first_token_time is not None
        assert outcome.ttft is not None
        d = outcome.replica - PREFILL
        prefill_ttft[simulation.prefill_replica_of[i]].append(leg.first_token_time - leg.arrival)
        # From the decode leg's own arrival, as the decode replica times it (the outcome is timed
        # from the send): the request's hand-off after the prefill leg ended.
        decode_ttft[d].append(outcome.arrival + outcome.ttft - decode_leg.arrival)
        itl[d] += [b - a for a, b in itertools.pairwise(outcome.token_times)]

    figures: dict[str, tuple[float, float]] = {}
    for j, server in enumerate(fleet.prefill):
        view = summary(server)
        assert view["requests"]["total"] == len(prefill_ttft[j])
        figures[f"prefill/{j} TTFT"] = (lower_median(prefill_ttft[j]), view["ttft"]["p50"])
    for j, server in enumerate(fleet.decode):
        view = summary(server)
        assert view["requests"]["total"] == len(decode_ttft[j])
        figures[f"decode/{j} TTFT"] = (lower_median(decode_ttft[j]), view["ttft"]["p50"])
        figures[f"decode/{j} ITL"] = (lower_median(itl[j]), view["itl"]["p50"])
    report = {name: (round(p * 1000, 2), round(m * 1000, 2)) for name, (p, m) in figures.items()}
    print("predicted, measured p50 (ms):", report)
    # What the servers' timelines leave out: the router's hops and HTTP, as the client sees them.
    planned_ttft = [o.ttft or 0.0 for o in result.requests]
    print(
        f"TTFT p50 (ms): planned from the send {lower_median(planned_ttft) * 1000:.2f},"
        f" client through the router {lower_median(client_ttft) * 1000:.2f},"
        f" client - plan per request p50 {lower_median([c - p for c, p in zip(client_ttft, planned_ttft, strict=True)]) * 1000:.2f}",
    )
    # The decode legs' mean TTFT, exact from the histograms' sums and counts, over both replicas.
    after = [decode_ttft_sum_count(server) for server in fleet.decode]
    total = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
    count = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
    assert count == REQUESTS
    planned_mean = sum(sum(legs) for legs in decode_ttft) / REQUESTS
    print(f"decode leg TTFT mean (ms): predicted {planned_mean * 1000:.2f}, measured {total / count * 1000:.2f}")
    for name, (predicted, measured) in figures.items():
        assert abs(measured - predicted) <= BOUND * predicted, (name, report)
    assert abs(total / count - planned_mean) <= BOUND * planned_mean


def test_bench_predicts_the_fleet_behind_the_router_beside_the_measurement(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``llmsim bench --fleet`` against vllm-router: the planner's P/D fleet beside what the client measured."""
    out = tmp_path / "bench.json"
    argv = ["bench", "--url", fleet.router_url, "--model", "m", "--rate", "4", "--requests", "12"]
    argv += ["--prompt-tokens", str(PROMPT), "--output-tokens", str(OUTPUT), "--no-progress"]
    argv += ["--config", str(MODELS_FILE), "--fleet", str(FLEET_FILE), "--json", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    print(printed)
    (point,) = json.loads(out.read_text())["points"]
    # Every request answered through both legs, and a prediction for each figure beside the measurement.
    assert point["measured"]["completed"] == 12
    predicted = point["predicted"]
    # Alone or not, a request's first token comes after its prefill step (512 tokens, compute
    # bound: 2 x 6.74e9 x 512 / 61.8125e12 = 111.7 ms) and a step on the decode replica
    # (its weights, 13.48 GB at 187.5 GB/s = 71.9 ms), and each later token a decode step apart.
    assert predicted["completed"] == 12
    assert predicted["ttft"]["p50"] > 0.1117 + 0.0719
    assert predicted["itl"]["p50"] >= 0.0719
    assert printed.count("TTFT p50 (ms)") == 1
