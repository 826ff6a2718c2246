"""Pydantic models of models.yml. Units are in the field names; bandwidth is in GB/s (1e9 B/s)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

import llmsim_capacity

PositiveFloat = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]

#: Engine names users may write; runtime.py maps each to its class.
EngineName = Literal["instant", "fixed", "scheduler"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HardwareProfile(_Section):
    """One simulated GPU (datasheet figures)."""

    hbm_gib: PositiveFloat
    memory_bandwidth_gbps: PositiveFloat
    # Dense FP16/BF16 tensor throughput, no sparsity.
    peak_tflops: PositiveFloat
    description: str = ""


class Weights(_Section):
    parameters_billions: PositiveFloat
    bytes_per_parameter: PositiveFloat = llmsim_capacity.DEFAULT_BYTES_PER_PARAMETER

    @property
    def bytes(self) -> float:
        return self.parameters_billions * 1e9 * self.bytes_per_parameter


class KVCache(_Section):
    # layers x kv_heads x head_dim x 2 (K and V) x dtype bytes
    bytes_per_token: PositiveInt
    block_size: PositiveInt = llmsim_capacity.DEFAULT_BLOCK_SIZE
    gpu_memory_utilization: Fraction = llmsim_capacity.DEFAULT_GPU_MEMORY_UTILIZATION
    # Fraction of blocks kept free when admitting (vLLM V1 default 0.0; V0 used 0.01).
    watermark: Annotated[float, Field(ge=0, lt=1)] = 0.0
    enable_prefix_caching: bool = False


class SchedulerSection(_Section):
    # None: vLLM's default for the GPU size (>= 70 GiB: 8192 / 1024, else 2048 / 256).
    max_batch_tokens: PositiveInt | None = None
    max_num_sequences: PositiveInt | None = None
    # Waiting requests beyond this get 503 (None: unbounded, as vLLM by default).
    max_waiting_requests: PositiveInt | None = None


class Latency(_Section):
    # scheduler engine: fixed cost added to every step (kernel launches, sampling, ...).
    step_overhead_ms: Annotated[float, Field(ge=0)] = 0.0
    # fixed engine: TTFT = ttft_overhead_ms + prompt_tokens / prefill_tokens_per_second.
    ttft_overhead_ms: Annotated[float, Field(ge=0)] = 0.0
    prefill_tokens_per_second: PositiveFloat | None = None
    # fixed engine: time between two output tokens.
    itl_ms: Annotated[float, Field(ge=0)] = 0.0


class Efficiency(_Section):
    """Achieved fraction of peak (calibration knobs of the roofline)."""

    compute: Fraction = 1.0
    memory: Fraction = 1.0


class ModelConfig(_Section):
    name: Annotated[str, Field(min_length=1)]
    engine: EngineName
    # Name of a built-in model profile (weights, kv_cache, context_length); explicit fields win.
    profile: str | None = None
    hardware: str | None = None
    context_length: PositiveInt = llmsim_capacity.DEFAULT_CONTEXT_LENGTH
    tokenizer: Literal["regex"] = "regex"
    weights: Weights | None = None
    kv_cache: KVCache | None = None
    scheduler: SchedulerSection | None = None
    latency: Latency | None = None
    efficiency: Efficiency = Efficiency()
    # Also expose deprecated metric names some routers still read (vllm:gpu_cache_usage_perc, ...).
    legacy_metrics: bool = False


class ModelsConfig(_Section):
    version: Literal[1] = 1
    hardware: dict[str, HardwareProfile] = {}
    models: Annotated[list[ModelConfig], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique_names(self) -> ModelsConfig:
        seen: set[str] = set()
        for m in self.models:
            if m.name in seen:
                raise ValueError(f"duplicate model name '{m.name}'")
            seen.add(m.name)
        return self

    def model(self, name: str) -> ModelConfig:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)
