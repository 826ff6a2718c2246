"""The composition root: the only module that reads the parsed config.

At startup it builds one generator and one engine per model, checks each engine's required
config sections, wires engine observers, and hands the API a ready :class:`ApiState`. A broken
config raises :class:`~llmsim.errors.ConfigError` here, before any port is bound.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from starlette.responses import PlainTextResponse

from llmsim.api.access import Access
from llmsim.api.app import LlmsimApp, create_app
from llmsim.api.dev_routes import dev_mode, dev_routes
from llmsim.api.fault_timeline import UNKNOWN_REPLICA, Replica, TimelineRunner
from llmsim.api.faults import Crash, FaultInjector, exit_process
from llmsim.api.identity import Identity
from llmsim.api.lifecycle import Lifecycle
from llmsim.api.lora_routes import LORA_BODIES, lora_routes, runtime_lora_updating
from llmsim.api.served import EngineInfo, KVTransferInfo, ServedModel
from llmsim.api.state import DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_REQUEST_OUTPUT_TOKENS, ApiState
from llmsim.config import ModelConfig, ModelsConfig, load_models_config
from llmsim.config.loader import EMBEDDED_MODELS
from llmsim.config.schema import SchedulerSection
from llmsim.engine import Clock, Engine, EngineObserver, MonotonicClock, ObserverGroup
from llmsim.engine.data_parallel import DataParallelEngine
from llmsim.engine.fixed import FixedEngine, FixedTiming
from llmsim.engine.instant import InstantEngine
from llmsim.engine.release_gate import ReleaseGate
from llmsim.engine.scheduler.driver import SchedulerEngine
from llmsim.engine.scheduler.kv_link import KVLinkSpec
from llmsim.engine.scheduler.params import (
    GpuSpec,
    LoraParams,
    ModelSpec,
    SchedulerParams,
    check_context_fits,
    default_limits,
    num_kv_blocks,
)
from llmsim.engine.timer_fd_clock import precise
from llmsim.errors import ConfigError
from llmsim.kv_events import KVEventStream, ZmqPublisher, offset_endpoint_port
from llmsim.kv_transfer import SideChannelPeer, SideChannelServer
from llmsim.llm import Generator, HuggingFaceTokenizer, RegexTokenizer, Script, Tokenizer, load_responses
from llmsim.metrics import MetricsHub, cache_config_labels
from llmsim.transport import ArrivalWatch

logger = logging.getLogger("llmsim")

ENGINES: dict[str, type[Engine]] = {e.name: e for e in (InstantEngine, FixedEngine, SchedulerEngine)}


def _check_sections(model: ModelConfig, config: ModelsConfig, file: str) -> None:
    required = ENGINES[model.engine].required_sections
    for section in sorted(required):
        if getattr(model, section) is None:
            raise ConfigError(
                file, f"required by engine '{model.engine}'", entry=config.entry_label(model.name), field=section
            )


def scheduler_params(config: ModelsConfig, model_name: str, file: str = EMBEDDED_MODELS) -> SchedulerParams:
    """Plain numbers for the scheduler engine from one model's config.

    Raises ConfigError when the model cannot run: weights that do not fit, or a KV cache too small
    for one request of the full context length (vLLM refuses to start in both cases).
    """
    model = config.model(model_name)
    _check_sections(model, config, file)
    assert model.hardware is not None
    assert model.weights is not None
    assert model.kv_cache is not None
    hw = config.hardware[model.hardware]
    sched = model.scheduler or SchedulerSection()
    latency = model.latency
    tp = model.tensor_parallel_size
    pp = model.pipeline_parallel_size
    for size, field in ((tp, "tensor_parallel_size"), (pp, "pipeline_parallel_size")):
        if size > 1 and hw.interconnect_bandwidth_gbps is None:
            raise ConfigError(
                file,
                f"{field} {size} needs hardware '{model.hardware}' to give interconnect_bandwidth_gbps",
                entry=config.entry_label(model.name),
                field=field,
            )
    gpu = GpuSpec(
        hbm_bytes=hw.hbm_gib * 2**30,
        memory_bandwidth=hw.memory_bandwidth_gbps * 1e9,
        peak_flops=hw.peak_tflops * 1e12,
        interconnect_bandwidth=(hw.interconnect_bandwidth_gbps or 0.0) * 1e9,
        interconnect_latency_s=(hw.interconnect_latency_us or 0.0) / 1e6,
    )
    arch = model.architecture
    default_batch_tokens, default_sequences = default_limits(gpu)
    try:
        params = SchedulerParams(
            gpu=gpu,
            model=ModelSpec(
                num_parameters=model.weights.active_parameters,
                weight_bytes=model.weights.bytes,
                kv_bytes_per_token=model.kv_cache.bytes_per_token,
                num_hidden_layers=arch.num_hidden_layers if arch else 0,
                hidden_size=arch.hidden_size if arch else 0,
                num_key_value_heads=arch.num_key_value_heads if arch else 0,
                num_experts=model.weights.experts or 0,
                experts_per_token=model.weights.experts_per_token or 0,
                expert_weight_bytes=model.weights.expert_bytes,
            ),
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            context_length=model.context_length,
            block_size=model.kv_cache.block_size,
            gpu_memory_utilization=model.kv_cache.gpu_memory_utilization,
            watermark=model.kv_cache.watermark,
            max_batch_tokens=sched.max_batch_tokens or default_batch_tokens,
            max_num_sequences=sched.max_num_sequences or default_sequences,
            max_waiting_requests=sched.max_waiting_requests,
            step_overhead_s=latency.step_overhead_ms / 1000 if latency else 0.0,
            step_overhead_per_sequence_s=latency.step_overhead_per_sequence_ms / 1000 if latency else 0.0,
            request_overhead_s=latency.request_overhead_ms / 1000 if latency else 0.0,
            compute_efficiency=model.efficiency.compute,
            memory_efficiency=model.efficiency.memory,
            enable_prefix_caching=model.kv_cache.enable_prefix_caching,
            enable_kv_cache_events=model.kv_events is not None and model.kv_events.enable_kv_cache_events,
            lora=lora_params(model),
            async_scheduling=sched.async_scheduling,
            kv_link=(
                KVLinkSpec.from_config(model.kv_transfer.bandwidth_gbps, model.kv_transfer.latency_ms)
                if model.kv_transfer is not None
                else None
            ),
            kv_abort_timeout_s=model.kv_transfer.abort_request_timeout_s if model.kv_transfer is not None else 480.0,
        )
        check_context_fits(params, num_kv_blocks(params))
    except ValueError as exc:
        raise ConfigError(file, str(exc), entry=config.entry_label(model.name), field="kv_cache") from None
    return params


def lora_params(model: ModelConfig) -> LoraParams | None:
    """The model's LoRA limits and startup adapters, or None without a lora section."""
    lora = model.lora
    if lora is None:
        return None
    return LoraParams(
        max_loras=lora.max_loras,
        max_cpu_loras=lora.max_cpu_loras if lora.max_cpu_loras is not None else lora.max_loras,
        load_s=lora.load_ms / 1000,
        adapters=tuple((a.name, a.path) for a in lora.adapters),
    )


