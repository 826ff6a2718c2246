"""KV-cache capacity: how many blocks the weights leave, and whether one full-length request fits."""

from __future__ import annotations

import math

from llmsim_capacity.defaults import GIB


class CapacityError(ValueError):
    """The model cannot run on the GPU as configured; the message says why and what to change."""


def num_kv_blocks(
    *,
    hbm_bytes: float,
    gpu_memory_utilization: float,
    weight_bytes: float,
    kv_bytes_per_token: float,
    block_size: int,
) -> int:
    """KV blocks left after the weights: floor((HBM x utilisation - weights) / bytes per block).

    This is vLLM's ``num_gpu_blocks``; block 0 of them is vLLM's null block, so requests can use one
    fewer. Raises :class:`CapacityError` when the weights leave no room for the null block and one more.
    """
    usable = hbm_bytes * gpu_memory_utilization - weight_bytes
    block_bytes = kv_bytes_per_token * block_size
    blocks = math.floor(usable / block_bytes)
    if blocks <= 1:
        raise CapacityError(
            f"the weights ({weight_bytes / 1e9:.2f} GB) leave no room for the KV cache in "
            f"{gpu_memory_utilization:g} x {hbm_bytes / GIB:g} GiB of HBM "
            f"(one block of {block_size} tokens needs {block_bytes:.0f} B)"
        )
    return blocks


def check_context_fits(*, num_blocks: int, block_size: int, context_length: int) -> None:
    """Refuse a cache that cannot hold one request of the full context length, as vLLM does at startup.

    Without this a lone sequence could outgrow the whole cache and never be scheduled again. The
    null block is not counted: requests can use ``num_blocks - 1`` blocks.
    """
    capacity = (num_blocks - 1) * block_size
    if context_length > capacity:
        raise CapacityError(
            f"context_length {context_length} does not fit in the KV cache ({num_blocks} blocks of "
            f"{block_size}, one of them vLLM's null block = {capacity} usable tokens); "
            "raise gpu_memory_utilization or lower context_length"
        )
