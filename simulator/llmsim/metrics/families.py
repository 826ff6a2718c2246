"""The metric families on the /metrics page, in page order: vLLM's names, help texts and labels.

Counter names are given without ``_total`` (prometheus_client's convention, as vLLM declares
them); the exposition adds it. Both renderers (:mod:`.collector` and :mod:`.exposition`) walk
these tables, so the two pages cannot drift apart in what they list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Generic, TypeVar

from prometheus_client import utils as prometheus_utils

from llmsim.metrics.histogram import Histogram
from llmsim.metrics.model import ModelMetrics

#: vLLM's per-engine labels; ``engine`` is the data-parallel rank (``ModelMetrics.engine``).
LABELS = ("model_name", "engine")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Family(Generic[T]):
    name: str
    doc: str
    of: Callable[[ModelMetrics], T]


# Gauges, read from the engine's snapshot at scrape time.
RUNNING = ("vllm:num_requests_running", "Number of requests in model execution batches.")
WAITING = ("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
KV_USAGE = ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
LEGACY_KV_USAGE = (
    "vllm:gpu_cache_usage_perc",
    "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
)
# NOTE: vLLM labels cache_config_info with ``engine`` only (one model per server); llmsim serves
# several models from one process, so ``model_name`` is added to keep their series apart.
CACHE_CONFIG = ("vllm:cache_config_info", "Information of the LLMEngine CacheConfig")
# Only for models with LoRA on. vLLM labels it max_lora, waiting_lora_adapters and
# running_lora_adapters only; llmsim adds model_name and engine (several models per process).
LORA_INFO = ("vllm:lora_requests_info", "Running stats on lora requests.")
LORA_LABELS = ("max_lora", "running_lora_adapters", "waiting_lora_adapters")
# Labelled by ``finished_reason``; every reason is listed from the start, as vLLM pre-creates each
# child, so rate() has its zero.
SUCCESS = ("vllm:request_success", "Count of successfully processed requests.")
INFO = ("llmsim_info", "llmsim build information.")
# Labelled by ``kind``; every kind listed from the start.
FAULTS = ("llmsim_faults_injected", "Faults injected into requests (fault injection), by kind.")
# Models with a fault timeline only, labelled by ``phase`` (every phase of the timeline, ``base`` first).
FAULT_PHASE = ("llmsim_fault_phase", "Current phase of the fault timeline (1 for the current phase, 0 for the others).")
FAULT_PHASE_TRANSITIONS = ("llmsim_fault_phase_transitions", "Times the fault timeline entered each phase.")

COUNTERS: tuple[Family[int], ...] = (
    Family("vllm:prompt_tokens", "Number of prefill tokens processed.", lambda m: m.prompt_tokens),
    Family("vllm:generation_tokens", "Number of generation tokens processed.", lambda m: m.generation_tokens),
    Family("vllm:num_preemptions", "Cumulative number of preemption from the engine.", lambda m: m.preemptions),
    Family(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        lambda m: m.prefix_cache_queries,
    ),
    Family(
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        lambda m: m.prefix_cache_hits,
    ),
    Family(
        "vllm:external_prefix_cache_queries",
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of "
        "queried tokens.",
        lambda m: m.external_prefix_cache_queries,
    ),
    Family(
        "vllm:external_prefix_cache_hits",
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of "
        "cached tokens.",
        lambda m: m.external_prefix_cache_hits,
    ),
    Family(
        "vllm:prompt_tokens_cached",
        "Number of cached prompt tokens (local + external).",
        lambda m: m.prompt_tokens_cached,
    ),
    Family(
        "vllm:prompt_tokens_recomputed",
        "Number of cached tokens recomputed for forward pass.",
        lambda m: m.prompt_tokens_recomputed,
    ),
)

# Labelled by ``source`` (vLLM's PromptTokenStats.ALL_SOURCES, every one from the start).
BY_SOURCE = ("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.")

HISTOGRAMS: tuple[Family[Histogram], ...] = (
    Family("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lambda m: m.ttft),
    Family("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", lambda m: m.itl),
    Family(
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        lambda m: m.tpot,
    ),
    Family("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", lambda m: m.e2e),
    Family(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        lambda m: m.queue_time,
    ),
    Family(
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        lambda m: m.inference_time,
    ),
    Family(
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        lambda m: m.prefill_time,
    ),
    Family(
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        lambda m: m.decode_time,
    ),
    Family("vllm:request_prompt_tokens", "Number of prefill tokens processed.", lambda m: m.request_prompt_tokens),
    Family(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        lambda m: m.request_generation_tokens,
    ),
    Family(
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        lambda m: m.prefill_kv_computed,
    ),
    Family(
        "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", lambda m: m.iteration_tokens
    ),
    Family(
        "llmsim_token_lag_seconds",
        "How late each token left the server against its simulated deadline (simulator error, not simulated latency).",
        lambda m: m.token_lag,
    ),
    Family(
        "llmsim_step_lag_seconds",
        "How late each scheduler step was released against its simulated deadline (simulator error).",
        lambda m: m.step_lag,
    ),
    Family("llmsim_step_duration_seconds", "Simulated duration of each scheduler step.", lambda m: m.step_duration),
    Family("llmsim_batch_size", "Sequences that got tokens computed in each scheduler step.", lambda m: m.batch_size),
)

# Deprecated vLLM names, only for models with ``legacy_metrics: true``.
LEGACY_COUNTERS: tuple[Family[int], ...] = (
    Family(
        "vllm:gpu_prefix_cache_queries",
        "GPU prefix cache queries, in terms of number of queried tokens. "
        "DEPRECATED: Use vllm:prefix_cache_queries instead.",
        lambda m: m.prefix_cache_queries,
    ),
    Family(
        "vllm:gpu_prefix_cache_hits",
        "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.",
        lambda m: m.prefix_cache_hits,
    ),
)
LEGACY_HISTOGRAMS: tuple[Family[Histogram], ...] = (
    # The same per-token values as vllm:inter_token_latency_seconds, which replaced it.
    Family(
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
        lambda m: m.itl,
    ),
)

# prometheus_client's own number formatting ("0.001", "1.0", "1e+06", "+Inf"); the module is untyped.
go_float: Callable[[float], str] = prometheus_utils.floatToGoString


@cache
def le_labels(bounds: tuple[float, ...]) -> tuple[str, ...]:
    """``le`` label values of a bucket set, ending with ``+Inf``; formatted once, not per scrape."""
    return (*(go_float(b) for b in bounds), "+Inf")


def cache_config_keys(models: Iterable[ModelMetrics]) -> list[str]:
    """Label names of vllm:cache_config_info: the union over models (one family, one label set)."""
    return sorted({k for m in models for k in (m.cache_config or {})})


def lora_adapter_labels(running: tuple[str, ...], waiting: tuple[str, ...]) -> tuple[str, str]:
    """``(running_lora_adapters, waiting_lora_adapters)`` label values, as vLLM 0.34 exports them.

    vLLM fills both from one dict holding every adapter with a waiting *or* running request and
    exports its keys (``v1/metrics/stats.py``): the two labels carry the same comma-joined list.
    """
    names = ",".join(dict.fromkeys((*running, *waiting)))
    return names, names


def kv_usage(used: int, total: int) -> float:
    # vLLM: 1 - free/total blocks; 0 for an engine without a KV cache.
    return used / total if total else 0.0
