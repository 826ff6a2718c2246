"""Spec parsing: the CRD's defaults, the CEL rules re-checked in Python, profiles and KV-cache capacity."""

from __future__ import annotations

from typing import Any

import pytest

from llmsim_operator import crd
from llmsim_operator.spec import CUSTOM_HARDWARE, InvalidSpec, parse_spec
from tests.operator.builders import NAMESPACE, full_spec, minimal_spec


def parse(spec: dict[str, Any], name: str = "llama") -> Any:
    return parse_spec(name, NAMESPACE, spec)


def test_defaults_come_from_the_crd_schema() -> None:
    sim = parse(minimal_spec())
    assert sim.engine == "scheduler"
    assert sim.spec["replicas"] == 1
    assert sim.spec["hardware"] == {"profile": "h100-80gb"}
    # default: {} on the section cascades into its properties' defaults (llmsim's, from its models.yml schema)
    assert sim.spec["scheduler"] == {
        "blockSize": 16,
        "gpuMemoryUtilization": 0.9,
        "watermark": 0.0,
        "enablePrefixCaching": True,
        "asyncScheduling": True,
    }
    assert sim.spec["service"] == {"type": "ClusterIP", "port": 8000}
    assert sim.spec["monitoring"] == {"serviceMonitor": {"enabled": False, "interval": "30s"}}
    assert sim.spec["autoscaling"] == {"external": False}
    assert sim.hardware_name == "h100-80gb"
    assert not sim.custom_hardware


def test_explicit_values_are_not_overwritten_by_defaults() -> None:
    spec = minimal_spec() | {"replicas": 0, "scheduler": {"blockSize": 32}}
    sim = parse(spec)
    assert sim.spec["replicas"] == 0
    assert sim.spec["scheduler"]["blockSize"] == 32
    assert sim.spec["scheduler"]["gpuMemoryUtilization"] == 0.9


def test_kv_cache_blocks_design_notes_example() -> None:
    # design-notes.md: 80 GiB, 90 %, 6.74 B fp16 (13.48 GB), 512 KiB/token -> 7,609 blocks of 16.
    sim = parse({"model": {"name": "m", "profile": "llama-2-7b"}, "hardware": {"profile": "a100-80gb"}})
    assert sim.kv_cache_blocks == 7609


def test_kv_cache_blocks_explicit_everything() -> None:
    sim = parse(full_spec())
    usable = 48 * 2**30 * 0.85
    weights = 13.0e9 * 1
    expected = int((usable - weights) // (409600 * 32))
    assert expected == 2350  # hand check: 30,808,666,419 B / 13,107,200 B per block
    assert sim.kv_cache_blocks == expected
    assert sim.custom_hardware
    assert sim.hardware_name == CUSTOM_HARDWARE


def test_explicit_hardware_figures_override_the_profile() -> None:
    spec = minimal_spec() | {"hardware": {"profile": "h100-80gb", "hbmGiB": 40}}
    sim = parse(spec)
    assert sim.custom_hardware
    assert sim.hardware.hbm_gib == 40
    assert sim.hardware.memory_bandwidth_gbps == 3350  # the h100-80gb datasheet figure, from hardware.yml


def test_fixed_engine_needs_no_model_size() -> None:
    sim = parse({"model": {"name": "m"}, "engine": "fixed", "latency": {"itlMs": 15}})
    assert sim.kv_cache_blocks is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"model": {"name": "m"}}, crd.RULE_SCHEDULER_MODEL.message),
        ({"model": {"name": "m", "parametersBillions": 7}}, crd.RULE_SCHEDULER_MODEL.message),
        (minimal_spec() | {"hardware": {"hbmGiB": 24, "peakTFLOPS": 100}}, crd.RULE_HARDWARE.message),
        (
            minimal_spec() | {"responses": {"inline": "x", "configMapRef": {"name": "r"}}},
            crd.RULE_RESPONSES.message,
        ),
        (
            minimal_spec() | {"podDisruptionBudget": {"enabled": True, "maxUnavailable": 1, "minAvailable": 1}},
            crd.RULE_DISRUPTION_BUDGET.message,
        ),
        ({"model": {"name": "m", "profile": "gpt-5"}}, "unknown model profile 'gpt-5'"),
        (minimal_spec() | {"hardware": {"profile": "tpu-v9"}}, "unknown hardware profile 'tpu-v9'"),
        ({"model": {}}, "model.name is required"),
    ],
)
def test_invalid_specs_are_reported(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse(spec)
    assert message in str(info.value)


@pytest.mark.parametrize("name", ["1llama", "Llama", "llama.v2", "a" * 64, "llama-"])
def test_names_that_cannot_name_a_service_are_rejected(name: str) -> None:
    with pytest.raises(InvalidSpec, match="DNS-1035"):
        parse(minimal_spec(), name=name)


def test_weights_larger_than_memory_are_rejected() -> None:
    # llama-3.1-70b-fp8: 70.6 GB of weights; an L4 has 24 GiB x 0.9 = 23.2 GB usable.
    spec = {"model": {"name": "m", "profile": "llama-3.1-70b-fp8"}, "hardware": {"profile": "l4-24gb"}}
    with pytest.raises(InvalidSpec, match=r"weights \(70.60 GB\) leave no room"):
        parse(spec)


def test_a_context_that_does_not_fit_in_the_kv_cache_is_rejected() -> None:
    # llama-3.1-8b on an L4: (24 GiB x 0.9 - 8.03e9 x 2 B) / (131,072 B x 16) = 3,401.2 -> 3,401 blocks,
    # one of them vLLM's null block: 3,400 x 16 = 54,400 usable tokens, less than the profile's
    # 131,072-token context: llmsim (like vLLM) refuses to start.
    spec = {"model": {"name": "m", "profile": "llama-3.1-8b"}, "hardware": {"profile": "l4-24gb"}}
    with pytest.raises(InvalidSpec, match=r"context_length 131072 does not fit in the KV cache \(3401 blocks"):
        parse(spec)
    # The same model with a context that fits is fine, and the fixed engine does not simulate the cache.
    fits = parse(spec | {"model": {"name": "m", "profile": "llama-3.1-8b", "contextLength": 54400}})
    assert (fits.kv_cache_blocks, fits.context_length, fits.capacity_problem) == (3401, 54400, None)
    fixed = parse(spec | {"engine": "fixed"})
    assert fixed.capacity_problem is not None
    assert fixed.kv_cache_blocks == 3401
