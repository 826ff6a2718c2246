"""bench_live_timing's verdicts on its goals, on hand-made medians (limits worked out by hand)."""

from __future__ import annotations

from typing import Any

import pytest
from bench.bench_live_timing import goal_checks


def level(ratio: float, lag_p50: float, lag_p99: float) -> dict[str, Any]:
    return {
        "median": {
            "llmsim": {"lag_p50_ms": lag_p50, "lag_p99_ms": lag_p99},
            "ratio_to_floor": {"llmsim": ratio},
        }
    }


def ttft(predicted: float, measured: float) -> dict[str, Any]:
    return {
        "predicted_ms": {"ttft": predicted, "itl": 8.0, "e2e": 1000.0},
        # ITL 2.5 % over (missed), E2E 1.5 % under (met).
        "replays": {"llmsim/raw": {"measured_ms": {"ttft": measured, "itl": 8.2, "e2e": 985.0}}},
    }


def verdicts(out: dict[str, Any]) -> dict[str, bool]:
    return {c["goal"]: c["met"] for c in goal_checks(out)}


def test_each_goal_is_judged_against_its_own_limit() -> None:
    out = {
        # 32 streams: no CPU goal; lag p99 limit 1 + 0.64 = 1.64 ms.
        # 64: CPU ≤ 1.5x, p99 ≤ 2.28 ms. 128: CPU ≤ 1.3x, p99 ≤ 3.56 ms.
        "cpu": {"32": level(9.9, 0.49, 1.63), "64": level(1.5, 0.51, 2.27), "128": level(1.31, 0.2, 3.57)},
        # 2 % of 36 ms = 0.72 ms > 0.5 ms: 36.7 is within it.
        "ttft": ttft(36.0, 36.7),
    }
    assert verdicts(out) == {
        "lag p50, 32 streams": True,
        "lag p99, 32 streams": True,
        "CPU per token / floor, 64 streams": True,
        "lag p50, 64 streams": False,
        "lag p99, 64 streams": True,
        "CPU per token / floor, 128 streams": False,
        "lag p50, 128 streams": True,
        "lag p99, 128 streams": False,
        "|TTFT p50 - prediction|, raw client": True,
        "|ITL p50 - prediction|, raw client": False,
        "|E2E p50 - prediction|, raw client": True,
    }


@pytest.mark.parametrize(
    ("predicted", "measured", "met"),
    [
        (36.0, 36.8, False),  # 0.8 ms over the 0.72 ms allowance
        (36.0, 35.3, True),  # 0.7 ms under: within it (the goal is both ways)
        (20.0, 20.45, True),  # 2 % is 0.4 ms: the 0.5 ms floor applies
        (20.0, 19.4, False),  # 0.6 ms under
    ],
)
def test_the_ttft_allowance_is_the_larger_of_2_percent_and_half_a_millisecond(
    predicted: float, measured: float, met: bool
) -> None:
    assert verdicts({"ttft": ttft(predicted, measured)})["|TTFT p50 - prediction|, raw client"] is met


def test_a_lag_verdict_carries_the_bare_sends_of_the_same_run_beside_it() -> None:
    row = level(1.2, 0.7, 2.0)
    row["median"]["sends"] = {"lag_p50_ms": 0.62, "lag_p99_ms": 1.9, "send_us": 9.7}
    checks = {c["goal"]: c for c in goal_checks({"cpu": {"128": row}})}
    # The verdict is still the goal's own (0.7 > 0.5 ms: missed), the floor only shown beside it.
    assert (checks["lag p50, 128 streams"]["met"], checks["lag p50, 128 streams"]["bare"]) == (False, 0.62)
    assert (checks["lag p99, 128 streams"]["met"], checks["lag p99, 128 streams"]["bare"]) == (True, 1.9)
    assert checks["CPU per token / floor, 128 streams"]["bare"] is None
