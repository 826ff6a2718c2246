"""Fault timelines: phases applied on the server's clock, per replica, recorded and counted.

Time is a :class:`ManualClock` the test moves (the instant engine answers at once), except for
the background task's test, which runs in looptime's virtual loop time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from llmsim.api.fault_timeline import UNKNOWN_REPLICA, Replica, drawn_replicas
from llmsim.config.schema import Faults, FaultTimeline, duration_seconds
from llmsim.engine import MonotonicClock
from llmsim.engine.clock import ManualClock
from llmsim.errors import ConfigError
from llmsim.runtime import Runtime, build_runtime
from tests.api.app_client import app_client

RESPONSES = """
version: 1
responses: []
default:
  content: "Hi there"
"""
# Replica 1 answers 503 from 10 s to 20 s; everyone is healthy again from 20 s.
TIMELINE = """
version: 1
models:
  - name: m
    engine: instant
    faults:
      seed: 3
      timeline:
        start: {start}
        phases:
          - {{name: down, at: 10s, replicas: [1], set: {{rates: {{unavailable: 1}}}}}}
          - {{name: recovered, at: 20, clear: true}}
"""
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def runtime(tmp_path: Path, clock: Any, start: str = "admin", replica: Replica = UNKNOWN_REPLICA) -> Runtime:
    (tmp_path / "models.yml").write_text(TIMELINE.format(start=start))
    (tmp_path / "responses.yml").write_text(RESPONSES)
    return build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml", clock=clock, replica=replica)


async def status(client: httpx.AsyncClient) -> int:
    return (await client.post("/v1/chat/completions", json=CHAT)).status_code


def metric(page: str, name: str, phase: str) -> float:
    labels = {"model_name": "m", "engine": "0", "phase": phase}
    (value,) = [
        sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == name and sample.labels == labels
    ]
    return float(value)


# -- the schema -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"), [(30, 30.0), (1.5, 1.5), ("30s", 30.0), ("500ms", 0.5), ("1m30s", 90.0), ("2h", 7200.0)]
)
def test_durations(text: object, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize(
    ("phases", "message"),
    [
        ([{"name": "a", "at": 1}], "either set or clear"),
        ([{"name": "a", "at": 1, "clear": True, "set": {}}], "either set or clear"),
        ([{"name": "a", "at": 1, "clear": True, "replicas": [0]}], "leave replicas and count out"),
        ([{"name": "a", "at": 1, "set": {}, "replicas": [0], "count": 1}], "not both"),
        ([{"name": "a", "at": 2, "set": {}}, {"name": "b", "at": 1, "clear": True}], "time order"),
        ([{"name": "a", "at": 1, "set": {}}, {"name": "a", "at": 2, "clear": True}], "used twice"),
        ([{"name": "base", "at": 1, "set": {}}], "reserved"),
        ([{"name": "a", "at": "soon", "set": {}}], "duration"),
        ([{"name": "a", "at": 1, "set": {"timeline": {}}}], "Extra inputs"),
    ],
)
def test_bad_timelines_are_refused(phases: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        FaultTimeline.model_validate({"phases": phases})


def test_the_base_state_leaves_the_timeline_out() -> None:
    faults = Faults.model_validate({"seed": 4, "timeline": {"phases": [{"name": "a", "at": 1, "clear": True}]}})
    assert faults.state().model_dump() == {
        "seed": 4,
        "rates": faults.rates.model_dump(),
        "stall_ms": 1000.0,
        "slow_factor": 2.0,
        "header_override": False,
        "unhealthy": False,
    }


# -- the draw of a count --------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 5])
def test_a_count_picks_that_many_replicas_the_same_on_every_call(count: int) -> None:
    picked = drawn_replicas(7, 0, count, 5)
    assert len(picked) == count
    assert picked <= set(range(5))
    assert drawn_replicas(7, 0, count, 5) == picked


def test_a_count_beyond_the_fleet_picks_everyone_and_seeds_and_phases_pick_differently() -> None:
    assert drawn_replicas(1, 0, 9, 4) == {0, 1, 2, 3}
    # 50 seeds of "1 of 10": a draw that ignored the seed would pick one replica every time.
    assert len({next(iter(drawn_replicas(seed, 0, 1, 10))) for seed in range(50)}) > 1
    assert len({next(iter(drawn_replicas(0, phase, 1, 10))) for phase in range(50)}) > 1


# -- through the app --------------------------------------------------------------------------


async def test_the_named_replica_fails_in_its_phase_only_and_every_request_is_recorded(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    rt = runtime(tmp_path, clock, replica=Replica(ordinal=1))
    async with app_client(rt) as client:
        assert await status(client) == 200  # not started: base faults, nothing recorded
        started = (await client.post("/admin/timeline/start")).json()["m"]
        assert started["phase"] == "base"
        assert started["affected"] == {"down": True, "recovered": False}
        clock.advance(5)
        assert await status(client) == 200
        clock.advance(5)  # t = 10 s: down starts (at is inclusive)
        assert await status(client) == 503
        assert await status(client) == 503
        state = (await client.get("/admin/timeline")).json()["m"]
        assert state["phase"] == "down"
        assert state["elapsed_s"] == 10.0
        page = (await client.get("/metrics")).text
        assert metric(page, "llmsim_fault_phase", "down") == 1
        assert metric(page, "llmsim_fault_phase", "base") == 0
        clock.advance(10)  # t = 20 s
        assert await status(client) == 200
        state = (await client.get("/admin/timeline")).json()["m"]
        assert state["phase"] == "recovered"
        assert state["counts"] == {
            "base": {"requests": 1, "faults": dict.fromkeys(state["counts"]["base"]["faults"], 0)},
            "down": {
                "requests": 2,
                "faults": dict.fromkeys(state["counts"]["down"]["faults"], 0) | {"unavailable": 2},
            },
            "recovered": {"requests": 1, "faults": dict.fromkeys(state["counts"]["base"]["faults"], 0)},
        }
        log = (await client.get("/admin/timeline/requests")).json()["m"]
        assert log == {"t": [5.0, 10.0, 10.0, 20.0], "fault": [None, "unavailable", "unavailable", None]}
        page = (await client.get("/metrics")).text
        for phase in ("base", "down", "recovered"):
            assert metric(page, "llmsim_fault_phase_transitions_total", phase) == 1
        assert metric(page, "llmsim_fault_phase", "recovered") == 1


async def test_a_replica_not_named_stays_healthy(tmp_path: Path) -> None:
    clock = ManualClock()
    rt = runtime(tmp_path, clock, replica=Replica(ordinal=0))
    async with app_client(rt) as client:
        await client.post("/admin/timeline/start")
        for _ in range(3):
            clock.advance(7)
            assert await status(client) == 200
        assert (await client.get("/admin/timeline")).json()["m"]["phase"] == "recovered"


async def test_a_jump_past_several_phases_enters_each_in_order(tmp_path: Path) -> None:
    clock = ManualClock()
    rt = runtime(tmp_path, clock, replica=Replica(ordinal=1))
    async with app_client(rt) as client:
        await client.post("/admin/timeline/start")
        clock.advance(60)
        assert await status(client) == 200
        page = (await client.get("/metrics")).text
        assert metric(page, "llmsim_fault_phase_transitions_total", "down") == 1
        assert metric(page, "llmsim_fault_phase_transitions_total", "recovered") == 1


async def test_the_start_call_says_which_replica_this_is(tmp_path: Path) -> None:
    clock = ManualClock()
    rt = runtime(tmp_path, clock)
    async with app_client(rt) as client:
        refused = await client.post("/admin/timeline/start")
        assert refused.status_code == 400
        assert "ordinal is not known" in refused.json()["error"]["message"]
        for wrong in ({"replicas": True}, {"ordinal": -1}, {"ordinal": "1"}, {"replicas": 0}):
            assert (await client.post("/admin/timeline/start", json=wrong)).status_code == 400, wrong
        started = await client.post("/admin/timeline/start", json={"ordinal": 1, "replicas": 2})
        assert started.json()["m"]["replica"] == {"ordinal": 1, "count": 2}
        clock.advance(10)
        assert await status(client) == 503


def test_a_timeline_that_starts_with_the_process_needs_the_ordinal_before_bind(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"faults\.timeline.*ordinal is not known"):
        runtime(tmp_path, ManualClock(), start="process")


async def test_a_timeline_put_at_run_time_replaces_the_old_one(tmp_path: Path) -> None:
    clock = ManualClock()
    rt = runtime(tmp_path, clock, replica=Replica(ordinal=0, count=3))
    async with app_client(rt) as client:
        bad = await client.put("/admin/timeline", json={"m": {"phases": [{"name": "x", "at": 1}]}})
        assert bad.status_code == 400
        assert bad.json()["error"]["param"].startswith("m")
        assert (await client.put("/admin/timeline", json={"nope": None})).status_code == 404
        # A count of 3 in a fleet of 3 picks this replica too; start: process starts at the PUT.
        spec = {
            "start": "process",
            "phases": [{"name": "all-bad", "at": 0, "count": 3, "set": {"rates": {"server_error": 1}}}],
        }
        state = (await client.put("/admin/timeline", json={"m": spec})).json()["m"]
        assert state["phase"] == "all-bad"
        assert await status(client) == 500
        assert (await client.put("/admin/timeline", json={"m": None})).json()["m"]["timeline"] is None
        assert await status(client) == 200


async def test_an_unhealthy_phase_fails_the_health_check_and_still_serves(tmp_path: Path) -> None:
    """``set: {unhealthy: true}``: /health answers 503 in the phase (what vllm-router's checker reads),
    requests are answered all the while, and /health is 200 again after the clear."""
    clock = ManualClock()
    rt = runtime(tmp_path, clock, replica=Replica(ordinal=1, count=3))
    async with app_client(rt) as client:
        spec = {
            "start": "admin",
            "phases": [
                {"name": "sick", "at": 5, "replicas": [1], "set": {"unhealthy": True}},
                {"name": "well", "at": 8, "clear": True},
            ],
        }
        assert (await client.put("/admin/timeline", json={"m": spec})).status_code == 200
        await client.post("/admin/timeline/start")
        assert (await client.get("/health")).status_code == 200
        clock.advance(5)  # no request in between: the check itself enters the phase
        assert (await client.get("/health")).status_code == 503
        assert await status(client) == 200
        assert (await client.get("/admin/timeline/requests")).json()["m"] == {"t": [5.0], "fault": [None]}
        clock.advance(3)
        assert (await client.get("/health")).status_code == 200
        # The same state from /admin/faults, without a timeline.
        assert (await client.put("/admin/faults", json={"m": {"unhealthy": True}})).status_code == 200
        assert (await client.get("/health")).status_code == 503
        assert (await client.put("/admin/faults", json={"m": {}})).status_code == 200
        assert (await client.get("/health")).status_code == 200


@pytest.mark.looptime
async def test_the_background_task_enters_a_phase_when_it_is_due_without_a_request(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    rt = runtime(tmp_path, MonotonicClock(now=loop.time), replica=Replica(ordinal=1))
    timeline = rt.state.models["m"].timeline
    assert timeline is not None
    timeline.start()
    task = asyncio.create_task(timeline.run())
    try:
        await asyncio.sleep(9.9)
        assert rt.metrics.models["m"].fault_phase == "base"
        await asyncio.sleep(0.2)
        assert rt.metrics.models["m"].fault_phase == "down"
        await asyncio.sleep(10)
        assert rt.metrics.models["m"].fault_phase == "recovered"
    finally:
        task.cancel()
