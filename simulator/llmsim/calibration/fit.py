"""Fitting the cost model's timing knobs to measurements, by least squares on the virtual-time core.

Each measurement's load is replayed on one simulated replica (a closed loop of ``concurrency``
clients, Poisson arrivals at ``rate``, or both) and its p50 TTFT / ITL / TPOT compared with the
measured ones. The residuals are relative errors, so a 10 ms TTFT and a 5 ms ITL weigh alike.

The knobs are every number the cost model has (``cost_model.py``), and the time a request takes
to reach the scheduler (``scheduler.ready_time``)::

    step = max(2 P tokens / (peak FLOP/s x compute), (weights + KV read) / (bandwidth x memory)) + step overhead
    TTFT = request overhead + the wait for a step + the steps of its prefill

The solver works in ``1/compute``, ``1/memory`` and the two overheads in ms, in which a step's
duration is linear (piecewise, through the max). In a closed loop the batches hardly depend on
the knobs (every request is sent at a step's end and reaches the scheduler a request overhead
later), so the predictions are piecewise linear in the solver's variables: a trust-region solver
with bounds converges in a few iterations.

Not every knob is visible in every data set. Before fitting, the Jacobian at the start values
decides: a knob with no effect on any residual (a compute efficiency when no replayed step is
compute-bound) is held at its start value, and so is one the data cannot tell from another
(step overhead and memory efficiency when every point decodes at the same batch shape),
preferring to hold the step overhead, then the request overhead, then the compute efficiency.
The report says which and why.

``scipy.optimize.least_squares`` does the solving: bounded trust-region least squares with
finite-difference Jacobians is exactly what this needs, and is not worth re-implementing.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from llmsim.calibration.measurement import METRICS, Measurement
from llmsim.config.calibrated_timing import TIMING_KNOBS
from llmsim.engine.scheduler import SchedulerParams
from llmsim.fleet import FleetRequest, FleetSpec, FleetWorkload, Prompt, ReplicaGroup, RouterSpec, simulate_fleet

#: The knobs, as models.yml names them, in the solver's order.
KNOBS = TIMING_KNOBS
# When the data cannot separate knobs, hold them in this order (the memory efficiency is what
# decode-heavy measurements pin best; the request overhead is what TTFT minus a step pins; the
# per-sequence overhead is the slope of TPOT over concurrency).
_HOLD_ORDER = (
    "latency.step_overhead_ms",
    "latency.step_overhead_per_sequence_ms",
    "latency.request_overhead_ms",
    "efficiency.compute",
    "efficiency.memory",
)
# Solver bounds: efficiencies in [0.01, 1] (as 1/efficiency), overheads in [0, 1 s], the
# per-sequence one in [0, 100 ms].
_LOWER = np.array([1.0, 1.0, 0.0, 0.0, 0.0])
_UPPER = np.array([100.0, 100.0, 1000.0, 100.0, 1000.0])
# A knob whose Jacobian column is this much smaller than the largest has no effect.
_NO_EFFECT = 1e-6
# Largest condition number of the column-normalised Jacobian the fit accepts.
_MAX_CONDITION = 1e3
# Penalty residual for a metric the replay cannot produce (e.g. TPOT of 1-token outputs).
_MISSING = 10.0


@dataclass(frozen=True, slots=True)
class TimingKnobs:
    """The cost model's knobs, in models.yml's terms."""

    compute: float
    memory: float
    step_overhead_ms: float
    step_overhead_per_sequence_ms: float = 0.0
    request_overhead_ms: float = 0.0

    @classmethod
    def of(cls, params: SchedulerParams) -> TimingKnobs:
        return cls(
            params.compute_efficiency,
            params.memory_efficiency,
            params.step_overhead_s * 1000,
            params.step_overhead_per_sequence_s * 1000,
            params.request_overhead_s * 1000,
        )

    def apply(self, params: SchedulerParams) -> SchedulerParams:
        return dataclasses.replace(
            params,
            compute_efficiency=self.compute,
            memory_efficiency=self.memory,
            step_overhead_s=self.step_overhead_ms / 1000,
            step_overhead_per_sequence_s=self.step_overhead_per_sequence_ms / 1000,
            request_overhead_s=self.request_overhead_ms / 1000,
        )

    def value(self, knob: str) -> float:
        return self._values()[KNOBS.index(knob)]

    def with_values(self, values: dict[str, float]) -> TimingKnobs:
        """These knobs with some replaced (models.yml names)."""
        x = [values.get(k, v) for k, v in zip(KNOBS, self._values(), strict=True)]
        return TimingKnobs(*x)

    def _values(self) -> tuple[float, float, float, float, float]:
        return (
            self.compute,
            self.memory,
            self.step_overhead_ms,
            self.step_overhead_per_sequence_ms,
            self.request_overhead_ms,
        )

    def _solver(self) -> np.ndarray:
        x = np.array(self._values())
        x[:2] = 1.0 / x[:2]
        return x

    @classmethod
    def _from_solver(cls, x: np.ndarray) -> TimingKnobs:
        return cls(1.0 / float(x[0]), 1.0 / float(x[1]), float(x[2]), float(x[3]), float(x[4]))


@dataclass(frozen=True, slots=True)
class Prediction:
    """p50 latencies of a replayed load, in seconds (NaN: the replay has none)."""

    ttft_p50: float
    itl_p50: float
    tpot_p50: float

    def value(self, metric: str) -> float:
        result: float = getattr(self, f"{metric}_p50")
        return result


def _arrivals(m: Measurement, seed: int) -> list[float]:
    if m.rate is None:
        return [0.0] * m.num_requests
    # vllm bench: gamma-distributed gaps of mean 1/rate, shape = burstiness (1: Poisson).
    rng = random.Random(f"llmsim-calibrate/{seed}")
    t = 0.0
    times = []
    for _ in range(m.num_requests):
        t += rng.gammavariate(m.burstiness, 1.0 / (m.rate * m.burstiness))
        times.append(t)
    return times


def replay_workload(m: Measurement, seed: int = 0) -> FleetWorkload:
    """The measurement's load: its request count and lengths, arrivals and concurrency limit."""
    n = m.num_requests
    prompts = m.prompt_lens or (round(m.prompt_tokens),) * n
    outputs = m.output_lens or (round(m.output_tokens),) * n
    requests = tuple(
        FleetRequest(Prompt.unique(f"request:{i}", prompts[i]), outputs[i], arrival)
        for i, arrival in enumerate(_arrivals(m, seed))
    )
    return FleetWorkload(requests, max_concurrency=m.concurrency)


