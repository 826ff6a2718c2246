"""The scheduler engine's inputs as plain numbers (runtime.py converts models.yml into these).

Units are SI throughout: bytes, bytes/s, FLOP/s, seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import llmsim_capacity
from llmsim.engine.scheduler.kv_link import KVLinkSpec


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One simulated GPU."""

    hbm_bytes: float  # hbm_gib * 2**30
    memory_bandwidth: float  # bytes/s  (memory_bandwidth_gbps * 1e9)
    peak_flops: float  # FLOP/s   (peak_tflops * 1e12)
    # The GPU-to-GPU link tensor parallelism's all-reduces cross: bytes/s each way
    # (interconnect_bandwidth_gbps * 1e9) and the fixed cost of one all-reduce (s). 0: none known.
    interconnect_bandwidth: float = 0.0
    interconnect_latency_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What the roofline needs to know about the model."""

    # Parameters one token's forward pass multiplies by: all of them for a dense model, the active
    # ones (shared layers + the routed experts) for a mixture of experts (active_parameters_billions * 1e9).
    num_parameters: float
    # Bytes of every weight, all experts included (what HBM holds): total parameters * bytes_per_parameter.
    weight_bytes: float
    # KV bytes per token over all layers and KV heads (all tensor-parallel ranks together).
    kv_bytes_per_token: int
    # The shape tensor parallelism needs (Hugging Face config.json names); 0: unknown.
    num_hidden_layers: int = 0
    hidden_size: int = 0
    num_key_value_heads: int = 0
    # Mixture of experts: routed experts a layer and how many each token goes to (0: dense), and
    # the bytes of all the routed experts' weights (part of weight_bytes): a step reads only the
    # experts its tokens route to (see cost_model).
    num_experts: int = 0
    experts_per_token: int = 0
    expert_weight_bytes: float = 0.0

    def __post_init__(self) -> None:
        if self.num_experts:
            if not 0 < self.experts_per_token <= self.num_experts:
                raise ValueError(f"experts_per_token must be in 1..{self.num_experts}, got {self.experts_per_token}")
            if not 0 < self.expert_weight_bytes <= self.weight_bytes:
                raise ValueError("expert_weight_bytes must be > 0 and at most weight_bytes")
        elif self.experts_per_token or self.expert_weight_bytes:
            raise ValueError("experts_per_token and expert_weight_bytes go with num_experts")


@dataclass(frozen=True, slots=True)
class LoraParams:
    """LoRA serving limits (vLLM's ``LoRAConfig``) and what loading an adapter costs."""

    # max_loras: distinct adapters in one running batch.
    max_loras: int = 1
    # max_cpu_loras: adapters kept loaded (an LRU); using one that is not costs ``load_s``.
    max_cpu_loras: int = 1
    # Simulated seconds to load a non-resident adapter, added to the step that first needs it.
    load_s: float = 0.0
    # Adapters loaded at startup, in order: (name, path) (vLLM's --lora-modules).
    adapters: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.max_loras < 1:
            raise ValueError(f"max_loras must be >= 1, got {self.max_loras}")
        if self.max_cpu_loras < self.max_loras:
            # vLLM's own message (config/lora.py).
            raise ValueError(f"max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras}).")
        if self.load_s < 0:
            raise ValueError(f"load_s must be >= 0, got {self.load_s}")


@dataclass(frozen=True, slots=True)
class SchedulerParams:
    """Everything the scheduler engine reads; vLLM's names in comments where they differ."""

    gpu: GpuSpec
    model: ModelSpec
    # max_model_len: prompt + output never exceed it.
    context_length: int
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    # Fraction of all KV blocks kept free when admitting a waiting request.
    watermark: float = 0.0
    # max_num_batched_tokens: tokens computed per step, all sequences together.
    max_batch_tokens: int = 8192
    # max_num_seqs: sequences running at once.
    max_num_sequences: int = 256
    # Beyond this many waiting requests the engine refuses new ones (API maps to 503); None: unbounded.
    max_waiting_requests: int | None = None
    # Fixed cost added to every step (kernel launches, sampling, scheduling).
    step_overhead_s: float = 0.0
    # Added to a step for every sequence it schedules (per-sequence work beyond the roofline).
    step_overhead_per_sequence_s: float = 0.0
    # Time from a request's arrival to its reaching the scheduler: vLLM's API server parses the
    # HTTP body, renders the chat template, tokenizes and hands the request to the engine core
    # over ZMQ before the scheduler can see it (see scheduler.ready_time).
    request_overhead_s: float = 0.0
    # Achieved fractions of peak FLOP/s and of peak bandwidth.
    compute_efficiency: float = 1.0
    memory_efficiency: float = 1.0
    # vLLM's enable_prefix_caching (on by default in V1): full blocks are reused across requests.
    enable_prefix_caching: bool = True
    # Record KV-cache events (BlockStored/BlockRemoved/AllBlocksCleared) in each step's stats.
    enable_kv_cache_events: bool = False
    # LoRA adapters (None: LoRA off, as vLLM without --enable-lora).
    lora: LoraParams | None = None
    # vLLM's --tensor-parallel-size: GPUs one replica's weights and KV cache are split across.
    tensor_parallel_size: int = 1
    # vLLM's --pipeline-parallel-size: stages of consecutive layers, each on tensor_parallel_size
    # GPUs, with up to PP (+ 1 with async scheduling) batches in flight (engine.scheduler.pipeline).
    pipeline_parallel_size: int = 1
    # vLLM's async scheduling: step k+1 is scheduled when step k starts, so a request arriving
    # while running sequences keep the GPU busy joins one step later than with synchronous
    # scheduling. Off here (the plain timeline); runtime.py turns it on, as vLLM does by default since late 2025.
    async_scheduling: bool = False
    # Disaggregated prefill/decode (models.yml's kv_transfer; None: not part of such a fleet):
    # the link a decode leg's pull crosses, and how long a prefill leg's blocks wait for a pull
    # before they are freed anyway (vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT).
    kv_link: KVLinkSpec | None = None
    kv_abort_timeout_s: float = 480.0

    def __post_init__(self) -> None:
        ints = {
            "context_length": self.context_length,
            "block_size": self.block_size,
            "max_batch_tokens": self.max_batch_tokens,
            "max_num_sequences": self.max_num_sequences,
        }
        for name, value in ints.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.max_waiting_requests is not None and self.max_waiting_requests < 1:
            raise ValueError(f"max_waiting_requests must be >= 1 or None, got {self.max_waiting_requests}")
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark}")
        for name, frac in (
            ("gpu_memory_utilization", self.gpu_memory_utilization),
            ("compute_efficiency", self.compute_efficiency),
            ("memory_efficiency", self.memory_efficiency),
        ):
            if not 0.0 < frac <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {frac}")
        if self.step_overhead_s < 0:
            raise ValueError(f"step_overhead_s must be >= 0, got {self.step_overhead_s}")
        if self.step_overhead_per_sequence_s < 0:
            raise ValueError(f"step_overhead_per_sequence_s must be >= 0, got {self.step_overhead_per_sequence_s}")
        if self.request_overhead_s < 0:
            raise ValueError(f"request_overhead_s must be >= 0, got {self.request_overhead_s}")
        if self.gpu.memory_bandwidth <= 0 or self.gpu.peak_flops <= 0:
            raise ValueError("GPU bandwidth and peak FLOP/s must be > 0")
        if not self.kv_abort_timeout_s > 0:
            raise ValueError(f"kv_abort_timeout_s must be > 0, got {self.kv_abort_timeout_s}")
        if self.model.kv_bytes_per_token < 1:
            raise ValueError(f"kv_bytes_per_token must be >= 1, got {self.model.kv_bytes_per_token}")
        tp = self.tensor_parallel_size
        if tp < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tp}")
        if tp > 1:
            model, gpu = self.model, self.gpu
            if model.num_hidden_layers < 1 or model.hidden_size < 1:
                raise ValueError("tensor_parallel_size > 1 needs the model's num_hidden_layers and hidden_size")
            if gpu.interconnect_bandwidth <= 0:
                raise ValueError("tensor_parallel_size > 1 needs the GPU's interconnect bandwidth")
            heads = model.num_key_value_heads
            # vLLM's check (config/model.py): KV heads are split when TP divides them, replicated
            # when they divide TP; any other pair cannot be sharded.
            if heads and heads % tp and tp % heads:
                raise ValueError(
                    f"Total number of key/value heads ({heads}) must be divisible by tensor parallel size ({tp}) "
                    "or the other way round"
                )
        pp = self.pipeline_parallel_size
        if pp < 1:
            raise ValueError(f"pipeline_parallel_size must be >= 1, got {pp}")
        if pp > 1:
            layers = self.model.num_hidden_layers
            if layers < 1 or self.model.hidden_size < 1:
                raise ValueError("pipeline_parallel_size > 1 needs the model's num_hidden_layers and hidden_size")
            if pp > layers:
                raise ValueError(f"pipeline_parallel_size ({pp}) exceeds the model's {layers} layers")
            if self.gpu.interconnect_bandwidth <= 0:
                raise ValueError("pipeline_parallel_size > 1 needs the GPU's interconnect bandwidth")

    @property
    def stage_layers(self) -> tuple[int, ...]:
        """Layers of each pipeline stage, as vLLM splits them (see :func:`pipeline_stage_layers`)."""
        return pipeline_stage_layers(self.model.num_hidden_layers, self.pipeline_parallel_size)

    @property
    def largest_stage_share(self) -> float:
        """The largest stage's fraction of the layers (1.0 without pipeline parallelism).

        vLLM gives every worker the same number of KV blocks, the smallest any worker's memory
        allows (``get_kv_cache_configs``: "Change the num_blocks of each rank to the smallest among
        all ranks"). A stage's weights and KV bytes a token both grow with its layers, so the
        smallest count is the largest stage's: the per-GPU figures below are that stage's.
        """
        pp = self.pipeline_parallel_size
        return 1.0 if pp == 1 else max(self.stage_layers) / self.model.num_hidden_layers

    @property
    def weight_bytes_per_gpu(self) -> float:
        """The weights one GPU holds and reads each step: an even tensor-parallel shard of the
        largest pipeline stage's layers (weights spread evenly over layers: see docs/parallelism.md)."""
        return self.model.weight_bytes / self.tensor_parallel_size * self.largest_stage_share

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """One token's KV on one rank: its share of the KV heads.

        vLLM gives each rank ``max(1, heads // tp)`` KV heads: past ``tp == heads`` the heads are
        replicated, so a rank's share stops shrinking at one head (``kv / heads``). Under pipeline
        parallelism a GPU holds KV for its stage's layers only (the largest stage's, as above).
        """
        share = kv_bytes_per_gpu(
            self.model.kv_bytes_per_token, self.tensor_parallel_size, self.model.num_key_value_heads
        )
        return share * self.largest_stage_share


