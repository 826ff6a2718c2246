"""vLLM-compatible Prometheus metrics and the /metrics/summary view, fed by engine observers.

Engines never import this package: ``runtime.py`` hands each engine a :class:`ModelMetrics` as its
observer and the API its ``observe_lags``. Latency histograms hold *simulated* values (what a real
vLLM would report); the ``llmsim_*`` lag metrics are the simulator's own error. Everything runs on
the server's event loop: no locks, nothing per token beyond a bisect.
"""

from llmsim.metrics.cache_config import cache_config_labels
from llmsim.metrics.hub import MetricsHub
from llmsim.metrics.model import ModelMetrics
from llmsim.metrics.sketch import QuantileSketch

__all__ = ["MetricsHub", "ModelMetrics", "QuantileSketch", "cache_config_labels"]
