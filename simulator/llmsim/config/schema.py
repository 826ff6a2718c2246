"""Pydantic models of models.yml. Units are in the field names; bandwidth is in GB/s (1e9 B/s).

The one source of every models.yml field: its type, bounds, default and description. The operator's
CRD is generated from this schema (``make generate`` writes its JSON Schema, see
:mod:`llmsim.config.json_schema`), so a description here is also what ``kubectl explain`` shows.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

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

    hbm_gib: PositiveFloat = Field(description="GPU memory in GiB.")
    memory_bandwidth_gbps: PositiveFloat = Field(description="Memory bandwidth in GB/s (1e9 bytes/s).")
    peak_tflops: PositiveFloat = Field(description="Dense FP16/BF16 tensor throughput in TFLOPS (no sparsity).")
    interconnect_bandwidth_gbps: PositiveFloat | None = Field(
        default=None,
        description="GPU-to-GPU link bandwidth each way in GB/s, what tensor parallelism's all-reduces cross "
        "(NVLink 4: 450); unset: tensor_parallel_size must stay 1.",
    )
    interconnect_latency_us: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        default=None, description="Fixed cost of one all-reduce over the interconnect, in microseconds (unset: 0)."
    )
    description: str = ""


class Weights(_Section):
    parameters_billions: PositiveFloat = Field(
        description="Parameter count in billions (sets the weights' size in HBM)."
    )
    bytes_per_parameter: PositiveFloat = Field(
        default=llmsim_capacity.DEFAULT_BYTES_PER_PARAMETER,
        description="Bytes per weight: 2 for fp16/bf16, 1 for fp8 "
        f"(default: the profile's, else {llmsim_capacity.DEFAULT_BYTES_PER_PARAMETER:g}).",
    )

    active_parameters_billions: PositiveFloat | None = Field(
        default=None,
        description="Mixture of experts: parameters one token is multiplied by (shared layers and the routed "
        "experts), in billions; sets the FLOPs, while parameters_billions sets the memory (default: all).",
    )

    experts: Annotated[int, Field(ge=2)] | None = Field(
        default=None,
        description="Mixture of experts: routed experts a layer (config.json's num_local_experts). With "
        "experts_per_token, a step reads only the experts its tokens route to.",
    )
    experts_per_token: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="Mixture of experts: experts each token is routed to (config.json's num_experts_per_tok).",
    )

    @model_validator(mode="after")
    def _check(self) -> Weights:
        if self.active_parameters_billions is not None and self.active_parameters_billions > self.parameters_billions:
            raise ValueError(
                f"active_parameters_billions ({self.active_parameters_billions:g}) must be <= parameters_billions "
                f"({self.parameters_billions:g})"
            )
        if (self.experts is None) != (self.experts_per_token is None):
            raise ValueError("experts and experts_per_token go together")
        if self.experts is not None and self.experts_per_token is not None:
            if self.experts_per_token >= self.experts:
                raise ValueError(f"experts_per_token ({self.experts_per_token}) must be < experts ({self.experts})")
            active = self.active_parameters_billions
            if active is None or active >= self.parameters_billions:
                raise ValueError("a mixture of experts needs active_parameters_billions below parameters_billions")
        return self

    @property
    def bytes(self) -> float:
        return self.parameters_billions * 1e9 * self.bytes_per_parameter

    @property
    def active_parameters(self) -> float:
        """Parameters one token's forward pass multiplies by."""
        return (self.active_parameters_billions or self.parameters_billions) * 1e9

    @property
    def expert_bytes(self) -> float:
        """Bytes of all the routed experts' weights (0 for a dense model). A token reads the
        shared weights and ``k`` of ``E`` experts: total - active = experts x (1 - k/E)."""
        if self.experts is None or self.experts_per_token is None or self.active_parameters_billions is None:
            return 0.0
        routed = (self.parameters_billions - self.active_parameters_billions) / (
            1 - self.experts_per_token / self.experts
        )
        return routed * 1e9 * self.bytes_per_parameter