def pipeline_stage_layers(num_hidden_layers: int, pipeline_parallel_size: int) -> tuple[int, ...]:
    """Layers per pipeline stage, vLLM's split (``vllm/distributed/utils.py``, ``get_pp_indices``):
    ``layers // pp`` each, and the remainder one each to the stages before the last, from the
    second-to-last backwards (the last stage also holds the final norm and the LM head)."""
    pp = pipeline_parallel_size
    if pp == 1:
        return (num_hidden_layers,)
    parts = [num_hidden_layers // pp] * pp
    for i in range(2, num_hidden_layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def kv_bytes_per_gpu(kv_bytes_per_token: float, tensor_parallel_size: int, num_key_value_heads: int = 0) -> float:
    """One token's KV bytes on one of ``tensor_parallel_size`` ranks (0 heads: unknown, an even split)."""
    tp = tensor_parallel_size
    return kv_bytes_per_token / (min(tp, num_key_value_heads) if num_key_value_heads else tp)


#: vLLM V1's scheduler defaults (API server) by GPU memory: at least this much HBM takes the large table.
LARGE_GPU_HBM_BYTES = 70 * 2**30
#: (max_num_batched_tokens, max_num_seqs) on GPUs with at least LARGE_GPU_HBM_BYTES (H100/H200 class).
LARGE_GPU_DEFAULT_LIMITS = (8192, 1024)
#: The same on smaller GPUs (A100 40GB, L40S, L4, ...).
SMALL_GPU_DEFAULT_LIMITS = (2048, 256)


def default_limits(gpu: GpuSpec) -> tuple[int, int]:
    """vLLM's ``(max_num_batched_tokens, max_num_seqs)`` when the config leaves them unset."""
    return LARGE_GPU_DEFAULT_LIMITS if gpu.hbm_bytes >= LARGE_GPU_HBM_BYTES else SMALL_GPU_DEFAULT_LIMITS


def num_kv_blocks(params: SchedulerParams) -> int:
    """KV blocks left after the weights (the formula lives in llmsim_capacity, shared with the operator).

    With tensor parallelism this is one rank's count, as vLLM's is: every rank holds the same
    blocks, each with its share of the KV heads, beside its shard of the weights. So the tokens
    the cache holds grow with the GPU count faster than the GPUs (each sheds weight bytes too).
    With pipeline parallelism it is the smallest stage's count (the largest stage's memory), which
    vLLM imposes on every stage: one block id names the same tokens on all of them.

    This is vLLM's ``num_gpu_blocks``; block 0 of them is the null block, so requests can use one
    fewer. Raises ValueError (:class:`llmsim_capacity.CapacityError`) when the weights leave no room
    for the null block and one more.
    """
    return llmsim_capacity.num_kv_blocks(
        hbm_bytes=params.gpu.hbm_bytes,
        gpu_memory_utilization=params.gpu_memory_utilization,
        weight_bytes=params.weight_bytes_per_gpu,
        kv_bytes_per_token=params.kv_bytes_per_token_per_gpu,
        block_size=params.block_size,
    )


def check_context_fits(params: SchedulerParams, num_blocks: int) -> None:
    """Refuse a cache that cannot hold one request of the full context length, null block excluded (as vLLM does)."""
    llmsim_capacity.check_context_fits(
        num_blocks=num_blocks, block_size=params.block_size, context_length=params.context_length
    )
