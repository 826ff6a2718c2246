"""Labels of vllm:cache_config_info, formatted as vLLM formats its CacheConfig fields."""

from __future__ import annotations


def cache_config_labels(
    *,
    block_size: int,
    num_gpu_blocks: int,
    gpu_memory_utilization: float,
    enable_prefix_caching: bool,
    cache_dtype: str = "auto",
) -> dict[str, str]:
    """The fields endpoint pickers read (``block_size``, ``num_gpu_blocks``) and a few more.

    vLLM renders each field with ``str()``: ``"16"``, ``"0.9"``, ``"True"``.
    """
    return {
        "block_size": str(block_size),
        "num_gpu_blocks": str(num_gpu_blocks),
        "gpu_memory_utilization": str(gpu_memory_utilization),
        "enable_prefix_caching": str(enable_prefix_caching),
        "cache_dtype": cache_dtype,
    }