class Architecture(_Section):
    """The model's shape, with its Hugging Face config.json names (what tensor parallelism needs)."""

    num_hidden_layers: PositiveInt = Field(description="Transformer layers (two all-reduces each under TP).")
    hidden_size: PositiveInt = Field(description="Width of the activations an all-reduce sums.")
    num_attention_heads: PositiveInt = Field(description="Query heads (tensor_parallel_size must divide them).")
    num_key_value_heads: PositiveInt = Field(
        description="KV heads: split across tensor-parallel ranks, replicated once there are more ranks than heads."
    )


class KVCache(_Section):
    bytes_per_token: PositiveInt = Field(
        description="KV-cache bytes per token: layers x KV heads x head_dim x 2 (K and V) x dtype bytes."
    )
    block_size: PositiveInt = Field(
        default=llmsim_capacity.DEFAULT_BLOCK_SIZE, description="Tokens per KV-cache block."
    )
    gpu_memory_utilization: Fraction = Field(
        default=llmsim_capacity.DEFAULT_GPU_MEMORY_UTILIZATION,
        description="Fraction of GPU memory for weights and KV cache (vLLM's gpu_memory_utilization).",
    )
    watermark: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.0,
        description="Fraction of KV blocks kept free when admitting new requests (vLLM V1's default 0; V0 used 0.01).",
    )
    enable_prefix_caching: bool = Field(
        default=True,
        description="Reuse cached KV blocks of shared prompt prefixes (vLLM's enable_prefix_caching; on by default, "
        "as in vLLM V1).",
    )


class SchedulerSection(_Section):
    # None: vLLM's default for the GPU size (>= 70 GiB: 8192 / 1024, else 2048 / 256).
    max_batch_tokens: PositiveInt | None = Field(
        default=None, description="Token budget of one step (vLLM's max_num_batched_tokens; default by GPU size)."
    )
    max_num_sequences: PositiveInt | None = Field(
        default=None, description="Sequences running at once (vLLM's max_num_seqs; default by GPU size)."
    )
    max_waiting_requests: PositiveInt | None = Field(
        default=None, description="Waiting requests beyond this get HTTP 503 (default: unbounded, as vLLM)."
    )
    # vLLM's default since late 2025 (vllm-project/vllm#27614): one step of admission lookahead.
    async_scheduling: bool = Field(
        default=True,
        description="Schedule step k+1 while step k runs (vLLM's async_scheduling; on by default, as in vLLM since "
        "late 2025).",
    )


class Latency(_Section):
    step_overhead_ms: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="Scheduler engine: cost added to every step (kernel launches, sampling, ...) (ms)."
    )
    step_overhead_per_sequence_ms: Annotated[float, Field(ge=0)] = Field(
        default=0.0,
        description="Scheduler engine: cost added to a step for each sequence in its batch (scheduling, sampling, "
        "output processing: per-sequence costs the roofline leaves out) (ms).",
    )
    request_overhead_ms: Annotated[float, Field(ge=0)] = Field(
        default=0.0,
        description="Scheduler engine: time from a request's arrival to the scheduler (HTTP, chat template, "
        "tokenization, the hand-off to the engine core) (ms).",
    )
    # TTFT = ttft_overhead_ms + prompt_tokens / prefill_tokens_per_second.
    ttft_overhead_ms: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="Fixed engine: TTFT before prefill (ms)."
    )
    prefill_tokens_per_second: PositiveFloat | None = Field(
        default=None,
        description="Fixed engine: prompt tokens processed per second (adds to TTFT; default: no prefill time).",
    )
    itl_ms: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="Fixed engine: time between output tokens (ms)."
    )


class Efficiency(_Section):
    """Achieved fraction of peak (calibration knobs of the roofline)."""

    compute: Fraction = Field(default=1.0, description="Fraction of peak TFLOPS achieved.")
    memory: Fraction = Field(default=1.0, description="Fraction of peak memory bandwidth achieved.")


class Embeddings(_Section):
    """The model answers /v1/embeddings with vectors of this many dimensions."""

    dimensions: PositiveInt


