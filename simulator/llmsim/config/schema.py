"""Pydantic models of models.yml. Units are in the field names; bandwidth is in GB/s (1e9 B/s)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

import llmsim_capacity
from llmsim.errors import entry_label

PositiveFloat = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]

#: Engine names users may write; runtime.py maps each to its class.
EngineName = Literal["instant", "fixed", "scheduler"]

#: Fault kinds, in the order a request's draw walks the rates (see docs/faults.md).
FAULT_KINDS = (
    "rate_limit",
    "server_error",
    "unavailable",
    "bad_request",
    "abort_mid_stream",
    "stall",
    "slow",
    "crash",
)
Rate = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
#: Bounds of a fault's settings: past them a stall or a slowdown would outlive any client.
MAX_STALL_MS = 3_600_000.0
MAX_SLOW_FACTOR = 1000.0


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
    # Reuse full blocks across requests (vLLM V1's default: on).
    enable_prefix_caching: bool = True


class SchedulerSection(_Section):
    # None: vLLM's default for the GPU size (>= 70 GiB: 8192 / 1024, else 2048 / 256).
    max_batch_tokens: PositiveInt | None = None
    max_num_sequences: PositiveInt | None = None
    # Waiting requests beyond this get 503 (None: unbounded, as vLLM by default).
    max_waiting_requests: PositiveInt | None = None
    # vLLM's default since late 2025 (vllm-project/vllm#27614): step k+1 is scheduled while step k runs (one step of admission lookahead).
    async_scheduling: bool = True


class Latency(_Section):
    # scheduler engine: fixed cost added to every step (kernel launches, sampling, ...).
    step_overhead_ms: Annotated[float, Field(ge=0)] = 0.0
    # scheduler engine: added to a step for every sequence in its batch (scheduling, sampling,
    # output processing: per-sequence costs the roofline leaves out).
    step_overhead_per_sequence_ms: Annotated[float, Field(ge=0)] = 0.0
    # scheduler engine: time from a request's arrival until the scheduler sees it (vLLM's API
    # server: HTTP, chat template, tokenization, the hand-off to the engine core).
    request_overhead_ms: Annotated[float, Field(ge=0)] = 0.0
    # fixed engine: TTFT = ttft_overhead_ms + prompt_tokens / prefill_tokens_per_second.
    ttft_overhead_ms: Annotated[float, Field(ge=0)] = 0.0
    prefill_tokens_per_second: PositiveFloat | None = None
    # fixed engine: time between two output tokens.
    itl_ms: Annotated[float, Field(ge=0)] = 0.0


class Efficiency(_Section):
    """Achieved fraction of peak (calibration knobs of the roofline)."""

    compute: Fraction = 1.0
    memory: Fraction = 1.0


class Embeddings(_Section):
    """The model answers /v1/embeddings with vectors of this many dimensions."""

    dimensions: PositiveInt


class FaultRates(_Section):
    """Probability of each fault per request; one draw per request picks at most one fault."""

    rate_limit: Rate = 0.0
    server_error: Rate = 0.0
    unavailable: Rate = 0.0
    bad_request: Rate = 0.0
    abort_mid_stream: Rate = 0.0
    stall: Rate = 0.0
    slow: Rate = 0.0
    crash: Rate = 0.0

    @model_validator(mode="after")
    def _one_fault_per_request(self) -> FaultRates:
        total = sum(getattr(self, kind) for kind in FAULT_KINDS)
        # A small tolerance: 0.1 + 0.2 + 0.7 is 1.0000000000000002 in floats.
        if total > 1 + 1e-9:
            raise ValueError(f"the rates add up to {total:g}; at most 1 (a request gets at most one fault)")
        return self


class Faults(_Section):
    """Fault injection of one model (``faults:``); the same shape is PUT to ``/admin/faults``."""

    # Faults are drawn from (seed, request id or request number): the same seed, the same faults.
    seed: Annotated[int, Field(ge=-(2**63), lt=2**64)] = 0
    rates: FaultRates = FaultRates()
    # ``stall``: the pause before the drawn token. At most an hour (a gateway's timeouts are shorter).
    stall_ms: Annotated[float, Field(ge=0, le=MAX_STALL_MS, allow_inf_nan=False)] = 1000.0
    # ``slow``: the request's whole timeline (TTFT and every gap) is stretched by this factor.
    slow_factor: Annotated[float, Field(ge=1, le=MAX_SLOW_FACTOR, allow_inf_nan=False)] = 2.0
    # Obey the ``x-llmsim-fault`` request header (off: a production-like fleet ignores client headers).
    header_override: bool = False

    @property
    def enabled(self) -> bool:
        """Whether any request can get a fault (else the request path skips fault injection)."""
        return self.header_override or any(getattr(self.rates, kind) > 0 for kind in FAULT_KINDS)


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
    context_length: PositiveInt = llmsim_capacity.DEFAULT_CONTEXT_LENGTH
    # "regex" (built in) or {path: tokenizer.json, chat_template: chatml | llama-3}.
    tokenizer: Literal["regex"] | TokenizerFile = "regex"
    weights: Weights | None = None
    kv_cache: KVCache | None = None
    scheduler: SchedulerSection | None = None
    latency: Latency | None = None
    efficiency: Efficiency = Efficiency()
    # Also expose deprecated metric names some routers still read (vllm:gpu_cache_usage_perc, ...).
    legacy_metrics: bool = False
    # Set: the model also serves /v1/embeddings.
    embeddings: Embeddings | None = None
    faults: Faults = Faults()
    lora: Lora | None = None
    kv_events: KVEvents | None = None
    # vLLM's --enable-prompt-tokens-details (default off): usage.prompt_tokens_details.cached_tokens.
    enable_prompt_tokens_details: bool = False


class ModelsConfig(_Section):
    version: Literal[1] = 1
    # Simulated model load: the server binds at once, /health answers 503 for this long.
    startup_seconds: Annotated[float, Field(ge=0)] = 0.0
    hardware: dict[str, HardwareProfile] = {}
    # Names are unique (the loader checks: a check across entries has no field of its own).
    models: Annotated[list[ModelConfig], Field(min_length=1)]
    # Set by the loader: where each scheduler model's timing knobs came from (not a models.yml field).
    _timing_sources: dict[str, dict[str, str]] = PrivateAttr(default_factory=dict)

    def timing_sources(self, name: str) -> dict[str, str]:
        """Where each timing knob of model ``name`` came from: "the file", calibration data, or a default.

        Empty for a model without the scheduler engine (it has no step cost), or one built in code.
        """
        return dict(self._timing_sources.get(name, {}))

    def model(self, name: str) -> ModelConfig:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)

    def entry_label(self, name: str) -> str:
        """How errors name the model: ``models[1] (name 'x')``."""
        index = next(i for i, m in enumerate(self.models) if m.name == name)
        return entry_label("models", index, "name", name)