def build_tokenizer(config: ModelsConfig, model: ModelConfig, file: str) -> Tokenizer:
    """The model's tokenizer: the regex one, or its tokenizer.json (relative to the config file)."""
    spec = model.tokenizer
    if spec == "regex":
        return RegexTokenizer()
    path = Path(spec.path)
    if not path.is_absolute() and file != EMBEDDED_MODELS:
        path = Path(file).parent / path
    try:
        return HuggingFaceTokenizer(path, spec.chat_template)
    except ValueError as exc:
        raise ConfigError(file, str(exc), entry=config.entry_label(model.name), field="tokenizer.path") from None


def fixed_timing(model: ModelConfig) -> FixedTiming:
    latency = model.latency
    assert latency is not None
    return FixedTiming(
        ttft_overhead_s=latency.ttft_overhead_ms / 1000,
        prefill_tokens_per_s=latency.prefill_tokens_per_second,
        itl_s=latency.itl_ms / 1000,
    )


@dataclass(frozen=True, slots=True)
class BuiltEngine:
    """One model's engine, what /v1/models says about it, and its vllm:cache_config_info labels."""

    engine: Engine
    info: EngineInfo
    # None for engines without a simulated KV cache (no cache_config_info series).
    cache_config: dict[str, str] | None = None


def build_engine(
    config: ModelsConfig,
    model: ModelConfig,
    clock: Clock,
    observer: EngineObserver,
    file: str,
    gate: ReleaseGate | None = None,
    poll_arrivals: Callable[[], None] | None = None,
) -> BuiltEngine:
    """One engine for one model (a scheduler engine's releases on ``gate``, noting arrivals
    during its passes with ``poll_arrivals``). Raises ConfigError."""
    _check_sections(model, config, file)
    if model.engine == "scheduler":
        assert model.kv_cache is not None
        params = scheduler_params(config, model.name, file)
        blocks = num_kv_blocks(params)
        info = EngineInfo(
            engine=model.engine,
            hardware=model.hardware,
            kv_cache_blocks=blocks,
            block_size=params.block_size,
            max_num_sequences=params.max_num_sequences,
            max_batch_tokens=params.max_batch_tokens,
        )
        logger.info(
            "model %s: scheduler on %s, %d KV blocks of %d tokens (%d tokens)",
            model.name,
            model.hardware,
            blocks,
            params.block_size,
            blocks * params.block_size,
        )
        cache_config = cache_config_labels(
            block_size=params.block_size,
            num_gpu_blocks=blocks,
            gpu_memory_utilization=params.gpu_memory_utilization,
            enable_prefix_caching=model.kv_cache.enable_prefix_caching,
        )
        if params.enable_kv_cache_events and not params.enable_prefix_caching:
            # vLLM's own warning: nothing is ever stored, so only AllBlocksCleared could be sent.
            logger.warning("model %s: KV cache events are on, but prefix caching is not enabled.", model.name)
        # One sleep per step, so the step loop can afford a timer that wakes at the deadline's
        # microsecond rather than the event loop's millisecond (most of a quiet server's lag).
        kv = model.kv_transfer
        engine = SchedulerEngine(
            params,
            precise(clock, poll_arrivals),
            observer,
            gate,
            poll_arrivals,
            kv_peer=SideChannelPeer() if kv is not None else None,
            recompute_failed_pulls=kv is not None and kv.kv_load_failure_policy == "recompute",
        )
        return BuiltEngine(engine, info, cache_config)
    if model.kv_events is not None and model.kv_events.enable_kv_cache_events:
        raise ConfigError(
            file,
            "KV-cache events need engine 'scheduler' (a KV cache)",
            entry=config.entry_label(model.name),
            field="kv_events",
        )
    info = EngineInfo(engine=model.engine)
    if model.engine == "fixed":
        return BuiltEngine(FixedEngine(fixed_timing(model), clock, observer), info)
    return BuiltEngine(InstantEngine(clock, observer), info)


