"""Calibration: fit the scheduler's timing knobs to measurements of a real vLLM deployment.

Measurements (``vllm bench serve`` result files or a CSV) are replayed on the virtual-time core
and the cost model's knobs fitted by least squares (see ``fit``); the result is a models.yml
model and a measured-versus-fitted table. Needs scipy (``pip install 'llmsim[calibrate]'``).
"""

from llmsim.calibration.fit import (
    KNOBS,
    Calibration,
    KnobFit,
    PointFit,
    Prediction,
    TimingKnobs,
    calibrate,
    predict,
    replay_workload,
)
from llmsim.calibration.fitted_profile import fitted_model, models_yaml
from llmsim.calibration.measurement import (
    METRICS,
    Measurement,
    default_num_requests,
    load_measurements,
    parse_bench_json,
    parse_csv,
)

__all__ = [
    "KNOBS",
    "METRICS",
    "Calibration",
    "KnobFit",
    "Measurement",
    "PointFit",
    "Prediction",
    "TimingKnobs",
    "calibrate",
    "default_num_requests",
    "fitted_model",
    "load_measurements",
    "models_yaml",
    "parse_bench_json",
    "parse_csv",
    "predict",
    "replay_workload",
]
