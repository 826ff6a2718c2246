"""One served model's metrics: an :class:`~llmsim.engine.EngineObserver` plus the API's lag sink."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise

from llmsim.config.schema import FAULT_KINDS
from llmsim.metrics import buckets
from llmsim.metrics.histogram import Histogram
from llmsim.metrics.latency_summary import LatencySummary
from llmsim.types import EngineSnapshot, FinishReason, RequestStats, StepStats

Snapshot = Callable[[], EngineSnapshot]

#: vLLM's PromptTokenStats.ALL_SOURCES, the ``source`` label's values.
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")

_IDLE = EngineSnapshot(num_running=0, num_waiting=0, kv_used_blocks=0, kv_total_blocks=0)


def _idle() -> EngineSnapshot:
    return _IDLE


class ModelMetrics:
    """Counters and histograms of one model, fed by its engine and by the API, read at scrape time.

    Every value is what vLLM would compute from the *simulated* timeline (see docs/metrics.md for
    each definition), except the ``llmsim_*`` lag histograms, which measure the simulator itself.
    Gauges (running, waiting, KV usage) are not kept here: they are read from ``snapshot`` when
    Prometheus scrapes.
    """

    def __init__(
        self,
        name: str,
        *,
        max_model_len: int,
        snapshot: Snapshot | None = None,
        cache_config: Mapping[str, str] | None = None,
        legacy_metrics: bool = False,
        max_lora: int | None = None,
        engine: int = 0,
    ) -> None:
        self.name = name
        # vLLM's ``engine`` label: the data-parallel rank (global) whose engine this is.
        self.engine = str(engine)
        self.legacy_metrics = legacy_metrics
        # vLLM's max_loras when LoRA is on (then vllm:lora_requests_info is exported), else None.
        self.max_lora = max_lora
        # vllm:lora_requests_info's value is a unix timestamp (vLLM: set_to_current_time()).
        self.wall_clock: Callable[[], float] = time.time
        self.snapshot: Snapshot = _idle
        self.cache_config: dict[str, str] | None = None
        self.bind(snapshot or _idle, cache_config)
        # Counters (never reset).
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.requests = dict.fromkeys(FinishReason, 0)
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.external_prefix_cache_queries = 0
        self.external_prefix_cache_hits = 0
        # vLLM's PromptTokenStats: prompt tokens by source, cached and recomputed.
        self.prompt_tokens_by_source = dict.fromkeys(PROMPT_SOURCES, 0)
        self.prompt_tokens_cached = 0
        self.prompt_tokens_recomputed = 0
        # llmsim_faults_injected_total{kind}: every kind from the start, so rate() has its zero.
        self.faults_injected = dict.fromkeys(FAULT_KINDS, 0)
        # Fault timeline (models with one only): times each phase was entered, every phase from 0,
        # and the current phase (llmsim_fault_phase is 1 for it, 0 for the others).
        self.fault_phase_transitions: dict[str, int] = {}
        self.fault_phase: str | None = None
        # vLLM's histograms.
        self.ttft = Histogram(buckets.TTFT_BUCKETS)
        self.itl = Histogram(buckets.TOKEN_LATENCY_BUCKETS)
        self.tpot = Histogram(buckets.TOKEN_LATENCY_BUCKETS)
        self.e2e = Histogram(buckets.REQUEST_LATENCY_BUCKETS)
        self.queue_time = Histogram(buckets.REQUEST_LATENCY_BUCKETS)
        self.inference_time = Histogram(buckets.REQUEST_LATENCY_BUCKETS)
        self.prefill_time = Histogram(buckets.REQUEST_LATENCY_BUCKETS)
        self.decode_time = Histogram(buckets.REQUEST_LATENCY_BUCKETS)
        token_buckets = buckets.build_1_2_5_buckets(max_model_len)
        self.request_prompt_tokens = Histogram(token_buckets)
        self.request_generation_tokens = Histogram(token_buckets)
        self.prefill_kv_computed = Histogram(token_buckets)
        self.iteration_tokens = Histogram(buckets.ITERATION_TOKENS_BUCKETS)
        # llmsim's own.
        self.token_lag = Histogram(buckets.LAG_BUCKETS)
        self.step_lag = Histogram(buckets.LAG_BUCKETS)
        self.step_duration = Histogram(buckets.STEP_DURATION_BUCKETS)
        self.batch_size = Histogram(buckets.BATCH_SIZE_BUCKETS)
        self.summary = LatencySummary()

    def bind(self, snapshot: Snapshot, cache_config: Mapping[str, str] | None = None) -> None:
        """Attach the engine once it exists (it is built with this object as its observer)."""
        self.snapshot = snapshot
        self.cache_config = dict(cache_config) if cache_config is not None else None

    def reset_summary(self) -> None:
        self.summary = LatencySummary()

    # EngineObserver -------------------------------------------------------------------------

    def on_step(self, stats: StepStats) -> None:
        tokens = stats.num_prefill_tokens + stats.num_decode_tokens
        self.iteration_tokens.observe(tokens)
        self.step_duration.observe(stats.duration)
        self.step_lag.observe(stats.lag)
        self.batch_size.observe(stats.batch_size)
        # Counted per step, as vLLM does, so the counter moves while victims are still running.
        self.preemptions += stats.num_preemptions
        # In tokens, once per request at its first admission (vLLM 0.34's scheduler stats).
        self.prefix_cache_queries += stats.prefix_cache_queries
        self.prefix_cache_hits += stats.prefix_cache_hits
        self.external_prefix_cache_queries += stats.external_prefix_cache_queries
        self.external_prefix_cache_hits += stats.external_prefix_cache_hits
        summary = self.summary
        summary.preemptions += stats.num_preemptions
        summary.step_duration.add(stats.duration)
        summary.step_lag.add(stats.lag)
        summary.batch_size.add(stats.batch_size)

    def on_first_token(self, ttft: float) -> None:
        # Observed now, not at the end of the stream, so TTFT dashboards don't wait for long outputs.
        self.ttft.observe(ttft)
        self.summary.ttft.add(ttft)

    def on_request_finished(self, stats: RequestStats) -> None:
        summary = self.summary
        self.requests[stats.finish_reason] += 1
        summary.requests[stats.finish_reason] += 1
        first = stats.first_token
        # vLLM counts a prompt when its first token comes out: one aborted in the queue never counts.
        if first is not None:
            self.prompt_tokens += stats.prompt_tokens
            summary.prompt_tokens += stats.prompt_tokens
            self._count_prompt_sources(stats)
        self.generation_tokens += stats.output_tokens
        summary.generation_tokens += stats.output_tokens

        e2e = stats.e2e
        queue_time = stats.queue_time
        self.e2e.observe(e2e)
        self.queue_time.observe(queue_time)
        summary.e2e.add(e2e)
        summary.queue_time.add(queue_time)
        self.request_prompt_tokens.observe(stats.prompt_tokens)
        self.request_generation_tokens.observe(stats.output_tokens)
        # vLLM's vllm:request_prefill_kv_computed_tokens: the prompt less its prefix-cache hit, for
        # every finished request, as vLLM observes it (one aborted while waiting hit nothing).
        self.prefill_kv_computed.observe(stats.prompt_tokens - max(stats.num_cached_tokens, 0))
        if first is None:
            return  # no token: prefill, decode and per-token latencies are undefined

        times = stats.token_times
        last = times[-1] if times else first
        decode = last - first
        self.decode_time.observe(decode)
        if stats.scheduled is not None:
            self.prefill_time.observe(first - stats.scheduled)
            self.inference_time.observe(last - stats.scheduled)
        # vLLM leaves out the first token (it came from prefill) and reports 0 for a 1-token output.
        self.tpot.observe(decode / (stats.output_tokens - 1) if stats.output_tokens > 1 else 0.0)
        # ITL from the release times, batched per request: one pass here instead of work per token.
        if len(times) > 1:
            gaps = [b - a for a, b in pairwise(times)]
            self.itl.observe_many(gaps)
            summary.itl.add_many(gaps)

    def _count_prompt_sources(self, stats: RequestStats) -> None:
        """vLLM's ``PromptTokenStats.update_from_output``, its formula as written: when all but the
        last prompt token were cached, that token counts as recomputed (and as cached too)."""
        prompt = stats.prompt_tokens
        cached = stats.num_cached_tokens
        external = stats.num_external_tokens
        recomputed = 1 if cached + 1 == prompt else 0
        by_source = self.prompt_tokens_by_source
        by_source["local_compute"] += prompt - cached
        by_source["local_cache_hit"] += cached + recomputed - external
        by_source["external_kv_transfer"] += external
        self.prompt_tokens_cached += cached
        self.prompt_tokens_recomputed += recomputed

    # API ------------------------------------------------------------------------------------

    def count_fault(self, kind: str) -> None:
        """One injected fault of ``kind`` (the API's fault injection reports here)."""
        self.faults_injected[kind] += 1

    def set_fault_phases(self, names: Sequence[str]) -> None:
        """The phases of a new fault timeline (with ``base`` first); their transition counts start at 0."""
        self.fault_phase_transitions = dict.fromkeys(names, 0) | {
            k: v for k, v in self.fault_phase_transitions.items() if k in names
        }
        self.fault_phase = names[0] if names else None

    def enter_fault_phase(self, name: str) -> None:
        """The fault timeline entered phase ``name``."""
        self.fault_phase = name
        self.fault_phase_transitions[name] = self.fault_phase_transitions.get(name, 0) + 1

    def observe_lags(self, lags: Sequence[float]) -> None:
        """Release lags (release - simulated deadline) of one request's tokens."""
        self.token_lag.observe_many(lags)
        self.summary.lag.add_many(lags)