class FaultRates(_Section):
    """Probability of each fault per request; one draw per request picks at most one fault."""

    rate_limit: Rate = Field(default=0.0, description="429 with Retry-After.")
    server_error: Rate = Field(default=0.0, description="500.")
    unavailable: Rate = Field(default=0.0, description="503 with Retry-After.")
    bad_request: Rate = Field(default=0.0, description="400.")
    abort_mid_stream: Rate = Field(
        default=0.0, description="The connection drops after some tokens (a truncated response)."
    )
    stall: Rate = Field(default=0.0, description="The stream pauses `stall_ms` before one of its tokens.")
    slow: Rate = Field(default=0.0, description="The request's whole timeline is stretched by `slow_factor`.")
    crash: Rate = Field(default=0.0, description="The simulator process exits (a pod restarts).")

    @model_validator(mode="after")
    def _one_fault_per_request(self) -> FaultRates:
        total = sum(getattr(self, kind) for kind in FAULT_KINDS)
        # A small tolerance: 0.1 + 0.2 + 0.7 is 1.0000000000000002 in floats.
        if total > 1 + 1e-9:
            raise ValueError(f"the rates add up to {total:g}; at most 1 (a request gets at most one fault)")
        return self


def _int64_schema(schema: dict[str, Any]) -> None:
    """A 64-bit integer's JSON Schema says ``format: int64`` rather than its bounds: the bounds are
    not floats, and Kubernetes 1.20 reads 2**63 - 1 back as -2**63 and then refuses the CRD."""
    for bound in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        schema.pop(bound, None)
    schema["format"] = "int64"


class FaultState(_Section):
    """One fault state: a phase's ``set``, and what ``PUT /admin/faults`` takes."""

    # Faults are drawn from (seed, request id or request number): the same seed, the same faults.
    seed: Annotated[int, Field(ge=-(2**63), lt=2**63)] = Field(
        default=0, description="Seed of the draws (a 64-bit integer).", json_schema_extra=_int64_schema
    )
    rates: FaultRates = Field(
        default=FaultRates(), description="Probability of each fault per request (0-1; together at most 1)."
    )
    # At most an hour, and a finite factor: a gateway's timeouts are shorter, and an unbounded value
    # would hold a request (and its memory) for ever.
    stall_ms: Annotated[float, Field(ge=0, le=MAX_STALL_MS, allow_inf_nan=False)] = Field(
        default=1000.0, description="Length of a stall (ms, at most an hour)."
    )
    slow_factor: Annotated[float, Field(ge=1, le=MAX_SLOW_FACTOR, allow_inf_nan=False)] = Field(
        default=2.0, description="Latency multiplier of slow (TTFT and every gap between tokens; at most 1000)."
    )
    header_override: bool = Field(
        default=False,
        description="Obey the x-llmsim-fault request header (one fault forced on one request). Off: clients cannot "
        "trigger faults, as in a production-like fleet.",
    )
    # A replica whose health check fails while it still answers: what a gateway that routes on
    # health checks alone (vllm-router) must notice, and no request-level fault can show it.
    unhealthy: bool = Field(
        default=False,
        description="/health answers 503 (requests are still served): a failing health check, e.g. in a "
        "timeline phase's set.",
    )

    @property
    def enabled(self) -> bool:
        """Whether any request can get a fault (else the request path skips fault injection)."""
        return self.header_override or any(getattr(self.rates, kind) > 0 for kind in FAULT_KINDS)


#: ``at`` of a timeline phase: seconds, or a duration such as ``500ms``, ``30s``, ``1.5m``, ``1h``.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
#: A timeline runs at most a day: longer is a typo (an ``h`` for an ``s``).
MAX_TIMELINE_S = 86_400.0


