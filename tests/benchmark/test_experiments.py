"""The experiment registry: one field per variable, valid configs, and predictions that say what each claims."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmsim.benchmark.experiments import BASE_MODEL, EXPERIMENTS, Experiment, Observation, Variant, select
from llmsim.benchmark.prediction import predict
from llmsim.benchmark.stats import measured, summarize
from llmsim.config import load_models_config
from llmsim.runtime import scheduler_params


def leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= leaves(value, f"{prefix}{key}.")
        else:
            out[prefix + key] = value
    return out


def differing(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    la, lb = leaves(a), leaves(b)
    return {k for k in la.keys() | lb.keys() if la.get(k) != lb.get(k)}


@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=lambda e: e.id)
def test_each_experiment_changes_one_model_field_at_a_time(experiment: Experiment) -> None:
    served = {m["name"]: {k: v for k, v in m.items() if k != "name"} for m in experiment.config()["models"]}
    base = experiment.base_model()
    # The experiment's base is the shared base with at most one field set up...
    assert differing(base, BASE_MODEL) == set(experiment.setup)
    assert len(experiment.setup) <= 1
    # ...and each variant's served model differs from it in the studied field only (or not at all).
    for variant in experiment.variants:
        changed = differing(served[experiment.model_name(variant)], base)
        assert changed <= ({experiment.field} if experiment.field else set()), variant.name
    if experiment.field is not None:
        values = {leaves(served[experiment.model_name(v)])[experiment.field] for v in experiment.variants}
        assert len(values) == len(experiment.variants), "each variant sets a different value"


def predicted(experiment: Experiment, variant: Variant, tmp_path: Path) -> Observation:
    path = tmp_path / f"{experiment.id}.yml"
    path.write_text(json.dumps(experiment.config()))
    params = scheduler_params(load_models_config(path), experiment.model_name(variant), str(path))
    workload = variant.workload()
    p = predict(params, workload)
    return Observation(measured(p.records, workload.warmup), summarize(p.records, workload.warmup), p.num_preemptions)


def values(experiment_id: str, tmp_path: Path) -> dict[str, dict[str, float]]:
    (experiment,) = select([experiment_id])
    return {
        v.name: {m.label: m.value(predicted(experiment, v, tmp_path)) for m in experiment.metrics}
        for v in experiment.variants
    }


# The base GPU: 247.25 TFLOPS and 750 GB/s; the model 6.74e9 parameters, 13.48 GB, 512 KiB of KV per token.
FLOPS, BANDWIDTH, PARAMS, KV = 247.25e12, 750e9, 6.74e9, 524288


def test_e3_predicts_one_full_budget_stall_per_chunk(tmp_path: Path) -> None:
    got = values("E3", tmp_path)
    for budget, steps in ((8192, 1), (2048, 4)):
        v = got[f"budget-{budget}"]
        # A stalled step is the whole budget, compute-bound: 2 x params x budget / FLOPS.
        assert v["decode stall (stalled step)"] == pytest.approx(2 * PARAMS * budget / FLOPS, rel=1e-9)
        # The 16 decoders take 16 tokens of each step: floor(8176 / (budget - 16)) full-budget chunks.
        assert v["stalled steps per decoder"] == steps == 8176 // (budget - 16)


def test_e4_predicts_the_cache_deciding_how_many_run(tmp_path: Path) -> None:
    got = values("E4", tmp_path)
    # Admission needs the whole 2,000-token prompt: 125 blocks of 16; the admitted ones then grow to
    # ceil(2063 / 16) = 129 blocks, which still fits (9 x 129 = 1,161, 18 x 129 = 2,322): no preemption.
    assert got["1188-blocks"]["most requests decoding at once"] == 1188 // 125 == 9
    assert got["2335-blocks"]["most requests decoding at once"] == 2335 // 125 == 18
    assert 18 * 129 <= 2335


def test_e5_predicts_fewer_preemptions_with_a_watermark(tmp_path: Path) -> None:
    got = values("E5", tmp_path)
    assert got["watermark-0"]["preemptions"] > got["watermark-0.1"]["preemptions"] > 0


def test_e1_and_e2_predict_the_seed_designs_ratios(tmp_path: Path) -> None:
    e1 = values("E1", tmp_path)
    step = e1["64-streams"]["step time (TPOT p50)"] / e1["1-stream"]["step time (TPOT p50)"]
    assert step == pytest.approx(1.56, rel=0.02)
    # TPOT: the mean of decode steps 1..199, step j reading 128 + j tokens of KV besides the weights: j = 100 on average.
    assert e1["1-stream"]["step time (TPOT p50)"] == pytest.approx((2 * PARAMS + KV * 228) / BANDWIDTH, rel=1e-9)
    e2 = values("E2", tmp_path)
    # TPOT: the mean of decode steps 1..99, step j reading 32 x (prompt + j) tokens of KV: j = 50 on average.
    for prompt in (128, 2048):
        step_50 = (2 * PARAMS + KV * 32 * (prompt + 50)) / BANDWIDTH
        assert e2[f"prompt-{prompt}"]["step time (TPOT p50)"] == pytest.approx(step_50, rel=1e-9)


def test_e6_predicts_ttft_falling_when_phases_break(tmp_path: Path) -> None:
    got = values("E6", tmp_path)
    assert got["random-lengths"]["TTFT p50"] < got["equal-lengths"]["TTFT p50"] / 3


def test_unknown_experiments_are_named() -> None:
    assert [e.id for e in select(["e3", "E1"])] == ["E1", "E3"]
    with pytest.raises(ValueError, match="E9"):
        select(["E9"])
