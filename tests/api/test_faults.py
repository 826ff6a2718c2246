"""Fault draws: deterministic from (seed, request id or number), at the configured rates, one fault per request."""

from __future__ import annotations

import math
from typing import NoReturn

import pytest

from llmsim.api.errors import APIError
from llmsim.api.faults import FAULT_HEADER, Fault, FaultInjector
from llmsim.config.schema import FAULT_KINDS, FaultRates, Faults
from llmsim.types import FinishReason, GenerationPlan, Pacing


class Counted:
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def __call__(self, kind: str) -> None:
        self.kinds.append(kind)


class Crashed(Exception):
    pass


def crash(message: str) -> NoReturn:
    raise Crashed(message)


def injector(count: Counted | None = None, **settings: object) -> FaultInjector:
    return FaultInjector("m", Faults.model_validate(settings), count or Counted(), crash)


def kinds(inj: FaultInjector, n: int) -> list[str | None]:
    out: list[str | None] = []
    for _ in range(n):
        fault = inj.draw(None, None)
        out.append(fault.kind if fault else None)
    return out


def test_disabled_by_default_and_enabled_by_a_rate_or_the_header_override() -> None:
    assert not injector().enabled
    assert injector(rates={"stall": 0.01}).enabled
    assert injector(header_override=True).enabled


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_each_kind_comes_at_its_rate(seed: int) -> None:
    rates = {"rate_limit": 0.1, "server_error": 0.05, "stall": 0.2, "crash": 0.02}
    n = 20_000
    drawn = kinds(injector(seed=seed, rates=rates), n)
    for kind in FAULT_KINDS:
        p = rates.get(kind, 0.0)
        got = drawn.count(kind)
        if p == 0:
            assert got == 0, kind
        else:
            # Binomial(n, p): within 5 standard deviations (a false alarm about once in 3.5 million).
            assert abs(got - n * p) < 5 * math.sqrt(n * p * (1 - p)), (kind, got)
    healthy = 1 - sum(rates.values())
    assert abs(drawn.count(None) - n * healthy) < 5 * math.sqrt(n * healthy * (1 - healthy))


def test_the_same_seed_gives_the_same_faults_and_another_seed_others() -> None:
    rates = {"rate_limit": 0.3, "unavailable": 0.3}
    a = kinds(injector(seed=7, rates=rates), 200)
    assert kinds(injector(seed=7, rates=rates), 200) == a
    assert kinds(injector(seed=8, rates=rates), 200) != a


def test_new_settings_restart_the_request_count() -> None:
    inj = injector(seed=3, rates={"server_error": 0.5})
    first = kinds(inj, 50)
    inj.configure(Faults(seed=3, rates=FaultRates(server_error=0.5)))
    assert kinds(inj, 50) == first


def test_a_client_request_id_decides_its_fault_whatever_came_before() -> None:
    inj = injector(seed=11, rates={"rate_limit": 0.5})
    ids = [f"req-{i}" for i in range(40)]
    forward = {rid: inj.draw(None, rid) for rid in ids}
    kinds(inj, 17)  # other traffic in between
    backward = {rid: inj.draw(None, rid) for rid in reversed(ids)}
    assert forward == backward
    assert {f.kind for f in forward.values() if f} == {"rate_limit"}
    assert sum(f is None for f in forward.values()) not in (0, 40)


def test_a_rate_of_one_hits_every_request() -> None:
    assert kinds(injector(rates={"slow": 1.0}), 100) == ["slow"] * 100


def test_the_header_is_obeyed_only_with_header_override() -> None:
    assert injector().draw("rate_limit", None) is None
    off = injector(rates={"stall": 1.0})
    fault = off.draw("rate_limit", None)
    assert fault is not None
    assert fault.kind == "stall"  # the header is ignored: the rates decide
    on = injector(header_override=True, rates={"stall": 1.0})
    for kind in FAULT_KINDS:
        fault = on.draw(f" {kind.upper()} ", None)
        assert fault is not None
        assert fault.kind == kind
    assert on.draw("none", None) is None  # forces a clean answer even at rate 1
    assert on.draw(None, None) is not None