def duration_seconds(value: object) -> float:
    """Seconds of a number or a duration string (``1m30s``); ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError("expected seconds or a duration such as 30s")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(DURATION_PATTERN, text):
            return sum(float(n) * _DURATION_UNITS[u] for n, _, u in re.findall(r"([0-9]+(\.[0-9]+)?)(ms|s|m|h)", text))
        try:
            return float(text)
        except ValueError:
            pass
    raise ValueError(f"expected seconds or a duration such as 30s, 500ms, 1m30s; got {value!r}")


def _seconds_schema(schema: dict[str, Any]) -> None:
    """JSON Schema's names for the bounds: behind a BeforeValidator pydantic writes its own ``ge``/``le``."""
    for ours, theirs in (("ge", "minimum"), ("le", "maximum")):
        if ours in schema:
            schema[theirs] = schema.pop(ours)


Seconds = Annotated[
    float,
    BeforeValidator(duration_seconds),
    Field(ge=0, le=MAX_TIMELINE_S, allow_inf_nan=False, json_schema_extra=_seconds_schema),
]


class FaultPhase(_Section):
    """One step of a fault timeline: from ``at`` on, ``replicas`` get ``set`` and the others the base faults."""

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")] = Field(
        description="The phase's name (label ``phase`` of llmsim_fault_phase; unique in the timeline)."
    )
    at: Seconds = Field(
        description="When the phase starts, in seconds from the timeline's start (models.yml also takes a "
        "duration: 30s, 500ms, 1m30s).",
    )
    # Two fields, not one that is a list or a count: a CRD's structural schema has one type per field.
    replicas: list[Annotated[int, Field(ge=0, description="A replica's ordinal (0-based).")]] | None = Field(
        default=None,
        description="The ordinals of the replicas that get ``set`` (left out, with no count: every replica).",
    )
    count: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="How many replicas get ``set``; which ones is a seeded draw, the same on every replica.",
    )
    set: FaultState | None = Field(
        default=None,
        description="The fault state of the chosen replicas (a faults entry; its seed defaults to the base's).",
    )
    clear: bool = Field(default=False, description="Every replica goes back to the base faults.")

    @model_validator(mode="after")
    def _set_or_clear(self) -> FaultPhase:
        if self.clear == (self.set is not None):
            raise ValueError("a phase takes either set or clear: true")
        if self.replicas is not None and self.count is not None:
            raise ValueError("a phase takes either replicas (ordinals) or count, not both")
        if self.clear and (self.replicas is not None or self.count is not None):
            raise ValueError("clear applies to every replica: leave replicas and count out")
        return self


class FaultTimeline(_Section):
    """A schedule of fault states over time (``faults.timeline``), the same on every replica of a fleet."""

    start: Literal["process", "admin"] = Field(
        default="process",
        description="When time 0 is: process, at startup (or when PUT to /admin/timeline); admin, at "
        "POST /admin/timeline/start (a test starts every replica's timeline together).",
    )
    seed: Annotated[int, Field(ge=-(2**63), lt=2**63)] = Field(
        default=0,
        description="Seed of the draw of which replicas a phase's count picks (a 64-bit integer).",
        json_schema_extra=_int64_schema,
    )
    phases: list[FaultPhase] = Field(min_length=1, description="The phases, in time order.")

    @model_validator(mode="after")
    def _ordered_and_named_once(self) -> FaultTimeline:
        names = [p.name for p in self.phases]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"phase name {name!r} is used twice")
        if BASE_PHASE in names:
            raise ValueError(f"phase name {BASE_PHASE!r} is reserved (the state before the first phase)")
        ats = [p.at for p in self.phases]
        if ats != sorted(ats):
            raise ValueError("phases must be in time order (each at no earlier than the one before)")
        return self


#: The phase before a timeline's first one (and while it has not started).
BASE_PHASE = "base"


class Faults(FaultState):
    """Fault injection of one model (``faults:``): the base state, and an optional timeline of others."""

    timeline: FaultTimeline | None = Field(
        default=None,
        description="Fault states over time: phases that set some replicas' faults from a given second "
        "(docs/faults.md#timelines).",
    )

    def state(self) -> FaultState:
        """The base fault state, without the timeline."""
        return FaultState.model_validate(self.model_dump(exclude={"timeline"}))