def local_ranks(model: ModelConfig, only_rank: int | None = None) -> list[int]:
    """The global data-parallel ranks of ``model`` this process runs.

    Every rank (internal load balancing, one port); the configured ``rank`` (one rank per
    process); or ``only_rank`` (external load balancing with every rank in this process, each on
    its own port: the server for port + r runs rank r). A model without data parallelism: rank 0.
    """
    dp = model.data_parallel
    if dp.rank is not None:
        return [dp.rank]
    if only_rank is not None:
        return [only_rank]
    return list(range(dp.size))


def load_config(config_path: str | Path | None) -> tuple[ModelsConfig, str]:
    """models.yml parsed and checked (the embedded one without a path), and what errors call it."""
    return load_models_config(config_path), str(config_path) if config_path is not None else EMBEDDED_MODELS


def external_ports(config: ModelsConfig, file: str = EMBEDDED_MODELS) -> int:
    """How many servers (ports) this config needs: N for external load balancing over N ranks in
    one process (vLLM's --data-parallel-multi-port-external-lb: rank r on port + r), else 1.

    Raises ConfigError when only some models ask for it, or with different sizes: every port serves
    one rank of every model.
    """
    multi = [m for m in config.models if m.data_parallel.load_balancing == "external" and m.data_parallel.rank is None]
    sizes = {m.data_parallel.size for m in multi}
    if not multi or sizes == {1}:
        return 1
    if len(multi) != len(config.models) or len(sizes) != 1:
        odd = next(m for m in config.models if m not in multi or m.data_parallel.size != max(sizes))
        raise ConfigError(
            file,
            "external load balancing over several ranks in one process (rank r on port + r) needs every model "
            "to have it, with the same size",
            entry=config.entry_label(odd.name),
            field="data_parallel",
        )
    return sizes.pop()


