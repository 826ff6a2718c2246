"""The composition root: the only module that reads the parsed config.

At startup it builds one generator and one engine per model, checks each engine's required
config sections, wires engine observers, and hands the API a ready :class:`ApiState`. A broken
config raises :class:`~llmsim.errors.ConfigError` here, before any port is bound.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
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
from llmsim.api.served import EngineInfo, ServedModel
from llmsim.api.state import DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_REQUEST_OUTPUT_TOKENS, ApiState
from llmsim.config import ModelConfig, ModelsConfig, load_models_config
from llmsim.config.loader import EMBEDDED_MODELS
from llmsim.config.schema import SchedulerSection
from llmsim.engine import Clock, Engine, EngineObserver, MonotonicClock, ObserverGroup
from llmsim.engine.fixed import FixedEngine, FixedTiming
from llmsim.engine.instant import InstantEngine
from llmsim.engine.release_gate import ReleaseGate
from llmsim.engine.scheduler.driver import SchedulerEngine
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
from llmsim.kv_events import KVEventStream, ZmqPublisher
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
    gpu = GpuSpec(
        hbm_bytes=hw.hbm_gib * 2**30,
        memory_bandwidth=hw.memory_bandwidth_gbps * 1e9,
        peak_flops=hw.peak_tflops * 1e12,
    )
    default_batch_tokens, default_sequences = default_limits(gpu)
    try:
        params = SchedulerParams(
            gpu=gpu,
            model=ModelSpec(
                num_parameters=model.weights.parameters_billions * 1e9,
                weight_bytes=model.weights.bytes,
                kv_bytes_per_token=model.kv_cache.bytes_per_token,
            ),
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
        return BuiltEngine(
            SchedulerEngine(params, precise(clock, poll_arrivals), observer, gate, poll_arrivals), info, cache_config
        )
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
    replica: Replica = UNKNOWN_REPLICA,
) -> ServedModel:
    """One model's metrics, KV-event stream, engine and generator, wired together."""
    max_lora = model.lora.max_loras if model.lora is not None else None
    metrics = hub.add_model(
        model.name, max_model_len=model.context_length, legacy_metrics=model.legacy_metrics, max_lora=max_lora
    )
    observer: EngineObserver = metrics
    events = model.kv_events
    if events is not None and events.enable_kv_cache_events and model.engine == "scheduler":
        publisher = publishers.get(events.endpoint)
        if publisher is None:
            try:
                publisher = publishers[events.endpoint] = ZmqPublisher(events.endpoint, hwm=events.hwm)
            except OSError as exc:
                raise ConfigError(
                    file, str(exc), entry=config.entry_label(model.name), field="kv_events.endpoint"
                ) from None
        stream = KVEventStream(publisher, events.topic, model=model.name, event_format=events.event_format)
        logger.info("model %s: KV-cache events on %s, topic %r", model.name, events.endpoint, stream.topic)
        observer = ObserverGroup(metrics, stream)
    built = build_engine(config, model, clock, observer, file, gate, poll_arrivals)
    metrics.bind(built.engine.snapshot, built.cache_config)
    if model.engine != "scheduler" and model.lora is not None:
        for adapter in model.lora.adapters:
            built.engine.add_lora(adapter.name, adapter.path)
    # The scheduler's prefix cache hashes token ids: ask the generator for them.
    caching = model.engine == "scheduler" and model.kv_cache is not None and model.kv_cache.enable_prefix_caching
    generator = Generator(
        script,
        model_name=model.name,
        context_length=model.context_length,
        tokenizer=build_tokenizer(config, model, file),
        token_ids=caching or observer is not metrics,
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
    return ServedModel(
        name=model.name,
        aliases=tuple(model.aliases),
        generator=generator,
        engine=built.engine,
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
    )


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
    replica: Replica = UNKNOWN_REPLICA,
) -> Runtime:
    """Parse, check and wire everything. Raises ConfigError before anything listens.

    ``access`` (API and admin keys) and ``identity`` (pod and namespace headers) come from the
    command line; ``crash`` is what the ``crash`` fault calls (tests pass a stand-in);
    ``fast_path`` False sends the completion routes through FastAPI's whole stack (docs/transport.md);
    ``checked_config``: a config already checked and what errors call it (``vllm serve``'s flags), instead of
    ``config_path``; ``replica``: this process's ordinal and fleet size, for fault timelines.
    """
    if checked_config is not None:
        config, file = checked_config
    else:
        config = load_models_config(config_path)
        file = str(config_path) if config_path is not None else EMBEDDED_MODELS
    script = load_responses(responses_path)
    clock = clock or MonotonicClock()
    created = int(time.time())
    models: dict[str, ServedModel] = {}
    hub = MetricsHub()
    # One PUB socket per endpoint, shared by the models publishing there (each on its own topic).
    publishers: dict[str, ZmqPublisher] = {}
    # One for the event loop: every scheduler engine's releases go before any request's work.
    gate = ReleaseGate(clock.now) if any(m.engine == "scheduler" for m in config.models) else None
    # Requests that come in while a step loop holds the loop, noted by it (llmsim serve's protocol reads it).
    watch = ArrivalWatch() if gate is not None else None
    poll_arrivals = watch.poll if watch is not None else None
    try:
        for model in config.models:
            models[model.name] = _serve_model(
                config, model, file, script, clock, hub, publishers, created, crash, gate, poll_arrivals, replica
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

    timeline_tasks: list[asyncio.Task[None]] = []

    async def start() -> None:
        for served in models.values():
            await served.engine.start()
            if served.timeline is not None:
                timeline_tasks.append(asyncio.create_task(served.timeline.run(), name=f"timeline {served.name}"))
        # Everything built at startup lives forever: keep it out of the collector's way, so a
        # full collection (measured 13.7 ms) does not land in the middle of a token stream.
        gc.collect()
        gc.freeze()

    async def stop() -> None:
        for task in timeline_tasks:
            task.cancel()
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
