"""The release gate: request work waits while a token release is at hand, and goes on after its pass."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable

import pytest

from llmsim.engine.release_gate import ReleaseGate


class Now:
    """A hand-set clock (seconds)."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def held(gate: ReleaseGate, arrival: float | None = None) -> asyncio.Future[None]:
    """What a slice of request work awaits (it must be held)."""
    waiter = gate.wait(arrival)
    assert waiter is not None
    return asyncio.ensure_future(_await(waiter))


async def _await(waiter: Awaitable[None]) -> None:
    await waiter


async def test_work_goes_on_at_once_unless_a_release_is_within_the_margin() -> None:
    now = Now(10.0)
    gate = ReleaseGate(now, margin=0.001)
    assert gate.wait() is None  # no release pending
    gate.close("engine", 10.005)
    assert gate.wait() is None  # 5 ms ahead: more than the 1 ms margin
    now.t = 10.0039
    assert gate.wait() is None
    now.t = 10.0041  # 0.9 ms before the deadline
    first = held(gate)
    now.t = 10.007  # past the deadline: still held until the pass is done
    late = held(gate)
    assert gate.num_held == 2
    await asyncio.sleep(0)
    assert not first.done()
    assert not late.done()
    assert gate.open("engine") == math.inf  # let go; none of them was on its way to an engine
    await asyncio.wait_for(asyncio.gather(first, late), 1)
    assert gate.wait() is None  # no release pending any more
    assert gate.open("engine") == math.inf  # nobody was waiting


async def test_open_returns_the_earliest_arrival_it_lets_go() -> None:
    now = Now(5.0)
    gate = ReleaseGate(now, margin=0.001)
    gate.close("engine", 5.0005)
    waiters = [held(gate, 4.9998), held(gate, 4.9996), held(gate), held(gate, 4.9999)]
    assert gate.open("engine") == 4.9996
    await asyncio.wait_for(asyncio.gather(*waiters), 1)
    # The next release's waiters start afresh.
    gate.close("engine", 5.0007)
    later = held(gate, 5.0001)
    assert gate.open("engine") == 5.0001
    await asyncio.wait_for(later, 1)


async def test_work_waits_for_every_engine_whose_release_is_at_hand() -> None:
    now = Now(1.0)
    gate = ReleaseGate(now, margin=0.001)
    gate.close("a", 1.0005)
    gate.close("b", 1.0008)
    waiter = held(gate, 0.9999)
    await asyncio.sleep(0)
    # a's pass is done, b's release is 0.8 ms away: still within the margin.
    assert gate.open("a") == math.inf
    await asyncio.sleep(0)
    assert not waiter.done()
    assert gate.open("b") == 0.9999
    await asyncio.wait_for(waiter, 1)


async def test_a_waiter_cancelled_leaves_the_others_waiting() -> None:
    now = Now(0.0)
    gate = ReleaseGate(now, margin=0.001)
    gate.close("engine", 0.0)
    first = held(gate)
    second = held(gate)
    await asyncio.sleep(0)
    first.cancel()  # its client left
    await asyncio.sleep(0)
    assert first.cancelled()
    assert not second.done()
    gate.open("engine")
    await asyncio.wait_for(second, 1)


def test_a_negative_margin_is_refused() -> None:
    with pytest.raises(ValueError, match="margin"):
        ReleaseGate(Now(), margin=-0.001)


async def test_give_way_checks_again_after_it_is_let_go() -> None:
    now = Now(2.0)
    gate = ReleaseGate(now, margin=0.001)
    await asyncio.wait_for(gate.give_way(), 1)  # no release pending: returns at once
    gate.close("engine", 2.0)
    work = asyncio.ensure_future(gate.give_way(1.9995))
    await asyncio.sleep(0)
    assert gate.num_held == 1
    # Let go, but before it runs the step loop has its next release at hand already.
    assert gate.open("engine") == 1.9995
    gate.close("engine", 2.0005)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not work.done()
    assert gate.num_held == 2  # it asked again and was held again
    gate.open("engine")
    await asyncio.wait_for(work, 1)


async def test_deferred_work_runs_after_the_pass_each_in_a_callback_of_its_own_in_order() -> None:
    now = Now(3.0)
    gate = ReleaseGate(now, margin=0.001)
    ran: list[str] = []
    assert not gate.defer(lambda: ran.append("none pending"))  # no release: the caller runs it now
    gate.close("engine", 3.005)
    assert not gate.defer(lambda: ran.append("5 ms ahead"))  # outside the 1 ms margin
    now.t = 3.0045
    waiter = held(gate, 3.0044)
    assert gate.defer(lambda: ran.append("first"), 3.0041)
    assert gate.defer(lambda: ran.append("second"))
    assert gate.num_held == 3
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert ran == []  # held until the pass is done, however many loop turns go by
    # The earliest arrival among everything let go: the first deferred one's.
    assert gate.open("engine") == 3.0041
    assert ran == []  # the pass returns before any of it runs
    await asyncio.sleep(0)
    assert ran == ["first", "second"]  # in the next loop turn, in the order deferred
    await asyncio.wait_for(waiter, 1)
    assert gate.open("engine") == math.inf  # nothing left to run


async def test_deferred_work_that_defers_itself_again_waits_for_the_next_pass() -> None:
    now = Now(7.0)
    gate = ReleaseGate(now, margin=0.001)
    ran: list[float] = []

    def parse() -> None:
        # What the HTTP protocol's kept request does: ask again, then run.
        if not gate.defer(parse):
            ran.append(now.t)

    gate.close("engine", 7.0)
    assert gate.defer(parse)
    gate.open("engine")
    gate.close("engine", 7.0002)  # the step loop has its next release at hand before the callback runs
    await asyncio.sleep(0)
    assert ran == []
    assert gate.num_held == 2
    now.t = 7.0003
    gate.open("engine")
    await asyncio.sleep(0)
    assert ran == [7.0003]


async def test_deferred_work_waits_for_every_release_at_hand_and_one_failure_stops_no_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = Now(1.0)
    gate = ReleaseGate(now, margin=0.001)
    gate.close("a", 1.0005)
    gate.close("b", 1.0008)
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("parse failed")

    assert gate.defer(broken)
    assert gate.defer(lambda: ran.append("after the broken one"))
    assert gate.open("a") == math.inf  # b's release is 0.8 ms away: still within the margin
    await asyncio.sleep(0)
    assert ran == []
    with caplog.at_level("ERROR", logger="llmsim.engine.release_gate"):
        gate.open("b")
        await asyncio.sleep(0)
    assert ran == ["after the broken one"]
    assert "deferred past a token release failed" in caplog.text
