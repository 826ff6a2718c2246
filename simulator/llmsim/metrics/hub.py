"""One server's metrics: its models, a private Prometheus registry, and the HTTP endpoints."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmsim.metrics.collector import VllmCollector
from llmsim.metrics.exposition import Exposition
from llmsim.metrics.latency_summary import LatencySummary
from llmsim.metrics.model import ModelMetrics, Snapshot


class MetricsHub:
    """Holds every model's :class:`ModelMetrics` and serves them.

    A private :class:`~prometheus_client.CollectorRegistry`, never the global one, so several
    servers (and tests) can live in one process.
    """

    def __init__(self) -> None:
        # Every engine's metrics in page order; a model with several data-parallel ranks has one per rank.
        self._engines: list[ModelMetrics] = []
        # Model name -> its ranks' metrics, in rank order.
        self._ranks: dict[str, list[ModelMetrics]] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(VllmCollector(self._engines.copy))
        self._exposition = Exposition(self._engines.copy)

    @property
    def models(self) -> Mapping[str, ModelMetrics]:
        """Each model's first (or only) rank's metrics."""
        return {name: ranks[0] for name, ranks in self._ranks.items()}

    @property
    def ranks(self) -> Mapping[str, list[ModelMetrics]]:
        """Each model's metrics per data-parallel rank, in rank order."""
        return self._ranks

    def add_model(
        self,
        name: str,
        *,
        max_model_len: int,
        snapshot: Snapshot | None = None,
        cache_config: Mapping[str, str] | None = None,
        legacy_metrics: bool = False,
        max_lora: int | None = None,
        engine: int = 0,
    ) -> ModelMetrics:
        """Register a served model; the result is its engine observer and its lag sink.

        Parameters
        ----------
        name: the served model name (label ``model_name``).
        max_model_len: context length; bounds the token-count histograms' buckets (1-2-5 series).
        snapshot: live engine state read at scrape time; may be given later with
            :meth:`ModelMetrics.bind`, since the engine is built with the observer.
        cache_config: labels of ``vllm:cache_config_info`` (see :func:`cache_config_labels`);
            None for engines without a KV cache, which then have no such series.
        legacy_metrics: also expose deprecated vLLM names for this model.
        max_lora: the model's max_loras when LoRA is on: it then has a ``vllm:lora_requests_info`` series.
        engine: the data-parallel rank (global) these metrics are of: label ``engine``. A model's
            ranks are added in rank order.
        """
        ranks = self._ranks.setdefault(name, [])
        if any(m.engine == str(engine) for m in ranks):
            raise ValueError(f"model {name!r} already has metrics for engine {engine}")
        metrics = ModelMetrics(
            name,
            max_model_len=max_model_len,
            snapshot=snapshot,
            cache_config=cache_config,
            legacy_metrics=legacy_metrics,
            max_lora=max_lora,
            engine=engine,
        )
        ranks.append(metrics)
        self._engines.append(metrics)
        return metrics

    def render(self) -> bytes:
        """The Prometheus text exposition of every model: ``generate_latest(self.registry)``, faster.

        NOTE: always the text format, never OpenMetrics even when asked (Prometheus asks): the
        OpenMetrics encoder of prometheus_client 0.26 rewrites ``:`` to ``_`` in sample names but
        not in ``# TYPE`` lines, which breaks every ``vllm:`` family.
        """
        return self._exposition.render()

    def summary(self) -> dict[str, Any]:
        """Per model; a model with several data-parallel ranks: its ranks merged, and each under ``ranks``."""
        out: dict[str, Any] = {}
        for name, ranks in self._ranks.items():
            if len(ranks) == 1:
                out[name] = ranks[0].summary.to_json()
                continue
            out[name] = LatencySummary.merged([m.summary for m in ranks]).to_json()
            out[name]["ranks"] = {m.engine: m.summary.to_json() for m in ranks}
        return {"models": out}

    def reset_summary(self) -> None:
        for m in self._engines:
            m.reset_summary()

    def routes(self) -> list[Route]:
        """``GET /metrics``, ``GET /metrics/summary`` and ``DELETE /metrics/summary``."""
        return [
            Route("/metrics", self._metrics, methods=["GET"]),
            Route("/metrics/summary", self._summary, methods=["GET", "DELETE"]),
        ]

    async def _metrics(self, request: Request) -> Response:
        # Rendered on the event loop on purpose: the counts cannot change halfway through a page.
        return Response(self.render(), headers={"content-type": CONTENT_TYPE_LATEST})

    async def _summary(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.reset_summary()
            return Response(status_code=204)
        return Response(json.dumps(self.summary()), media_type="application/json")