def _kv_event_stream(
    config: ModelsConfig, model: ModelConfig, file: str, publishers: dict[str, ZmqPublisher], rank: int
) -> KVEventStream | None:
    """The rank's KV-event stream: vLLM's endpoint moved by the rank (port + rank), the same topic."""
    events = model.kv_events
    if events is None or not events.enable_kv_cache_events or model.engine != "scheduler":
        return None
    try:
        endpoint = offset_endpoint_port(events.endpoint, rank)
        publisher = publishers.get(endpoint)
        if publisher is None:
            publisher = publishers[endpoint] = ZmqPublisher(endpoint, hwm=events.hwm)
    except (OSError, ValueError) as exc:
        raise ConfigError(file, str(exc), entry=config.entry_label(model.name), field="kv_events.endpoint") from None
    stream = KVEventStream(
        publisher, events.topic, model=model.name, event_format=events.event_format, data_parallel_rank=rank
    )
    logger.info("model %s rank %d: KV-cache events on %s, topic %r", model.name, rank, endpoint, stream.topic)
    return stream


def _serve_model(
    config: ModelsConfig,
    model: ModelConfig,
    file: str,
    script: Script,
    clock: Clock,
    hub: MetricsHub,
    publishers: dict[str, ZmqPublisher],
    created: int,
    crash: Crash,
    gate: ReleaseGate | None = None,
    poll_arrivals: Callable[[], None] | None = None,
    only_rank: int | None = None,
    replica: Replica = UNKNOWN_REPLICA,
) -> ServedModel:
    """One model's metrics, KV-event streams, engines (one per data-parallel rank) and generator, wired together."""
    max_lora = model.lora.max_loras if model.lora is not None else None
    ranks = local_ranks(model, only_rank)
    engines: list[Engine] = []
    rank_metrics = []
    built: BuiltEngine | None = None
    events = False
    for rank in ranks:
        metrics = hub.add_model(
            model.name,
            max_model_len=model.context_length,
            legacy_metrics=model.legacy_metrics,
            max_lora=max_lora,
            engine=rank,
        )
        observer: EngineObserver = metrics
        stream = _kv_event_stream(config, model, file, publishers, rank)
        if stream is not None:
            observer = ObserverGroup(metrics, stream)
            events = True
        built = build_engine(config, model, clock, observer, file, gate, poll_arrivals)
        metrics.bind(built.engine.snapshot, built.cache_config)
        if model.engine != "scheduler" and model.lora is not None:
            for adapter in model.lora.adapters:
                built.engine.add_lora(adapter.name, adapter.path)
        engines.append(built.engine)
        rank_metrics.append(metrics)
    assert built is not None
    # NOTE: the lag of a release is the event loop's, not a rank's; lags and injected faults are
    # counted on the first rank's series.
    metrics = rank_metrics[0]
    engine: Engine = engines[0] if len(engines) == 1 else DataParallelEngine(engines, clock.now)
    # The scheduler's prefix cache hashes token ids: ask the generator for them.
    caching = model.engine == "scheduler" and model.kv_cache is not None and model.kv_cache.enable_prefix_caching
    generator = Generator(
        script,
        model_name=model.name,
        context_length=model.context_length,
        tokenizer=build_tokenizer(config, model, file),
        token_ids=caching or events,
    )
    lora = lora_params(model)
    base = model.faults.state()
    faults = FaultInjector(model.name, base, metrics.count_fault, crash)

    try:
        timeline = TimelineRunner(
            model.name,
            model.faults.timeline,
            base,
            faults,
            replica,
            clock.now,
            on_phases=metrics.set_fault_phases,
            on_phase=metrics.enter_fault_phase,
        )
    except ValueError as exc:
        raise ConfigError(file, str(exc), entry=config.entry_label(model.name), field="faults.timeline") from None
    # One engine id and side-channel port (port + global rank) per rank, as each vLLM rank is its own engine.
    base_id = str(uuid.uuid4())
    rank_transfers = tuple(info for rank in ranks if (info := kv_transfer_info(model, rank, base_id)) is not None)
    return ServedModel(
        kv_transfer=rank_transfers[0] if rank_transfers else None,
        rank_kv_transfers=rank_transfers,
        name=model.name,
        aliases=tuple(model.aliases),
        generator=generator,
        engine=engine,
        context_length=model.context_length,
        created=created,
        info=built.info,
        observe_lags=metrics.observe_lags,
        lora_adapters={a.name: a.path for a in model.lora.adapters} if model.lora is not None else {},
        lora_enabled=model.lora is not None,
        max_lora_adapters=lora.max_cpu_loras + len(lora.adapters) if lora is not None else 0,
        enable_prompt_tokens_details=model.enable_prompt_tokens_details,
        embedding_dimensions=model.embeddings.dimensions if model.embeddings is not None else None,
        faults=faults,
        timeline=timeline,
        dp_size=model.data_parallel.size,
        tensor_parallel_size=model.tensor_parallel_size,
        dp_ranks=tuple(ranks),
        rank_engines=tuple(engines),
    )


