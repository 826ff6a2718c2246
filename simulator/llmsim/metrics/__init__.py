"""vLLM-compatible Prometheus metrics and the /metrics/summary view, fed by engine observers."""
