"""What the API needs to serve one model: its generator, its engine, and where lags go."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from llmsim.api.fault_timeline import TimelineRunner
from llmsim.api.faults import FaultInjector
from llmsim.config.schema import FaultState
from llmsim.engine import Engine
from llmsim.engine.data_parallel import DataParallelEngine
from llmsim.llm.generator import Generator


def _drop(lags: Sequence[float]) -> None:
    pass


def _no_faults() -> FaultInjector:
    return FaultInjector("", FaultState(), count=lambda kind: None)


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """What ``/v1/models`` says about a model's engine (under the ``llmsim`` key)."""

    engine: str
    # Scheduler engine only: the simulated GPU and its KV cache and batch limits.
    hardware: str | None = None
    kv_cache_blocks: int | None = None
    block_size: int | None = None
    max_num_sequences: int | None = None
    max_batch_tokens: int | None = None

    @property
    def kv_cache_tokens(self) -> int | None:
        if self.kv_cache_blocks is None or self.block_size is None:
            return None
        return self.kv_cache_blocks * self.block_size

    def to_json(self) -> dict[str, Any]:
        fields = asdict(self) | {"kv_cache_tokens": self.kv_cache_tokens}
        return {key: value for key, value in fields.items() if value is not None}


@dataclass(frozen=True, slots=True)
class KVTransferInfo:
    """A model in a disaggregated prefill/decode fleet: what its prefill answers tell decode replicas."""

    # This process's engine id for the model (vLLM's engine_id: a fresh uuid per start).
    engine_id: str
    # Where this replica's side channel listens: side_channel_host ({pod_ip} filled in) and
    # side_channel_port + the data-parallel rank.
    host: str
    port: int
    tp_size: int = 1
    # kv_producer | kv_consumer | kv_both: which SGLang leg a request with bootstrap fields is.
    role: str = "kv_both"


@dataclass(slots=True)
class ServedModel:
    name: str
    generator: Generator
    engine: Engine
    context_length: int
    # Unix time of startup, reported as ``created`` in /v1/models.
    created: int
    info: EngineInfo
    # Receives the release lags of one request's tokens, in one call per request.
    observe_lags: Callable[[Sequence[float]], None] = _drop
    # Length of the vectors /v1/embeddings answers with; None: the model serves no embeddings.
    embedding_dimensions: int | None = None
    # The model's fault injection (disabled unless its ``faults`` entry or /admin/faults enables it).
    faults: FaultInjector = field(default_factory=_no_faults)
    # The model's fault timeline, which reconfigures ``faults`` phase by phase (None: built without one).
    timeline: TimelineRunner | None = None
    # LoRA adapters served on this model (name -> path), in load order; requests name them in
    # "model". Changed at runtime by /v1/load_lora_adapter and /v1/unload_lora_adapter.
    lora_adapters: dict[str, str] = field(default_factory=dict)
    # The model has a lora section (vLLM's --enable-lora): adapters may be loaded at runtime.
    lora_enabled: bool = False
    # The most adapters a runtime load may bring the model to: its startup adapters plus its
    # max_cpu_loras (runtime loads are bounded by max_cpu_loras).
    max_lora_adapters: int = 0
    # vLLM's --enable-prompt-tokens-details: usage.prompt_tokens_details.cached_tokens in responses.
    enable_prompt_tokens_details: bool = False
    # More names requests may give (vLLM's --served-model-name after the first); responses say ``name``.
    aliases: tuple[str, ...] = ()
    # Data parallelism: the deployment's ranks (vLLM's --data-parallel-size), the global ranks this
    # server runs (in order), and their engines (``engine`` picks among them; one rank: ``engine`` itself).
    dp_size: int = 1
    # GPUs per rank (vLLM's --tensor-parallel-size): /server_info says it.
    tensor_parallel_size: int = 1
    dp_ranks: tuple[int, ...] = (0,)
    rank_engines: tuple[Engine, ...] = ()

    def ranks(self) -> list[tuple[int, Engine]]:
        """Each rank this server runs (global number) with its engine."""
        return list(zip(self.dp_ranks, self.rank_engines or (self.engine,), strict=True))

    # Disaggregated prefill/decode (models.yml's kv_transfer); None: kv_transfer_params are ignored.
    # The first rank's; ``rank_kv_transfers`` has each rank's (own engine id and side-channel port),
    # in ``dp_ranks`` order (empty: ``kv_transfer`` for the one rank).
    kv_transfer: KVTransferInfo | None = None
    rank_kv_transfers: tuple[KVTransferInfo, ...] = ()

    def held_for_pull(self, request_id: str) -> tuple[KVTransferInfo, tuple[int, ...]] | None:
        """A finished prefill leg's held blocks and the hand-off info of the rank holding them
        (vLLM: the answer names the engine id and side-channel port of the rank that served it)."""
        if self.kv_transfer is None:
            return None
        engine = self.engine
        index = engine.holder(request_id) if isinstance(engine, DataParallelEngine) else 0
        if index is None:
            return None
        blocks = engine.held_blocks(request_id)
        if blocks is None:
            return None
        infos = self.rank_kv_transfers or (self.kv_transfer,)
        return infos[index], blocks
