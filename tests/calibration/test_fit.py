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


def profile_params(profile: str, hardware: str) -> SchedulerParams:
    text = f"models:\n  - {{name: m, engine: scheduler, profile: {profile}, hardware: {hardware}}}\n"
    return scheduler_params(parse_models_config(text, "test"), "m", "test")


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
    truth = TimingKnobs(compute=0.55, memory=0.72, step_overhead_ms=1.3)
    points = measured_by_llmsim(truth.apply(base), SWEEP)
    result = calibrate(base, points)  # starts from the profile's 1 / 1 / 0 ms
    knobs = {k.name: k for k in result.knobs}
    assert all(k.status == "fitted" for k in result.knobs)
    assert knobs["efficiency.compute"].value == pytest.approx(0.55, rel=0.01)
    assert knobs["efficiency.memory"].value == pytest.approx(0.72, rel=0.01)
    assert knobs["latency.step_overhead_ms"].value == pytest.approx(1.3, rel=0.01)
    assert result.rms_error < 1e-3
    for point in result.points:
        for metric in ("ttft", "itl", "tpot"):
            error = point.error(metric)
            assert error is not None
            assert abs(error) < 1e-3


def test_a_knob_the_data_cannot_see_is_held_and_said_so() -> None:
    base = profile_params("llama-3.1-8b", "h100-80gb")
    truth = TimingKnobs(compute=0.55, memory=0.72, step_overhead_ms=1.3)
    # Prefills of at most 128 tokens at once: no step is ever compute-bound (at ~16 us of
    # compute per token against ~5 ms of weight reads, that takes some 300 tokens). Long outputs
    # at c=8 read up to 8 x 2,064 tokens of KV per step: the memory efficiency shows apart from
    # the fixed overhead.
    points = measured_by_llmsim(truth.apply(base), [SWEEP[1], Measurement("long outputs", 8, None, 8, 16, 2048)])
    result = calibrate(base, points)
    knobs = {k.name: k for k in result.knobs}
    assert knobs["efficiency.compute"].status == "held: no replayed step depends on it"
    assert knobs["efficiency.compute"].value == 1.0
    assert knobs["efficiency.memory"].value == pytest.approx(0.72, rel=0.01)
    assert knobs["latency.step_overhead_ms"].value == pytest.approx(1.3, rel=0.01)


# Published vLLM figures: Llama-3.1-8B on one H100 SXM (the file names its source).
W = 8.03e9 * 2  # weight bytes (bf16)
KV = 131_072  # KV bytes per token
BW = 3350e9  # H100 SXM bytes/s


def test_published_h100_tpot_fits_a_memory_efficiency_near_the_roofline_ratio() -> None:
    points = load_measurements(H100_CSV)
    assert [(m.concurrency, m.fit) for m in points] == [(1, True), (4, True), (16, False), (64, False)]
    result = calibrate(profile_params("llama-3.1-8b", "h100-80gb"), points, metrics=["tpot"])
    knobs = {k.name: k for k in result.knobs}
    # 50-token prompts at c=1 and c=4 decode at one batch shape: the data cannot separate the
    # overhead from the memory efficiency (held at the profile's 0), and never compute-bound.
    assert knobs["latency.step_overhead_ms"].status.startswith("held: the data cannot tell it from")
    assert knobs["efficiency.compute"].status == "held: no replayed step depends on it"
    # By hand: a decode step reads the weights plus each sequence's KV (about 50 + 64 tokens on
    # average over 128 outputs) at bandwidth x memory, so TPOT_c = a_c / memory. Least squares
    # on relative errors: 1/memory = sum(a_c / m_c) / sum((a_c / m_c)^2).
    a = {c: (W + KV * c * (50 + 64)) / BW for c in (1, 4)}
    measured = {1: 6.48e-3, 4: 6.59e-3}
    s1 = sum(a[c] / measured[c] for c in a)
    s2 = sum((a[c] / measured[c]) ** 2 for c in a)
    assert knobs["efficiency.memory"].value == pytest.approx(s2 / s1, rel=0.003)
    errors = {p.measurement.concurrency: p.error("tpot") for p in result.points}
    assert abs(errors[1] or 1) < 0.01
    assert abs(errors[4] or 1) < 0.01
    # The client-inflated points stay far off, as the file says they would.
    assert (errors[16] or 0) < -0.3


def test_fixed_knobs_are_held_where_given() -> None:
    points = load_measurements(H100_CSV)
    result = calibrate(
        profile_params("llama-3.1-8b", "h100-80gb"), points, metrics=["tpot"], fixed={"latency.step_overhead_ms": 1.0}
    )
    knobs = {k.name: k for k in result.knobs}
    assert (knobs["latency.step_overhead_ms"].value, knobs["latency.step_overhead_ms"].status) == (1.0, "fixed")
    # TPOT_c = a_c / memory + 1 ms, fitted by hand as above on (m_c - 1 ms).
    a = {c: (W + KV * c * (50 + 64)) / BW for c in (1, 4)}
    measured = {1: 6.48e-3, 4: 6.59e-3}
    # Residual (a_c u + o - m_c)/m_c is linear in u = 1/memory: u = sum(a_c (m_c - o)/m_c^2) / sum(a_c^2/m_c^2).
    u = sum(a[c] * (measured[c] - 1e-3) / measured[c] ** 2 for c in a) / sum(a[c] ** 2 / measured[c] ** 2 for c in a)
    assert knobs["efficiency.memory"].value == pytest.approx(1 / u, rel=0.003)


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