class KVEvents(_Section):
    """vLLM's ``--kv-events-config``: publish KV-cache events over ZMQ for KV-aware routers."""

    enable_kv_cache_events: bool = Field(
        default=False, description="Publish BlockStored/BlockRemoved/AllBlocksCleared events."
    )
    endpoint: Annotated[str, Field(min_length=1)] = Field(
        default="tcp://*:5557",
        description="ZMQ endpoint: one with '*', '::', ipc:// or inproc:// binds; any other connects.",
    )
    topic: str = Field(
        default="",
        description="ZMQ topic (vLLM's default ''); {model} and {pod_ip} (env POD_IP) are filled in at startup, "
        "e.g. kv@{pod_ip}@{model} as llm-d's KV-cache indexer expects.",
    )
    hwm: PositiveInt = Field(
        default=100_000, description="Send high-water mark of the PUB socket (vLLM's hwm): beyond it ZMQ drops."
    )
    # "map": vLLM since 2026-06 (PR 42892).
    event_format: Literal["map", "array"] = Field(
        default="map",
        description="map: events as msgpack maps (vLLM now); array: positional arrays (vLLM up to 0.23, and "
        "llm-d's indexer before it learned maps).",
    )


class KVTransfer(_Section):
    """vLLM's ``--kv-transfer-config``: this replica's part in a disaggregated prefill/decode fleet.

    The link is what a KV pull crosses between a prefill and a decode replica. Its defaults are one
    400 Gb/s NDR InfiniBand NIC per GPU (50 GB/s), as on the H100 and H200 nodes P/D fleets run on,
    and a round trip of a NIXL read's notification.
    """

    kv_role: Literal["kv_producer", "kv_consumer", "kv_both"] = Field(
        description="kv_producer: prefills and hands its KV over; kv_consumer: pulls KV and decodes; kv_both: "
        "either, per request (vLLM's kv_role)."
    )
    kv_connector: Literal["NixlConnector"] = Field(
        default="NixlConnector", description="The hand-off protocol (vLLM's kv_connector)."
    )
    bandwidth_gbps: PositiveFloat = Field(
        default=50.0, description="Bandwidth of the link a pull crosses, in GB/s; pulls on one link queue."
    )
    latency_ms: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        default=0.5, description="Fixed cost of one pull (handshake and completion notice), in ms."
    )
    abort_request_timeout_s: PositiveFloat = Field(
        default=480.0,
        description="How long a prefill replica holds a request's blocks for a decode replica that never "
        "pulls them (vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT).",
    )
    side_channel_host: Annotated[str, Field(min_length=1)] = Field(
        default="localhost",
        description="Host this replica names in kv_transfer_params for decode replicas to pull from "
        "(vLLM's VLLM_NIXL_SIDE_CHANNEL_HOST); {pod_ip} is filled in from env POD_IP.",
    )
    side_channel_port: Annotated[int, Field(ge=1, le=65535)] = Field(
        default=5600,
        description="Port of the side channel pulls reach; data-parallel rank r uses this + r "
        "(vLLM's VLLM_NIXL_SIDE_CHANNEL_PORT).",
    )
    kv_load_failure_policy: Literal["recompute", "fail"] = Field(
        default="fail",
        description="A decode leg whose prefill replica cannot give its blocks: fail (finish reason error, HTTP "
        "500) or recompute (prefill here instead). vLLM's kv_load_failure_policy, whose default is fail.",
    )


class DataParallel(_Section):
    """vLLM's data parallelism: several simulated GPUs, each its own engine, in one process."""

    size: Annotated[int, Field(ge=1, le=64)] = Field(
        default=1, description="Data-parallel ranks in the deployment (vLLM's --data-parallel-size)."
    )
    rank: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="Serve only this global rank (vLLM's --data-parallel-rank, external load balancing); unset: "
        "every rank.",
    )
    load_balancing: Literal["internal", "external"] = Field(
        default="internal",
        description="internal: one port; each request goes to the rank with the fewest running + waiting "
        "requests unless pinned (vLLM's API server); external: rank r listens on port + r "
        "(vLLM's --data-parallel-multi-port-external-lb).",
    )

    @model_validator(mode="after")
    def _check(self) -> DataParallel:
        if self.rank is not None and self.rank >= self.size:
            raise ValueError(f"rank ({self.rank}) must be < size ({self.size})")
        return self