def test_an_unknown_header_value_is_a_400_naming_the_header() -> None:
    with pytest.raises(APIError) as info:
        injector(header_override=True).draw("teapot", None)
    err = info.value
    assert err.status == 400
    assert err.param == FAULT_HEADER
    assert err.message.startswith("Invalid x-llmsim-fault header value 'teapot': expected one of none, rate_limit,")
    with pytest.raises(APIError) as info:
        injector(header_override=True).draw("t" * 60_000, None)
    assert len(info.value.message) < 1000  # the value is not echoed whole


@pytest.mark.parametrize(
    ("kind", "status", "message", "headers"),
    [
        (
            "rate_limit",
            429,
            "Rate limit reached for m in organization org-xxx on requests per min (RPM): Limit 3, Used 3, Requested 1.",
            {"Retry-After": "1"},
        ),
        ("server_error", 500, "The server had an error while processing your request.", None),
        (
            "unavailable",
            503,
            "The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.",
            {"Retry-After": "1"},
        ),
        ("bad_request", 400, "Invalid request: missing required parameter 'model'.", None),
    ],
)
def test_error_kinds_raise_their_error_and_are_counted(
    kind: str, status: int, message: str, headers: dict[str, str] | None
) -> None:
    counted = Counted()
    inj = injector(counted, header_override=True)
    fault = inj.draw(kind, None)
    assert fault is not None
    with pytest.raises(APIError) as info:
        inj.inject(fault, "rid")
    assert (info.value.status, info.value.message, info.value.headers) == (status, message, headers)
    assert counted.kinds == [kind]


def test_crash_calls_the_crash_hook_with_model_and_request_id() -> None:
    counted = Counted()
    inj = injector(counted, header_override=True)
    fault = inj.draw("crash", None)
    assert fault is not None
    with pytest.raises(Crashed, match="crash fault injected: model=m request_id=r-1"):
        inj.inject(fault, "r-1")
    assert counted.kinds == ["crash"]


@pytest.mark.parametrize("kind", ["abort_mid_stream", "stall", "slow"])
def test_stream_kinds_are_counted_and_let_the_request_go_on(kind: str) -> None:
    counted = Counted()
    inj = injector(counted, header_override=True)
    fault = inj.draw(kind, None)
    assert fault is not None
    inj.inject(fault, "rid")
    assert counted.kinds == [kind]


def plan(n: int) -> GenerationPlan:
    return GenerationPlan(5, tuple("x" * n), FinishReason.STOP, "e")


def test_the_token_index_is_where_times_the_length_inside_the_answer() -> None:
    # floor(0.5 * 10) = 5; floor(0.999 * 10) = 9 (never 10); an empty answer: 0.
    assert Fault("stall", 0.5, 1.0, 2.0).token(10) == 5
    assert Fault("stall", 0.999, 1.0, 2.0).token(10) == 9
    assert Fault("stall", 0.0, 1.0, 2.0).token(10) == 0
    assert Fault("stall", 0.7, 1.0, 2.0).token(0) == 0


def test_stall_and_slow_become_pacing_of_every_choice() -> None:
    plans = [plan(8), plan(4)]
    stalled = Fault("stall", 0.3, 1.5, 2.0).pace(plans)
    # floor(0.3 * 8) = 2: the first choice's length picks the token.
    assert [p.pacing for p in stalled] == [Pacing(pause_at=2, pause_s=1.5)] * 2
    slowed = Fault("slow", 0.3, 1.5, 3.0).pace(plans)
    assert [p.pacing for p in slowed] == [Pacing(slowdown=3.0)] * 2
    assert Fault("rate_limit", 0.3, 1.5, 3.0).pace(plans) == plans


def test_a_drop_comes_before_the_last_token_of_all_choices() -> None:
    plans = [plan(8), plan(4)]
    # floor(0.99 * 12) = 11: at most 11 of the 12 tokens go out.
    assert Fault("abort_mid_stream", 0.99, 1.0, 2.0).drop_after(plans) == 11
    assert Fault("abort_mid_stream", 0.25, 1.0, 2.0).drop_after(plans) == 3
    assert Fault("stall", 0.25, 1.0, 2.0).drop_after(plans) is None


def test_fault_settings_are_taken_when_drawn() -> None:
    inj = injector(header_override=True, stall_ms=250, slow_factor=4)
    fault = inj.draw("stall", None)
    assert fault is not None
    assert (fault.stall_s, fault.slow_factor) == (0.25, 4.0)