@dataclass(frozen=True, slots=True)
class LoopShare:
    """What the servers of one process share on its one event loop (a server per data-parallel rank's port).

    One clock, and one release gate and arrival watch for every step loop: a release due on any
    rank holds request parsing on every port, and any step loop notes arrivals on any port.
    """

    clock: Clock
    gate: ReleaseGate
    watch: ArrivalWatch

    @classmethod
    def create(cls) -> LoopShare:
        clock = MonotonicClock()
        return cls(clock, ReleaseGate(clock.now), ArrivalWatch())


def kv_transfer_info(model: ModelConfig, rank: int = 0, base_id: str | None = None) -> KVTransferInfo | None:
    """The side-channel address of the model's data-parallel ``rank`` (vLLM's port + rank) and its
    engine id: ``base_id`` (vLLM: a uuid4 per server start; a fresh one when not given), with
    data-parallel ranks ``_dp<rank>`` appended, as vLLM's engine core process does so that each
    rank's id is unique (vLLM appends the rank local to its node: the global rank on one node)."""
    kv = model.kv_transfer
    if kv is None:
        return None
    engine_id = base_id if base_id is not None else str(uuid.uuid4())
    if model.data_parallel.size > 1:
        engine_id = f"{engine_id}_dp{rank}"
    host = kv.side_channel_host.replace("{pod_ip}", os.environ.get("POD_IP", "127.0.0.1"))
    return KVTransferInfo(
        engine_id=engine_id,
        host=host,
        port=kv.side_channel_port + rank,
        role=kv.kv_role,
        tp_size=model.tensor_parallel_size,
    )


def side_channels(models: dict[str, ServedModel]) -> list[SideChannelServer]:
    """One listener per side-channel address, each answering for the rank engines that name it
    (vLLM: rank r's NIXL side channel on port + r knows rank r's engine)."""
    servers: dict[tuple[str, int], SideChannelServer] = {}
    for served in models.values():
        if served.kv_transfer is None:
            continue
        engines = served.rank_engines or (served.engine,)
        infos = served.rank_kv_transfers or (served.kv_transfer,)
        for kv, engine in zip(infos, engines, strict=True):
            server = servers.get((kv.host, kv.port))
            if server is None:
                server = servers[kv.host, kv.port] = SideChannelServer(kv.host, kv.port)
            server.register(kv.engine_id, engine)
            if served.kv_transfer.port == kv.port:
                # SGLang's decode legs ask the first rank's port (the server's bootstrap port).
                for other in engines:
                    server.register_unnamed(other)
    return list(servers.values())


@dataclass(slots=True)
class Runtime:
    config: ModelsConfig
    script: Script
    state: ApiState
    app: LlmsimApp
    metrics: MetricsHub
    # For the HTTP protocol's arrival stamps (None: no scheduler engine, no step loop to poll it).
    arrival_watch: ArrivalWatch | None = None