class LoraAdapter(_Section):
    """One LoRA adapter."""

    name: Annotated[str, Field(min_length=1)] = Field(description="Adapter name, as requests give it in `model`.")
    path: str = Field(
        default="", description="Where vLLM would load it from (part of every block hash; nothing is read)."
    )


class Lora(_Section):
    """vLLM's LoRA serving limits (--max-loras, --max-cpu-loras) and --lora-modules."""

    max_loras: PositiveInt = Field(default=1, description="Distinct adapters in one running batch (vLLM's max_loras).")
    max_cpu_loras: PositiveInt | None = Field(
        default=None,
        description="Adapters kept loaded (vLLM's max_cpu_loras; default `max_loras`); at least `max_loras`.",
    )
    load_ms: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="Simulated time to load an adapter that is not loaded (ms)."
    )
    adapters: list[LoraAdapter] = Field(default=[], description="Adapters loaded at startup, in order.")

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

    path: Annotated[str, Field(min_length=1)] = Field(description="Path of the tokenizer.json.")
    chat_template: Literal["chatml", "llama-3"] = Field(
        default="chatml", description="Chat template rendered around messages."
    )


def _parallel_architecture(kind: str, size: int, info: ValidationInfo) -> Architecture:
    """The architecture a ``kind`` parallelism of ``size`` splits: it needs the scheduler engine
    and the model's architecture (validated before it)."""
    engine = info.data.get("engine")
    if engine is not None and engine != "scheduler":
        raise ValueError(f"{size}: {kind} parallelism needs engine: scheduler (this model's engine is {engine})")
    arch: Architecture | None = info.data.get("architecture")
    if arch is None:
        raise ValueError(f"{size}: {kind} parallelism needs the model's architecture (built-in profiles have it)")
    return arch


