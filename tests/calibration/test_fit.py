"""Fitting the timing knobs: exact recovery from llmsim's own data, and published vLLM H100 figures."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from llmsim.calibration import Measurement, TimingKnobs, calibrate, load_measurements, predict, replay_workload
from llmsim.config.loader import parse_models_config
from llmsim.engine.scheduler import SchedulerParams
from llmsim.runtime import scheduler_params
from tests.engine.scheduler.builders import roofline, seed_params

DATA = Path(__file__).parent / "data"
H100_CSV = DATA / "h100-llama-3.1-8b-vllm-0.21.csv"
NEUTRAL = TimingKnobs(compute=1.0, memory=1.0, step_overhead_ms=0.0, step_overhead_per_sequence_ms=0.0)


def profile_params(profile: str, hardware: str) -> SchedulerParams:
    """The model on its GPU with neutral knobs (efficiencies 1, no overheads), not the built-in timing."""
    text = f"models:\n  - {{name: m, engine: scheduler, profile: {profile}, hardware: {hardware}}}\n"
    return NEUTRAL.apply(scheduler_params(parse_models_config(text, "test"), "m", "test"))


def measured_by_llmsim(params: SchedulerParams, points: list[Measurement]) -> list[Measurement]:
    """The points as llmsim with ``params`` would have measured them."""
    out = []
    for m in points:
        p = predict(params, m)
        out.append(dataclasses.replace(m, ttft_p50=p.ttft_p50, itl_p50=p.itl_p50, tpot_p50=p.tpot_p50))
    return out


# A long prompt alone (compute-bound prefill: TTFT sees the compute efficiency), short decodes
# alone, and batches of long contexts (KV reads grow with the batch: separates memory
# efficiency from the fixed step overhead).
SWEEP = [
    Measurement("long prompt", 1, None, 4, 4096, 16),
    Measurement("short", 1, None, 4, 128, 64),
    Measurement("c8", 8, None, 16, 512, 64),
    Measurement("c32", 32, None, 64, 1024, 64),
]


def test_replay_one_request_is_the_roofline() -> None:
    p = predict(seed_params(), Measurement("one", 1, None, 1, 16, 3))
    assert p.ttft_p50 == roofline(16, 16)
    # Decodes at 17 and 18 tokens of context; TPOT and ITL are their mean and median.
    assert p.itl_p50 == pytest.approx((roofline(1, 17) + roofline(1, 18)) / 2, rel=1e-12)
    assert p.tpot_p50 == pytest.approx((roofline(1, 17) + roofline(1, 18)) / 2, rel=1e-12)


def test_replay_keeps_the_load_shape() -> None:
    closed = replay_workload(Measurement("c", 4, None, 12, 100.4, 20))
    assert closed.max_concurrency == 4
    assert {(r.arrival, r.prompt_tokens, r.output_tokens) for r in closed.requests} == {(0.0, 100, 20)}
    detailed = replay_workload(Measurement("d", None, 2.0, 3, 10, 5, prompt_lens=(1, 2, 3), output_lens=(4, 5, 6)))
    assert [(r.prompt_tokens, r.output_tokens) for r in detailed.requests] == [(1, 4), (2, 5), (3, 6)]
    arrivals = [r.arrival for r in detailed.requests]
    assert arrivals == sorted(arrivals)
    assert arrivals[0] > 0
    assert detailed.max_concurrency is None


def test_knobs_are_recovered_from_llmsims_own_measurements() -> None:
    base = profile_params("llama-3.1-8b", "h100-80gb")
    truth = TimingKnobs(
        compute=0.55, memory=0.72, step_overhead_ms=1.3, step_overhead_per_sequence_ms=0.05, request_overhead_ms=8.0
    )
    points = measured_by_llmsim(truth.apply(base), SWEEP)
    result = calibrate(base, points)  # starts from 1 / 1 / 0 ms / 0 ms / 0 ms
    knobs = {k.name: k for k in result.knobs}
    assert all(k.status == "fitted" for k in result.knobs)
    assert knobs["efficiency.compute"].value == pytest.approx(0.55, rel=0.01)
    assert knobs["efficiency.memory"].value == pytest.approx(0.72, rel=0.01)
    assert knobs["latency.step_overhead_ms"].value == pytest.approx(1.3, rel=0.01)
    assert knobs["latency.step_overhead_per_sequence_ms"].value == pytest.approx(0.05, rel=0.01)
    assert knobs["latency.request_overhead_ms"].value == pytest.approx(8.0, rel=0.01)
    assert result.rms_error < 1e-3
    for point in result.points:
        for metric in ("ttft", "itl", "tpot"):
            error = point.error(metric)
            assert error is not None
            assert abs(error) < 1e-3


def test_a_knob_the_data_cannot_see_is_held_and_said_so() -> None:
    base = profile_params("llama-3.1-8b", "h100-80gb")
    truth = TimingKnobs(compute=0.55, memory=0.72, step_overhead_ms=1.3, request_overhead_ms=5.0)
    # Prefills of at most 128 tokens at once: no step is ever compute-bound (at ~16 us of
    # compute per token against ~5 ms of weight reads, that takes some 300 tokens). Long outputs
    # at c=8 read up to 8 x 2,064 tokens of KV per step: the memory efficiency shows apart from
    # the fixed overhead. TPOT only: the request overhead only shows in TTFT.
    points = measured_by_llmsim(truth.apply(base), [SWEEP[1], Measurement("long outputs", 8, None, 8, 16, 2048)])
    result = calibrate(base, points, metrics=["tpot"], fixed={"latency.step_overhead_per_sequence_ms": 0.0})
    knobs = {k.name: k for k in result.knobs}
    assert knobs["efficiency.compute"].status == "held: no replayed step depends on it"
    assert knobs["efficiency.compute"].value == 1.0
    assert knobs["latency.request_overhead_ms"].status == "held: no replayed step depends on it"
    assert knobs["latency.request_overhead_ms"].value == 0.0
    assert knobs["efficiency.memory"].value == pytest.approx(0.72, rel=0.01)
    assert knobs["latency.step_overhead_ms"].value == pytest.approx(1.3, rel=0.01)


def test_one_value_fits_one_knob_and_holds_the_rest() -> None:
    # A single TPOT (the A100 headline: 13.3 ms at c=1 for 1,024 -> 128 tokens) cannot determine
    # five knobs: all but the memory efficiency are held at their start values.
    base = profile_params("llama-3.1-8b", "a100-40gb")
    (point,) = load_measurements(DATA / "a100-40gb-llama-3.1-8b-vllm-0.23.csv")
    result = calibrate(base, [point])
    knobs = {k.name: k for k in result.knobs}
    assert knobs["efficiency.memory"].status == "fitted"
    assert all(
        k.status.startswith("held: ") and k.value == k.start
        for k in result.knobs
        if k is not knobs["efficiency.memory"]
    )
    # By hand: decode steps read the weights plus 1,024 + 1..127 tokens of KV (1,088 on average).
    a = (8.03e9 * 2 + 131_072 * (1024 + 64)) / 1555e9
    assert knobs["efficiency.memory"].value == pytest.approx(a / 13.3e-3, rel=0.002)


# Published vLLM figures: Llama-3.1-8B on one H100 SXM (the file names its source).
W = 8.03e9 * 2  # weight bytes (bf16)
KV = 131_072  # KV bytes per token
BW = 3350e9  # H100 SXM bytes/s


def h100_least_squares(overhead: float) -> tuple[float, float]:
    """1/memory and the per-sequence overhead that fit the sweep's fitted TPOTs, by hand.

    A decode step of c sequences reads the weights and each sequence's KV (50 + 64 tokens on
    average over 128 outputs): TPOT_c = a_c u + c p + overhead with a_c = (W + KV c 114) / BW,
    u = 1/memory, p the per-sequence overhead. The relative residuals are linear in (u, p), so
    least squares is the 2 x 2 normal equations. The fitted TPOTs: c=1, and c=4 twice.
    """
    rows = [(1, 6.48e-3), (4, 6.59e-3), (4, 6.60e-3)]
    x = [((W + KV * c * (50 + 64)) / BW / m, c / m) for c, m in rows]
    y = [(m - overhead) / m for _, m in rows]
    s_aa = sum(a * a for a, _ in x)
    s_ab = sum(a * b for a, b in x)
    s_bb = sum(b * b for _, b in x)
    s_ay = sum(a * v for (a, _), v in zip(x, y, strict=True))
    s_by = sum(b * v for (_, b), v in zip(x, y, strict=True))
    det = s_aa * s_bb - s_ab * s_ab
    return (s_ay * s_bb - s_by * s_ab) / det, (s_aa * s_by - s_ab * s_ay) / det


def test_published_h100_sweep_fits_by_hand() -> None:
    points = load_measurements(H100_CSV)
    assert [(m.concurrency, m.fit, m.fit_metrics) for m in points] == [
        (1, True, ("ttft", "itl", "tpot")),
        (4, True, ("tpot",)),
        (4, True, ("tpot",)),
        (16, False, ("ttft", "itl", "tpot")),
        (64, False, ("ttft", "itl", "tpot")),
    ]
    result = calibrate(profile_params("llama-3.1-8b", "h100-80gb"), points, metrics=["ttft", "tpot"])
    knobs = {k.name: k for k in result.knobs}
    # 50-token prompts decode at c=1 and c=4: never compute-bound, and the fixed overhead is one
    # number with the memory efficiency (held at its start, 0).
    assert knobs["efficiency.compute"].status == "held: no replayed step depends on it"
    assert knobs["latency.step_overhead_ms"].status.startswith("held: the data cannot tell it from")
    u, p = h100_least_squares(0.0)
    assert knobs["efficiency.memory"].value == pytest.approx(1 / u, rel=0.003)
    assert knobs["latency.step_overhead_per_sequence_ms"].value == pytest.approx(p * 1000, rel=0.01)
    # TTFT at c=1: the request reaches an idle engine after the request overhead, and one step
    # prefills its 50 tokens: TTFT = overhead + (W + KV 50) u / BW + p.
    prefill = (W + KV * 50) / BW * u + p
    assert knobs["latency.request_overhead_ms"].value == pytest.approx((13.98e-3 - prefill) * 1000, rel=0.003)
    errors = {(p.measurement.concurrency, p.measurement.ttft_p50): p.error("tpot") for p in result.points}
    assert all(abs(errors[k] or 1) < 0.01 for k in list(errors)[:3])
    # The client-inflated points stay far off, as the file says they would.
    assert (errors[(16, 41.69e-3)] or 0) < -0.3


def test_fixed_knobs_are_held_where_given() -> None:
    points = load_measurements(H100_CSV)
    result = calibrate(
        profile_params("llama-3.1-8b", "h100-80gb"), points, metrics=["tpot"], fixed={"latency.step_overhead_ms": 1.0}
    )
    knobs = {k.name: k for k in result.knobs}
    assert (knobs["latency.step_overhead_ms"].value, knobs["latency.step_overhead_ms"].status) == (1.0, "fixed")
    # TPOT_c = a_c u + c p + 1 ms, fitted by hand as above.
    u, p = h100_least_squares(1e-3)
    assert knobs["efficiency.memory"].value == pytest.approx(1 / u, rel=0.003)
    assert knobs["latency.step_overhead_per_sequence_ms"].value == pytest.approx(p * 1000, rel=0.01)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metrics": ["latency"]}, "metrics must be among ttft, itl, tpot"),
        ({"fixed": {"efficiency.magic": 1.0}}, "unknown knob 'efficiency.magic'"),
        ({"metrics": ["itl"]}, "nothing to fit: no point to fit measures itl"),
    ],
)
def test_bad_requests_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        calibrate(seed_params(), load_measurements(H100_CSV), **kwargs)  # type: ignore[arg-type]