def predict(params: SchedulerParams, m: Measurement) -> Prediction:
    """Replay ``m``'s load on one replica with ``params``; its p50 latencies."""
    fleet = FleetSpec((ReplicaGroup("replica", "model", params, 1),), RouterSpec("round-robin", 0.0))
    lat = simulate_fleet(fleet, replay_workload(m)).summary().latencies
    return Prediction(lat.ttft.p50, lat.itl.p50, lat.tpot.p50)


@dataclass(frozen=True, slots=True)
class KnobFit:
    name: str
    start: float
    value: float
    # "fitted", or why it was held at its start value.
    status: str


@dataclass(frozen=True, slots=True)
class PointFit:
    measurement: Measurement
    prediction: Prediction

    def error(self, metric: str) -> float | None:
        """(fitted - measured) / measured, None if not measured."""
        measured = self.measurement.measured(metric)
        if measured is None:
            return None
        return (self.prediction.value(metric) - measured) / measured


@dataclass(frozen=True, slots=True)
class Calibration:
    """The fitted parameters and how well they reproduce each measurement."""

    params: SchedulerParams
    knobs: tuple[KnobFit, ...]
    points: tuple[PointFit, ...]
    metrics: tuple[str, ...]
    # Root mean square of the fitted relative errors.
    rms_error: float
    evaluations: int


class _Objective:
    """Relative errors of the fitted points for a vector of free knobs (the others held)."""

    def __init__(
        self, params: SchedulerParams, points: Sequence[Measurement], metrics: Sequence[str], base: np.ndarray
    ) -> None:
        self.params = params
        self.base = base
        self.free = list(range(len(KNOBS)))
        self.rows = [
            (m, metric) for m in points for metric in metrics if m.measured(metric) is not None and m.fits(metric)
        ]
        self.evaluations = 0

    def full(self, x_free: np.ndarray) -> np.ndarray:
        x = self.base.copy()
        x[self.free] = x_free
        return x

    def __call__(self, x_free: np.ndarray) -> np.ndarray:
        self.evaluations += 1
        params = TimingKnobs._from_solver(self.full(x_free)).apply(self.params)
        cache: dict[int, Prediction] = {}
        out = np.empty(len(self.rows))
        for k, (m, metric) in enumerate(self.rows):
            if id(m) not in cache:
                cache[id(m)] = predict(params, m)
            predicted = cache[id(m)].value(metric)
            measured = m.measured(metric)
            assert measured is not None
            out[k] = _MISSING if math.isnan(predicted) else (predicted - measured) / measured
        return out