def build_runtime(
    config_path: str | Path | None = None,
    responses_path: str | Path | None = None,
    *,
    clock: Clock | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    max_request_output_tokens: int = DEFAULT_MAX_REQUEST_OUTPUT_TOKENS,
    access: Access | None = None,
    identity: Identity | None = None,
    crash: Crash = exit_process,
    fast_path: bool = True,
    checked_config: tuple[ModelsConfig, str] | None = None,
    dp_rank: int | None = None,
    share: LoopShare | None = None,
    replica: Replica = UNKNOWN_REPLICA,
) -> Runtime:
    """Parse, check and wire everything. Raises ConfigError before anything listens.

    ``access`` (API and admin keys) and ``identity`` (pod and namespace headers) come from the
    command line; ``crash`` is what the ``crash`` fault calls (tests pass a stand-in);
    ``fast_path`` False sends the completion routes through FastAPI's whole stack (docs/transport.md);
    ``checked_config``: a config already checked and what errors call it (``vllm serve``'s flags), instead of
    ``config_path``; ``dp_rank``: serve only this data-parallel rank of each model (the server of
    one port of an external-load-balancing deployment run in one process, :func:`external_ports`),
    with what the servers of that process share (``share``: their clock, release gate and arrival watch);
    ``replica``: this process's ordinal and fleet size, for fault timelines.
    """
    config, file = checked_config if checked_config is not None else load_config(config_path)
    ports = external_ports(config, file)
    if ports > 1 and dp_rank is None:
        raise ConfigError(
            file,
            f"external load balancing over {ports} ranks: one server per rank (llmsim serve starts them)",
            entry=config.entry_label(config.models[0].name),
            field="data_parallel.load_balancing",
        )
    script = load_responses(responses_path)
    clock = share.clock if share is not None else clock or MonotonicClock()
    created = int(time.time())
    models: dict[str, ServedModel] = {}
    hub = MetricsHub()
    # One PUB socket per endpoint, shared by the models publishing there (each on its own topic).
    publishers: dict[str, ZmqPublisher] = {}
    # One for the event loop: every scheduler engine's releases go before any request's work.
    gate = ReleaseGate(clock.now) if any(m.engine == "scheduler" for m in config.models) else None
    # Requests that come in while a step loop holds the loop, noted by it (llmsim serve's protocol reads it).
    watch = ArrivalWatch() if gate is not None else None
    if share is not None and gate is not None:
        gate, watch = share.gate, share.watch
    poll_arrivals = watch.poll if watch is not None else None
    try:
        for model in config.models:
            models[model.name] = _serve_model(
                config,
                model,
                file,
                script,
                clock,
                hub,
                publishers,
                created,
                crash,
                gate,
                poll_arrivals,
                dp_rank,
                replica,
            )
    except BaseException:
        for publisher in publishers.values():
            publisher.close()
        raise

    def abort_requests() -> int:
        return sum(served.engine.abort_requests() for served in models.values())

    lifecycle = Lifecycle(clock.now, config.startup_seconds, abort_requests)
    state = ApiState(
        models=models,
        clock=clock,
        lifecycle=lifecycle,
        max_request_bytes=max_request_bytes,
        max_request_output_tokens=max_request_output_tokens,
        release_gate=gate,
    )
    for served in models.values():
        for adapter in served.lora_adapters:
            state.lora_adapters[adapter] = served.name
        for alias in served.aliases:
            state.aliases[alias] = served.name

    channels = side_channels(models)
    timeline_tasks: list[asyncio.Task[None]] = []

    async def start() -> None:
        for served in models.values():
            await served.engine.start()
            if served.timeline is not None:
                timeline_tasks.append(asyncio.create_task(served.timeline.run(), name=f"timeline {served.name}"))
        for channel in channels:
            await channel.start()
        # Everything built at startup lives forever: keep it out of the collector's way, so a
        # full collection (measured 13.7 ms) does not land in the middle of a token stream.
        gc.collect()
        gc.freeze()

    async def stop() -> None:
        for task in timeline_tasks:
            task.cancel()
        for channel in channels:
            await channel.stop()
        for served in models.values():
            await served.engine.stop()
        for publisher in publishers.values():
            publisher.close()

    app = create_app(state, on_startup=start, on_shutdown=stop, access=access, identity=identity, fast_path=fast_path)
    app.add_page_routes(hub.routes())
    if runtime_lora_updating():
        logger.warning(
            "LoRA dynamic loading & unloading is enabled in the API server. This should ONLY be used for local development!"
        )
        for route in lora_routes(state):
            app.add_json_route(
                route.path,
                route.endpoint,
                [LORA_BODIES[route.path]],
                None,
                response_class=PlainTextResponse,
                summary=route.endpoint.__doc__,
            )
    if dev_mode():
        app.add_page_routes(dev_routes(state))
    return Runtime(config=config, script=script, state=state, app=app, metrics=hub, arrival_watch=watch)
