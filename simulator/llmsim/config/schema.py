"""Pydantic models of models.yml. Units are in the field names; bandwidth is in GB/s (1e9 B/s)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    bytes_per_parameter: PositiveFloat = 2.0

    @property
    def bytes(self) -> float:
        return self.parameters_billions * 1e9 * self.bytes_per_parameter


class KVCache(_Section):
    # layers x kv_heads x head_dim x 2 (K and V) x dtype bytes
    bytes_per_token: PositiveInt
    block_size: PositiveInt = 16
    gpu_memory_utilization: Fraction = 0.9
    # Fraction of blocks kept free when admitting (vLLM V1 default 0.0; V0 used 0.01).
    watermark: Annotated[float, Field(ge=0, lt=1)] = 0.0
    # Reuse full blocks across requests (vLLM V1's default: on).
    enable_prefix_caching: bool = True


class SchedulerSection(_Section):
    # None: vLLM's default for the GPU size (>= 70 GiB: 8192 / 1024, else 2048 / 256).
    max_batch_tokens: PositiveInt | None = None
    max_num_sequences: PositiveInt | None = None
    # Waiting requests beyond this get 503 (None: unbounded, as vLLM by default).
    max_waiting_requests: PositiveInt | None = None
    # vLLM 0.33+'s default: step k+1 is scheduled while step k runs (one step of admission lookahead).
    async_scheduling: bool = True


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


class KVEvents(_Section):
    """vLLM's ``--kv-events-config``: publish KV-cache events over ZMQ for KV-aware routers."""

    enable_kv_cache_events: bool = False
    # "tcp://*:5557" binds (a '*', '::', ipc:// or inproc:// endpoint binds); any other connects.
    endpoint: Annotated[str, Field(min_length=1)] = "tcp://*:5557"
    # ZMQ topic, vLLM's default "". {model} and {pod_ip} (env POD_IP) are filled in at startup,
    # e.g. "kv@{pod_ip}@{model}" as llm-d's indexer expects.
    topic: str = ""
    # Send high-water mark of the PUB socket (vLLM's hwm): beyond it ZMQ drops.
    hwm: PositiveInt = 100_000
    # "map": events as msgpack maps (vLLM since 2026-06, PR 42892); "array": the older positional
    # arrays that llm-d's indexer decoded before it learned maps.
    event_format: Literal["map", "array"] = "map"


class LoraAdapter(_Section):
    name: Annotated[str, Field(min_length=1)]
    # Where vLLM would load it from; part of every block hash (nothing is read).
    path: str = ""


class Lora(_Section):
    """vLLM's LoRA serving limits (--max-loras, --max-cpu-loras) and --lora-modules."""

    max_loras: PositiveInt = 1
    # None: max_loras (vLLM's default).
    max_cpu_loras: PositiveInt | None = None
    # Simulated time to load an adapter that is not among the max_cpu_loras resident ones.
    load_ms: Annotated[float, Field(ge=0)] = 0.0
    adapters: list[LoraAdapter] = []

    @model_validator(mode="after")
    def _check(self) -> Lora:
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(f"max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras}).")
        names = [a.name for a in self.adapters]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"duplicate adapter name '{name}'")
        return self


class TokenizerFile(_Section):
    """A Hugging Face tokenizer.json (relative paths: from the models.yml's folder)."""

    path: Annotated[str, Field(min_length=1)]
    chat_template: Literal["chatml", "llama-3"] = "chatml"


class ModelConfig(_Section):
    name: Annotated[str, Field(min_length=1)]
    engine: EngineName
    # Name of a built-in model profile (weights, kv_cache, context_length); explicit fields win.
    profile: str | None = None
    hardware: str | None = None
    context_length: PositiveInt = 32768
    # "regex" (built in) or {path: tokenizer.json, chat_template: chatml | llama-3}.
    tokenizer: Literal["regex"] | TokenizerFile = "regex"
    weights: Weights | None = None
    kv_cache: KVCache | None = None
    scheduler: SchedulerSection | None = None
    latency: Latency | None = None
    efficiency: Efficiency = Efficiency()
    # Also expose deprecated metric names some routers still read (vllm:gpu_cache_usage_perc, ...).
    legacy_metrics: bool = False
    lora: Lora | None = None
    kv_events: KVEvents | None = None
    # vLLM's --enable-prompt-tokens-details (default off): usage.prompt_tokens_details.cached_tokens.
    enable_prompt_tokens_details: bool = False


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
        adapters: set[str] = set()
        for m in self.models:
            for adapter in m.lora.adapters if m.lora is not None else ():
                # Requests name an adapter in "model", so names are one namespace.
                if adapter.name in seen:
                    raise ValueError(f"LoRA adapter '{adapter.name}' conflicts with a served base model")
                if adapter.name in adapters:
                    raise ValueError(f"LoRA adapter '{adapter.name}' is declared by two models")
                adapters.add(adapter.name)
        return self

    def model(self, name: str) -> ModelConfig:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)