class ModelConfig(_Section):
    name: Annotated[str, Field(min_length=1)] = Field(
        description="Model name served on /v1/models and expected in requests' `model` field."
    )
    engine: EngineName = Field(
        description="Timing engine: scheduler (continuous batching on the simulated GPU), fixed (per-request "
        "timeline, load-independent) or instant (no delay)."
    )
    # Explicit fields win over the profile's.
    profile: str | None = Field(
        default=None,
        description="Built-in model profile (model_profiles.yml: weights, kv_cache, context_length), e.g. "
        "llama-3.1-8b, qwen2.5-7b, llama-2-7b.",
    )
    hardware: str | None = None
    context_length: PositiveInt = Field(
        default=llmsim_capacity.DEFAULT_CONTEXT_LENGTH,
        description="Maximum context length in tokens (default: the profile's, else "
        f"{llmsim_capacity.DEFAULT_CONTEXT_LENGTH}). One request of this length must fit in the KV cache.",
    )
    aliases: list[Annotated[str, Field(min_length=1)]] = Field(
        default=[],
        description="More names requests may give in `model` (vLLM's --served-model-name after the first); "
        "responses and metrics name the model by `name`.",
    )
    # "regex" (built in) or {path: tokenizer.json, chat_template: chatml | llama-3}.
    tokenizer: Literal["regex"] | TokenizerFile = "regex"
    weights: Weights | None = None
    kv_cache: KVCache | None = None
    scheduler: SchedulerSection | None = None
    latency: Latency | None = None
    efficiency: Efficiency = Efficiency()
    legacy_metrics: bool = Field(
        default=False,
        description="Also expose deprecated vLLM metric names some routers still read (vllm:gpu_cache_usage_perc, ...).",
    )
    # Set: the model also serves /v1/embeddings.
    embeddings: Embeddings | None = None
    faults: Faults = Field(
        default=Faults(),
        description="Fault injection: per request, at most one fault drawn from (seed, request id or number) at "
        "these rates, so a run is reproducible (docs/faults.md).",
    )
    lora: Lora | None = Field(
        default=None,
        description="LoRA adapters served on the model (vLLM's --enable-lora, --max-loras, --max-cpu-loras, "
        "--lora-modules). Requests name an adapter in `model`.",
    )
    kv_events: KVEvents | None = None
    kv_transfer: KVTransfer | None = Field(
        default=None,
        description="Disaggregated prefill/decode: this replica's role and the link KV crosses (scheduler "
        "engine only).",
    )
    architecture: Architecture | None = Field(
        default=None,
        description="The model's shape (built-in profiles have it); needed by tensor_parallel_size or "
        "pipeline_parallel_size > 1.",
    )
    tensor_parallel_size: Annotated[int, Field(ge=1, le=64)] = Field(
        default=1,
        description="GPUs one replica's weights, KV cache and FLOPs are split across (vLLM's --tensor-parallel-size; "
        "scheduler engine only when > 1; docs/parallelism.md).",
    )
    pipeline_parallel_size: Annotated[int, Field(ge=1)] = Field(
        default=1,
        description="Pipeline stages of consecutive layers, each on tensor_parallel_size GPUs, with vLLM's batch "
        "queue of batches in flight (vLLM's --pipeline-parallel-size; scheduler engine only when > 1; "
        "docs/parallelism.md).",
    )
    data_parallel: DataParallel = Field(
        default=DataParallel(),
        description="Data-parallel ranks: independent simulated GPUs in one process (scheduler engine only "
        "when size > 1).",
    )
    enable_prompt_tokens_details: bool = Field(
        default=False,
        description="Report usage.prompt_tokens_details.cached_tokens (vLLM's --enable-prompt-tokens-details; off "
        "by default, as in vLLM).",
    )

    @field_validator("tensor_parallel_size")
    @classmethod
    def _check_tensor_parallel(cls, tp: int, info: ValidationInfo) -> int:
        # Fields are validated in order: engine and architecture come before this one.
        if tp == 1:
            return tp
        arch = _parallel_architecture("tensor", tp, info)
        if arch.num_attention_heads % tp:
            # vLLM's check and message (config/parallel.py, verify_with_model_config).
            raise ValueError(
                f"Total number of attention heads ({arch.num_attention_heads}) must be divisible by tensor "
                f"parallel size ({tp})."
            )
        heads = arch.num_key_value_heads
        if heads % tp and tp % heads:
            raise ValueError(
                f"Total number of key/value heads ({heads}) and tensor parallel size ({tp}): one must divide the "
                "other (vLLM splits KV heads across ranks or replicates them)"
            )
        return tp

    @field_validator("pipeline_parallel_size")
    @classmethod
    def _check_pipeline(cls, pp: int, info: ValidationInfo) -> int:
        # Fields are validated in order: engine, kv_transfer and architecture come before this one.
        if pp == 1:
            return pp
        arch = _parallel_architecture("pipeline", pp, info)
        if pp > arch.num_hidden_layers:
            raise ValueError(f"{pp}: more pipeline stages than the model's {arch.num_hidden_layers} layers")
        if info.data.get("kv_transfer") is not None:
            raise ValueError(
                f"{pp}: pipeline parallelism with kv_transfer (disaggregated prefill/decode) is not simulated"
            )
        return pp

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        # Both need a simulated GPU: the other engines have no KV cache to hand over nor a rank to be.
        if self.engine != "scheduler":
            if self.kv_transfer is not None:
                raise ValueError(f"kv_transfer needs engine: scheduler (this model's engine is {self.engine})")
            if self.data_parallel.size > 1:
                raise ValueError(
                    f"data_parallel.size > 1 needs engine: scheduler (this model's engine is {self.engine})"
                )
        return self


class ModelsConfig(_Section):
    version: Literal[1] = 1
    startup_seconds: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="Simulated model load: the server binds at once but /health answers 503 this long."
    )
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
