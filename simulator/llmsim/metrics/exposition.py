"""The /metrics page, written directly from the models: the bytes :mod:`.collector` gives, faster.

prometheus_client builds a Sample per line and escapes and sorts labels on every scrape (≈2 ms
per model, measured in bench/bench_metrics.py). Endpoint pickers scrape every 50 ms and the page
is rendered on the event loop that releases tokens, so here every line prefix (name and sorted,
escaped labels) is built once per model, and a scrape only formats numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from llmsim import __version__
from llmsim.metrics import families as f
from llmsim.metrics.histogram import Histogram
from llmsim.metrics.model import ModelMetrics


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(pairs: Mapping[str, str]) -> str:
    # The text encoder sorts labels by name.
    return ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs.items()))


def _int(n: int) -> str:
    # Same as prometheus_client's floatToGoString(n) on the common range, without the float detour.
    return f"{n}.0" if -(10**15) < n < 1_000_000 else f.go_float(n)


def _header(name: str, doc: str, kind: str) -> str:
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


class _ModelLines:
    """Every line prefix of one model, up to and including the space before the value."""

    __slots__ = ("buckets", "by_source", "counts", "faults", "label_str", "plain", "success", "sums")

    def __init__(self, m: ModelMetrics) -> None:
        base = {"model_name": m.name, "engine": m.engine}
        self.label_str = _labels(base)
        names = [g[0] for g in (f.RUNNING, f.WAITING, f.KV_USAGE, f.LEGACY_KV_USAGE)]
        names += [c.name + "_total" for c in (*f.COUNTERS, *f.LEGACY_COUNTERS)]
        self.plain = {name: f"{name}{{{self.label_str}}} " for name in names}
        self.success = {
            reason: f"{f.SUCCESS[0]}_total{{{_labels(base | {'finished_reason': str(reason)})}}} "
            for reason in m.requests
        }
        self.by_source = {
            source: f"{f.BY_SOURCE[0]}_total{{{_labels(base | {'source': source})}}} "
            for source in m.prompt_tokens_by_source
        }
        self.faults = {kind: f"{f.FAULTS[0]}_total{{{_labels(base | {'kind': kind})}}} " for kind in m.faults_injected}
        self.buckets: dict[str, list[str]] = {}
        self.counts: dict[str, str] = {}
        self.sums: dict[str, str] = {}
        for family in (*f.HISTOGRAMS, *f.LEGACY_HISTOGRAMS):
            les = f.le_labels(family.of(m).bounds)
            self.buckets[family.name] = [f"{family.name}_bucket{{{_labels(base | {'le': le})}}} " for le in les]
            self.counts[family.name] = f"{family.name}_count{{{self.label_str}}} "
            self.sums[family.name] = f"{family.name}_sum{{{self.label_str}}} "


class Exposition:
    """Renders the Prometheus text format (0.0.4) for ``models()``."""

    def __init__(self, models: Callable[[], Iterable[ModelMetrics]]) -> None:
        self._models = models
        self._lines: dict[tuple[str, str], tuple[ModelMetrics, _ModelLines]] = {}
        self._info = _header(*f.INFO, "gauge") + f'llmsim_info{{version="{_escape(__version__)}"}} 1.0\n'

    def _lines_of(self, m: ModelMetrics) -> _ModelLines:
        key = (m.name, m.engine)
        cached = self._lines.get(key)
        if cached is None or cached[0] is not m:
            cached = self._lines[key] = (m, _ModelLines(m))
        return cached[1]

    def render(self) -> bytes:
        models = [(m, self._lines_of(m)) for m in self._models()]
        legacy = [(m, lines) for m, lines in models if m.legacy_metrics]
        out: list[str] = []
        add = out.append
        # The three gauges come from one snapshot per model; each family's lines are gathered apart.
        running: list[str] = []
        waiting: list[str] = []
        usage: list[str] = []
        legacy_usage: list[str] = []
        for m, lines in models:
            snap = m.snapshot()
            kv = f.go_float(f.kv_usage(snap.kv_used_blocks, snap.kv_total_blocks))
            plain = lines.plain
            running += (plain[f.RUNNING[0]], _int(snap.num_running), "\n")
            waiting += (plain[f.WAITING[0]], _int(snap.num_waiting), "\n")
            usage += (plain[f.KV_USAGE[0]], kv, "\n")
            if m.legacy_metrics:
                legacy_usage += (plain[f.LEGACY_KV_USAGE[0]], kv, "\n")
        gauges = [(f.RUNNING, running), (f.WAITING, waiting), (f.KV_USAGE, usage)]
        if legacy:
            gauges.append((f.LEGACY_KV_USAGE, legacy_usage))
        for (name, doc), gauge_lines in gauges:
            add(_header(name, doc, "gauge"))
            out += gauge_lines
        with_cache = [m for m, _ in models if m.cache_config is not None]
        if with_cache:
            keys = f.cache_config_keys(with_cache)
            add(_header(*f.CACHE_CONFIG, "gauge"))
            for m in with_cache:
                config = m.cache_config or {}
                pairs = {"model_name": m.name, "engine": m.engine} | {k: config.get(k, "") for k in keys}
                add(f"{f.CACHE_CONFIG[0]}{{{_labels(pairs)}}} 1.0\n")
        with_lora = [m for m, _ in models if m.max_lora is not None]
        if with_lora:
            add(_header(*f.LORA_INFO, "gauge"))
            for m in with_lora:
                snap = m.snapshot()
                on, queued = f.lora_adapter_labels(snap.running_lora_adapters, snap.waiting_lora_adapters)
                lora_pairs = {"model_name": m.name, "engine": m.engine, "max_lora": str(m.max_lora)}
                lora_pairs |= {"running_lora_adapters": on, "waiting_lora_adapters": queued}
                add(f"{f.LORA_INFO[0]}{{{_labels(lora_pairs)}}} {f.go_float(m.wall_clock())}\n")
        self._counters(out, f.COUNTERS, models)
        add(_header(f.BY_SOURCE[0] + "_total", f.BY_SOURCE[1], "counter"))
        for m, lines in models:
            for source, n in m.prompt_tokens_by_source.items():
                out += (lines.by_source[source], _int(n), "\n")
        add(_header(f.SUCCESS[0] + "_total", f.SUCCESS[1], "counter"))
        for m, lines in models:
            for reason, n in m.requests.items():
                out += (lines.success[reason], _int(n), "\n")
        self._histograms(out, f.HISTOGRAMS, models)
        add(_header(f.FAULTS[0] + "_total", f.FAULTS[1], "counter"))
        for m, lines in models:
            for kind, n in m.faults_injected.items():
                out += (lines.faults[kind], _int(n), "\n")
        phased = [m for m, _ in models if m.fault_phase_transitions]
        if phased:
            # Only models with a fault timeline, a handful of phases: built per scrape, not cached.
            add(_header(*f.FAULT_PHASE, "gauge"))
            for m in phased:
                for name in m.fault_phase_transitions:
                    pairs = {"model_name": m.name, "engine": m.engine, "phase": name}
                    add(f"{f.FAULT_PHASE[0]}{{{_labels(pairs)}}} {_int(1 if name == m.fault_phase else 0)}\n")
            add(_header(f.FAULT_PHASE_TRANSITIONS[0] + "_total", f.FAULT_PHASE_TRANSITIONS[1], "counter"))
            for m in phased:
                for name, n in m.fault_phase_transitions.items():
                    pairs = {"model_name": m.name, "engine": m.engine, "phase": name}
                    add(f"{f.FAULT_PHASE_TRANSITIONS[0]}_total{{{_labels(pairs)}}} {_int(n)}\n")
        if legacy:
            self._counters(out, f.LEGACY_COUNTERS, legacy)
            self._histograms(out, f.LEGACY_HISTOGRAMS, legacy)
        add(self._info)
        return "".join(out).encode()

    @staticmethod
    def _counters(
        out: list[str], counters: Iterable[f.Family[int]], models: list[tuple[ModelMetrics, _ModelLines]]
    ) -> None:
        for family in counters:
            name = family.name + "_total"
            out.append(_header(name, family.doc, "counter"))
            for m, lines in models:
                out += (lines.plain[name], _int(family.of(m)), "\n")

    @staticmethod
    def _histograms(
        out: list[str], histograms: Iterable[f.Family[Histogram]], models: list[tuple[ModelMetrics, _ModelLines]]
    ) -> None:
        for family in histograms:
            name = family.name
            out.append(_header(name, family.doc, "histogram"))
            for m, lines in models:
                h = family.of(m)
                running = 0
                # ≈20 lines per histogram per model: the bulk of the page.
                for prefix, n in zip(lines.buckets[name], h.counts, strict=True):
                    running += n
                    out += (prefix, _int(running), "\n")
                out += (lines.counts[name], _int(running), "\n", lines.sums[name], f.go_float(h.sum), "\n")
