"""A prometheus_client Collector that builds every family from the models at scrape time.

This is the reference rendering (prometheus_client's own types and text encoder); /metrics
serves :mod:`.exposition`, which writes the same bytes faster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from llmsim import __version__
from llmsim.metrics import families as f
from llmsim.metrics.histogram import Histogram
from llmsim.metrics.model import ModelMetrics


def _histogram(family: f.Family[Histogram], models: Iterable[ModelMetrics]) -> HistogramMetricFamily:
    out = HistogramMetricFamily(family.name, family.doc, labels=f.LABELS)
    for m in models:
        h = family.of(m)
        buckets = list(zip(f.le_labels(h.bounds), h.cumulative(), strict=True))
        out.add_metric([m.name, m.engine], buckets=buckets, sum_value=h.sum)
    return out


def _counter(family: f.Family[int], models: Iterable[ModelMetrics]) -> CounterMetricFamily:
    out = CounterMetricFamily(family.name, family.doc, labels=f.LABELS)
    for m in models:
        out.add_metric([m.name, m.engine], family.of(m))
    return out


class VllmCollector(Collector):
    """Yields fresh families on every scrape from ``models()`` (read each time: models may be added)."""

    def __init__(self, models: Callable[[], Iterable[ModelMetrics]]) -> None:
        self._models = models

    def collect(self) -> Iterator[Metric]:
        models = list(self._models())
        legacy = [m for m in models if m.legacy_metrics]
        running = GaugeMetricFamily(*f.RUNNING, labels=f.LABELS)
        waiting = GaugeMetricFamily(*f.WAITING, labels=f.LABELS)
        usage = GaugeMetricFamily(*f.KV_USAGE, labels=f.LABELS)
        legacy_usage = GaugeMetricFamily(*f.LEGACY_KV_USAGE, labels=f.LABELS)
        for m in models:
            snap = m.snapshot()
            labels = [m.name, m.engine]
            running.add_metric(labels, snap.num_running)
            waiting.add_metric(labels, snap.num_waiting)
            kv = f.kv_usage(snap.kv_used_blocks, snap.kv_total_blocks)
            usage.add_metric(labels, kv)
            if m.legacy_metrics:
                legacy_usage.add_metric(labels, kv)
        yield from (running, waiting, usage)
        if legacy:
            yield legacy_usage
        with_cache = [m for m in models if m.cache_config is not None]
        if with_cache:
            keys = f.cache_config_keys(with_cache)
            info = GaugeMetricFamily(*f.CACHE_CONFIG, labels=(*f.LABELS, *keys))
            for m in with_cache:
                config = m.cache_config or {}
                info.add_metric([m.name, m.engine, *(config.get(k, "") for k in keys)], 1)
            yield info
        with_lora = [m for m in models if m.max_lora is not None]
        if with_lora:
            lora_info = GaugeMetricFamily(*f.LORA_INFO, labels=(*f.LABELS, *f.LORA_LABELS))
            for m in with_lora:
                snap = m.snapshot()
                on, queued = f.lora_adapter_labels(snap.running_lora_adapters, snap.waiting_lora_adapters)
                lora_info.add_metric([m.name, m.engine, str(m.max_lora), on, queued], m.wall_clock())
            yield lora_info
        for counter in f.COUNTERS:
            yield _counter(counter, models)
        by_source = CounterMetricFamily(*f.BY_SOURCE, labels=(*f.LABELS, "source"))
        for m in models:
            for source, n in m.prompt_tokens_by_source.items():
                by_source.add_metric([m.name, m.engine, source], n)
        yield by_source
        success = CounterMetricFamily(*f.SUCCESS, labels=(*f.LABELS, "finished_reason"))
        for m in models:
            for reason, n in m.requests.items():
                success.add_metric([m.name, m.engine, str(reason)], n)
        yield success
        for histogram in f.HISTOGRAMS:
            yield _histogram(histogram, models)
        faults = CounterMetricFamily(*f.FAULTS, labels=(*f.LABELS, "kind"))
        for m in models:
            for kind, n in m.faults_injected.items():
                faults.add_metric([m.name, m.engine, kind], n)
        yield faults
        phased = [m for m in models if m.fault_phase_transitions]
        if phased:
            phase = GaugeMetricFamily(*f.FAULT_PHASE, labels=(*f.LABELS, "phase"))
            transitions = CounterMetricFamily(*f.FAULT_PHASE_TRANSITIONS, labels=(*f.LABELS, "phase"))
            for m in phased:
                for name, n in m.fault_phase_transitions.items():
                    phase.add_metric([m.name, m.engine, name], 1 if name == m.fault_phase else 0)
                    transitions.add_metric([m.name, m.engine, name], n)
            yield phase
            yield transitions
        if legacy:
            for counter in f.LEGACY_COUNTERS:
                yield _counter(counter, legacy)
            for histogram in f.LEGACY_HISTOGRAMS:
                yield _histogram(histogram, legacy)
        info = GaugeMetricFamily(*f.INFO, labels=("version",))
        info.add_metric([__version__], 1)
        yield info
