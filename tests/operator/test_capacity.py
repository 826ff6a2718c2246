"""The operator accepts exactly the LLMSimulators whose rendered config llmsim itself starts with.

Each case renders the operator's models.yml and hands it to the simulator's own startup path
(``llmsim.runtime.build_runtime``, what ``llmsim serve`` runs before it binds): the operator must
refuse a spec exactly when llmsim would refuse its config, and otherwise report the KV-cache
capacity the simulator's engine then has.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsim.engine.scheduler import SchedulerEngine
from llmsim.errors import ConfigError
from llmsim.runtime import build_runtime
from llmsim_operator.simulator_config import models_yaml
from llmsim_operator.spec import InvalidSpec, SimulatorSpec, parse_spec, resolve_spec
from tests.operator.builders import NAMESPACE, full_spec, minimal_spec


def simulator_verdict(sim: SimulatorSpec) -> int | str:
    """llmsim's startup on the operator's models.yml: the engine's KV blocks, or its config error."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "models.yml"
        path.write_text(models_yaml(sim))
        try:
            runtime = build_runtime(path)
        except ConfigError as exc:
            return str(exc)
    engine = runtime.state.models[sim.model["name"]].engine
    assert isinstance(engine, SchedulerEngine)
    return engine.num_kv_blocks


def operator_verdict(spec: dict[str, Any]) -> int | str:
    try:
        sim = parse_spec("sim", NAMESPACE, spec)
    except InvalidSpec as exc:
        return str(exc)
    assert sim.kv_cache_blocks is not None
    return sim.kv_cache_blocks


def assert_agree(spec: dict[str, Any]) -> None:
    ours, theirs = operator_verdict(spec), simulator_verdict(resolve_spec("sim", NAMESPACE, spec))
    if isinstance(theirs, int):
        assert ours == theirs, f"llmsim starts with {theirs} blocks, the operator says {ours!r}"
    else:
        assert isinstance(ours, str), f"the operator accepts ({ours} blocks) what llmsim refuses: {theirs}"


L4_8B = {"model": {"name": "m", "profile": "llama-3.1-8b"}, "hardware": {"profile": "l4-24gb"}}


@pytest.mark.parametrize(
    "spec",
    [
        minimal_spec(),
        full_spec(),
        # weights (70.6 GB) larger than 0.9 x 24 GiB
        {"model": {"name": "m", "profile": "llama-3.1-70b-fp8"}, "hardware": {"profile": "l4-24gb"}},
        # the profile's 131,072-token context needs more than the 3,401 blocks an L4 leaves
        L4_8B,
        # 3,401 blocks, block 0 vLLM's null block: 3,400 x 16 = 54,400 usable tokens
        L4_8B | {"model": {"name": "m", "profile": "llama-3.1-8b", "contextLength": 54400}},
        L4_8B | {"model": {"name": "m", "profile": "llama-3.1-8b", "contextLength": 54401}},
        # no profile and no contextLength: both sides fall back to the same default
        {
            "model": {"name": "m", "parametersBillions": 7, "kvBytesPerToken": 2_000_000},
            "hardware": {"hbmGiB": 24, "memoryBandwidthGBps": 300, "peakTFLOPS": 121},
        },
    ],
    ids=[
        "minimal",
        "full",
        "weights-too-big",
        "context-too-long",
        "context-just-fits",
        "context-one-too-many",
        "default-context",
    ],
)
def test_operator_and_simulator_agree(spec: dict[str, Any]) -> None:
    assert_agree(spec)


def test_the_cases_above_cover_both_verdicts() -> None:
    # Guards the agreement test against passing vacuously: some cases are refused, some accepted.
    assert isinstance(operator_verdict(L4_8B), str)
    assert operator_verdict(L4_8B | {"model": {"name": "m", "profile": "llama-3.1-8b", "contextLength": 54400}}) == 3401


explicit_specs = st.fixed_dictionaries(
    {
        "model": st.fixed_dictionaries(
            {
                "name": st.just("m"),
                "parametersBillions": st.floats(0.1, 120, allow_nan=False),
                "kvBytesPerToken": st.integers(1024, 1_048_576),
            },
            optional={
                "bytesPerParameter": st.sampled_from([0.5, 1, 2, 4]),
                "contextLength": st.integers(256, 262_144),
            },
        ),
        "hardware": st.fixed_dictionaries(
            {
                "hbmGiB": st.floats(4, 200, allow_nan=False),
                "memoryBandwidthGBps": st.just(1000),
                "peakTFLOPS": st.just(100),
            }
        ),
        "scheduler": st.fixed_dictionaries(
            {},
            optional={
                "blockSize": st.sampled_from([1, 8, 16, 32, 128]),
                "gpuMemoryUtilization": st.floats(0.05, 1.0, allow_nan=False),
            },
        ),
    }
)
profile_specs = st.fixed_dictionaries(
    {
        "model": st.fixed_dictionaries(
            {
                "name": st.just("m"),
                "profile": st.sampled_from(["llama-3.1-8b", "qwen2.5-0.5b", "llama-2-13b", "mistral-7b"]),
            },
            optional={"contextLength": st.integers(256, 262_144)},
        ),
        "hardware": st.fixed_dictionaries(
            {"profile": st.sampled_from(["h100-80gb", "a100-40gb", "l4-24gb", "a10g-24gb"])}
        ),
    }
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.one_of(explicit_specs, profile_specs))
def test_operator_and_simulator_agree_on_any_sizes(spec: dict[str, Any]) -> None:
    assert_agree(spec)
