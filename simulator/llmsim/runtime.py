"""The composition root: the only module that reads the parsed config.

At startup it builds one generator and one engine per model, checks each engine's required
config sections, wires engine observers, and hands the API a ready :class:`ApiState`. A broken
config raises :class:`~llmsim.errors.ConfigError` here, before any port is bound.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from llmsim.api.access import Access
from llmsim.api.app import LlmsimApp, create_app
from llmsim.api.faults import Crash, FaultInjector, exit_process
from llmsim.api.identity import Identity
from llmsim.api.lifecycle import Lifecycle
from llmsim.api.served import EngineInfo, ServedModel
from llmsim.api.state import DEFAULT_MAX_REQUEST_BYTES, ApiState
from llmsim.config import ModelConfig, ModelsConfig, load_models_config
from llmsim.config.loader import EMBEDDED_MODELS
from llmsim.config.schema import SchedulerSection
from llmsim.engine import Clock, Engine, EngineObserver, MonotonicClock
from llmsim.engine.fixed import FixedEngine, FixedTiming
from llmsim.engine.instant import InstantEngine
from llmsim.engine.scheduler.driver import SchedulerEngine
from llmsim.engine.scheduler.params import (
    GpuSpec,
    ModelSpec,
    SchedulerParams,
    check_context_fits,
    default_limits,
    num_kv_blocks,
)
from llmsim.errors import ConfigError
from llmsim.llm import Generator, Script, load_responses
from llmsim.metrics import MetricsHub, cache_config_labels

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
            compute_efficiency=model.efficiency.compute,
            memory_efficiency=model.efficiency.memory,
        )
        check_context_fits(params, num_kv_blocks(params))
    except ValueError as exc:
        raise ConfigError(file, str(exc), entry=config.entry_label(model.name), field="kv_cache") from None
    return params


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
    config: ModelsConfig, model: ModelConfig, clock: Clock, observer: EngineObserver, file: str
) -> BuiltEngine:
    """One engine for one model. Raises ConfigError."""
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
        return BuiltEngine(SchedulerEngine(params, clock, observer), info, cache_config)
    info = EngineInfo(engine=model.engine)
    if model.engine == "fixed":
        return BuiltEngine(FixedEngine(fixed_timing(model), clock, observer), info)
    return BuiltEngine(InstantEngine(clock, observer), info)


@dataclass(slots=True)
class Runtime:
    config: ModelsConfig
    script: Script
    state: ApiState
    app: LlmsimApp
    metrics: MetricsHub


def build_runtime(
    config_path: str | Path | None = None,
    responses_path: str | Path | None = None,
    *,
    clock: Clock | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    access: Access | None = None,
    identity: Identity | None = None,
    crash: Crash = exit_process,
) -> Runtime:
    """Parse, check and wire everything. Raises ConfigError before anything listens.

    ``access`` (API and admin keys) and ``identity`` (pod and namespace headers) come from the
    command line; ``crash`` is what the ``crash`` fault calls (tests pass a stand-in).
    """
    config = load_models_config(config_path)
    file = str(config_path) if config_path is not None else EMBEDDED_MODELS
    script = load_responses(responses_path)
    clock = clock or MonotonicClock()
    created = int(time.time())
    models: dict[str, ServedModel] = {}
    hub = MetricsHub()
    for model in config.models:
        metrics = hub.add_model(model.name, max_model_len=model.context_length, legacy_metrics=model.legacy_metrics)
        built = build_engine(config, model, clock, metrics, file)
        metrics.bind(built.engine.snapshot, built.cache_config)
        generator = Generator(script, model_name=model.name, context_length=model.context_length)
        models[model.name] = ServedModel(
            name=model.name,
            generator=generator,
            engine=built.engine,
            context_length=model.context_length,
            created=created,
            info=built.info,
            observe_lags=metrics.observe_lags,
            embedding_dimensions=model.embeddings.dimensions if model.embeddings is not None else None,
            faults=FaultInjector(model.name, model.faults, metrics.count_fault, crash),
        )

    def abort_requests() -> int:
        return sum(served.engine.abort_requests() for served in models.values())

    lifecycle = Lifecycle(clock.now, config.startup_seconds, abort_requests)
    state = ApiState(models=models, clock=clock, lifecycle=lifecycle, max_request_bytes=max_request_bytes)

    async def start() -> None:
        for served in models.values():
            await served.engine.start()
        # Everything built at startup lives forever: keep it out of the collector's way, so a
        # full collection (measured 13.7 ms) does not land in the middle of a token stream.
        gc.collect()
        gc.freeze()

    async def stop() -> None:
        for served in models.values():
            await served.engine.stop()

    app = create_app(state, on_startup=start, on_shutdown=stop, access=access, identity=identity)
    app.add_page_routes(hub.routes())
    return Runtime(config=config, script=script, state=state, app=app, metrics=hub)
