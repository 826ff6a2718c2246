"""Request work gives way to a token release at hand, and no request joins a later step for it (virtual loop time).

llmsim serve runs the step loop's releases and every request's parsing, planning and response
start on one event loop. Within the gate's margin of a release a request's work waits until the
release pass is done; the step loop then gives it a loop turn before it decides the next step's
admissions, so the request joins the same step as if it had not waited.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from llmsim.engine import MonotonicClock
from llmsim.engine.release_gate import DEFAULT_MARGIN
from llmsim.runtime import Runtime, build_runtime
from tests.api.asgi_driver import Exchange, call
from tests.api.test_push import CONFIG, RESPONSES, body, token_writes


def write_config(tmp_path: Path, async_scheduling: bool) -> None:
    tmp_path.mkdir()
    scheduler = f"    scheduler: {{async_scheduling: {str(async_scheduling).lower()}}}\n"
    (tmp_path / "models.yml").write_text(CONFIG + scheduler)
    (tmp_path / "responses.yml").write_text(RESPONSES)


async def started(tmp_path: Path, *, gate: bool, async_scheduling: bool) -> Runtime:
    write_config(tmp_path, async_scheduling)
    clock = MonotonicClock(now=asyncio.get_running_loop().time)
    runtime = build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml", clock=clock)
    engine = runtime.state.models["sim"].engine
    if not gate:
        # The same server as before the gate existed: nothing waits, nothing is held.
        runtime.state.release_gate = None
        runtime.app._gate = None
        engine._gate = None  # type: ignore[attr-defined]
    await engine.start()
    return runtime


async def two_requests(runtime: Runtime, second_after: float) -> tuple[Exchange, Exchange]:
    """Request 0 now; request 1 ``second_after`` seconds later. Their exchanges, times relative to the first call."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def later() -> Exchange:
        await asyncio.sleep(second_after)
        return await call(runtime.app, "/v1/completions", body(1))

    first, second = await asyncio.gather(call(runtime.app, "/v1/completions", body(0)), later())
    for ex in (first, second):
        ex.sent[:] = [(t - t0, m) for t, m in ex.sent]
    return first, second


@pytest.mark.looptime
@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_a_request_held_at_a_release_joins_the_step_it_would_have_joined(
    tmp_path: Path, async_scheduling: bool
) -> None:
    # Where request 0's second token leaves, alone on the server (the step's deadline).
    alone = await started(tmp_path / "alone", gate=True, async_scheduling=async_scheduling)
    reference, _ = await two_requests(alone, 10.0)
    deadline = token_writes(reference)[1][0]
    await alone.state.models["sim"].engine.stop()
    # Request 1 comes half the margin before that deadline: with the gate its work waits for the
    # release pass; without it, it runs at once (virtual time: no CPU cost) and makes the step.
    arrives = deadline - DEFAULT_MARGIN / 2
    runs = {}
    for gate in (True, False):
        runtime = await started(tmp_path / str(gate), gate=gate, async_scheduling=async_scheduling)
        runs[gate] = await two_requests(runtime, arrives)
        held = runtime.state.release_gate.num_held if runtime.state.release_gate is not None else 0
        assert held == (1 if gate else 0)
        await runtime.state.models["sim"].engine.stop()
    gated, plain = runs[True], runs[False]
    for a, b in zip(gated, plain, strict=True):
        assert [t for t, _ in token_writes(a)] == pytest.approx([t for t, _ in token_writes(b)], abs=2e-6)
        assert a.body.count(b"data:") == b.body.count(b"data:")
    # Request 0's tokens still leave at their deadlines, the second one included.
    assert token_writes(gated[0])[1][0] == pytest.approx(deadline, abs=2e-6)
    # Steps are 20 ms (1e9 parameters x 2 B read at 100 GB/s; a short prompt adds next to nothing).
    # Synchronous scheduling decides the step starting at that deadline when it starts: request 1
    # is in it, and its first token leaves one step later. With async scheduling that step was
    # decided when the one before it started: request 1 joins the next, one step later still.
    first_token = token_writes(gated[1])[0][0]
    joins = deadline if not async_scheduling else deadline + 0.020
    assert joins + 0.020 <= first_token < joins + 0.0201
