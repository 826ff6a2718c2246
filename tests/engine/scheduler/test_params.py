"""KV capacity from the GPU and model figures, and parameter validation."""

from __future__ import annotations

import math

import pytest

from llmsim.engine.scheduler import GpuSpec, ModelSpec, SchedulerParams, check_context_fits, num_kv_blocks

from .builders import HBM, KV_PER_TOKEN, SEED_GPU, SEED_MODEL, WEIGHTS, seed_params


def test_seed_example_gives_7609_blocks() -> None:
    # (80 GiB x 0.9 - 13.48 GB) / (512 KiB x 16) = 63,829,411,328 / 8,388,608 = 7,609.06
    expected = math.floor((HBM * 0.9 - WEIGHTS) / (KV_PER_TOKEN * 16))
    assert expected == 7609
    assert num_kv_blocks(seed_params()) == expected
    # About 121,700 tokens: (80 GiB x 0.9 - 13.5 GB of weights) / 512 KiB per token.
    assert num_kv_blocks(seed_params()) * 16 == pytest.approx(121_700, rel=0.001)


def test_blocks_scale_with_utilisation_and_block_size() -> None:
    assert num_kv_blocks(seed_params(gpu_memory_utilization=0.5)) == math.floor(
        (HBM * 0.5 - WEIGHTS) / (KV_PER_TOKEN * 16)
    )
    assert num_kv_blocks(seed_params(block_size=32)) == math.floor((HBM * 0.9 - WEIGHTS) / (KV_PER_TOKEN * 32))


def test_weights_that_do_not_fit_are_refused() -> None:
    big = ModelSpec(num_parameters=70e9, weight_bytes=140e9, kv_bytes_per_token=KV_PER_TOKEN)
    params = SchedulerParams(gpu=SEED_GPU, model=big, context_length=4096)
    with pytest.raises(ValueError, match=r"weights \(140.00 GB\) leave no room"):
        num_kv_blocks(params)


@pytest.mark.parametrize(
    "override",
    [
        {"block_size": 0},
        {"max_batch_tokens": 0},
        {"max_num_sequences": 0},
        {"context_length": 0},
        {"watermark": 1.0},
        {"watermark": -0.1},
        {"gpu_memory_utilization": 0.0},
        {"compute_efficiency": 1.5},
        {"step_overhead_s": -1.0},
        {"step_overhead_per_sequence_s": -1e-3},
        {"request_overhead_s": -1e-3},
        {"max_waiting_requests": 0},
    ],
)
def test_invalid_numbers_are_refused(override: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        seed_params(**override)


def test_context_must_fit_in_the_usable_blocks() -> None:
    # Block 0 is vLLM's null block: one request may hold at most blocks - 1 of them.
    blocks = num_kv_blocks(seed_params())
    check_context_fits(seed_params(context_length=(blocks - 1) * 16), blocks)
    with pytest.raises(ValueError, match="does not fit in the KV cache"):
        check_context_fits(seed_params(context_length=(blocks - 1) * 16 + 1), blocks)


def test_specs_are_frozen() -> None:
    with pytest.raises(AttributeError):
        SEED_GPU.hbm_bytes = 1.0  # type: ignore[misc]
    assert GpuSpec(1.0, 2.0, 3.0) == GpuSpec(1.0, 2.0, 3.0)
    assert SEED_MODEL.weight_bytes == 2 * SEED_MODEL.num_parameters