def _jacobian(objective: _Objective, x: np.ndarray) -> np.ndarray:
    f0 = objective(x)
    columns = []
    for i in range(len(x)):
        step = 1e-3 * max(1.0, abs(float(x[i])))
        shifted = x.copy()
        shifted[i] = min(x[i] + step, _UPPER[objective.free[i]])
        if shifted[i] == x[i]:
            shifted[i] = x[i] - step
        columns.append((objective(shifted) - f0) / (shifted[i] - x[i]))
    return np.column_stack(columns) if columns else np.zeros((len(f0), 0))


def _choose_free(objective: _Objective, x0: np.ndarray, held: dict[str, str]) -> None:
    """Hold knobs the data cannot see or cannot separate (recorded in ``held``)."""
    objective.free = [i for i, k in enumerate(KNOBS) if k not in held]
    while objective.free:
        jac = _jacobian(objective, x0[objective.free])
        norms = np.linalg.norm(jac, axis=0)
        largest = float(norms.max()) if norms.size else 0.0
        blind = [objective.free[i] for i, n in enumerate(norms) if n <= _NO_EFFECT * max(largest, 1e-300)]
        if blind:
            for i in blind:
                held[KNOBS[i]] = "held: no replayed step depends on it" if largest > 0 else "held: no data"
            objective.free = [i for i in objective.free if i not in blind]
            continue
        normalised = jac / norms
        singular = np.linalg.svd(normalised, compute_uv=False)
        # Fewer measured values than free knobs leaves directions with no singular value at all.
        determined = len(singular) == len(objective.free)
        if len(objective.free) == 1 or (determined and singular[0] <= _MAX_CONDITION * singular[-1]):
            return
        # Collinear (or underdetermined): hold one of the knobs in the weakest direction, in _HOLD_ORDER.
        _, _, vt = np.linalg.svd(normalised)
        weakest = vt[-1]
        involved = [objective.free[i] for i, v in enumerate(weakest) if abs(v) > 0.3]
        victim = next(KNOBS.index(k) for k in _HOLD_ORDER if KNOBS.index(k) in involved)
        partners = ", ".join(KNOBS[i] for i in involved if i != victim)
        held[KNOBS[victim]] = f"held: the data cannot tell it from {partners}"
        objective.free = [i for i in objective.free if i != victim]


def calibrate(
    params: SchedulerParams,
    measurements: Sequence[Measurement],
    *,
    metrics: Sequence[str] = METRICS,
    fixed: dict[str, float] | None = None,
) -> Calibration:
    """Fit the timing knobs of ``params`` to ``measurements``.

    Parameters
    ----------
    params:
        The model on its GPU; its knobs are the start values.
    measurements:
        Load points; those with ``fit`` False are predicted, not fitted.
    metrics:
        Which p50 latencies to fit (of ``ttft``, ``itl``, ``tpot``); every measured one is reported.
    fixed:
        Knobs to hold at a given value (models.yml names, overhead in ms).
    """
    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        raise ValueError(f"metrics must be among {', '.join(METRICS)}, got {', '.join(metrics) or 'none'}")
    fixed = dict(fixed or {})
    for name in fixed:
        if name not in KNOBS:
            raise ValueError(f"unknown knob '{name}' (knobs: {', '.join(KNOBS)})")
    start = TimingKnobs.of(params).with_values(fixed)
    fitted_points = [m for m in measurements if m.fit]
    objective = _Objective(params, fitted_points, metrics, start._solver())
    if not objective.rows:
        raise ValueError(f"nothing to fit: no point to fit measures {', '.join(metrics)}")
    x0 = np.clip(start._solver(), _LOWER, _UPPER)
    objective.base = x0.copy()
    held = {k: "fixed" for k in fixed}
    _choose_free(objective, x0, held)
    if objective.free:
        free = objective.free
        solution = least_squares(
            objective,
            x0[free],
            bounds=(_LOWER[free], _UPPER[free]),
            x_scale="jac",
            diff_step=1e-3,
            xtol=1e-12,
            ftol=1e-12,
            gtol=1e-12,
            max_nfev=300,
        )
        x = objective.full(solution.x)
    else:
        x = x0
    knobs = TimingKnobs._from_solver(x)
    fitted = knobs.apply(params)
    residuals = objective(x[objective.free])
    points = tuple(PointFit(m, predict(fitted, m)) for m in measurements)
    return Calibration(
        params=fitted,
        knobs=tuple(KnobFit(k, start.value(k), knobs.value(k), held.get(k, "fitted")) for k in KNOBS),
        points=points,
        metrics=tuple(metrics),
        rms_error=float(np.sqrt(np.mean(residuals**2))),
        evaluations=objective.evaluations,
    )
