"""Histogram bucket bounds: vLLM's (copied from its PrometheusStatLogger) and llmsim's own."""

from __future__ import annotations

#: vllm:time_to_first_token_seconds
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip

#: vllm:inter_token_latency_seconds, vllm:request_time_per_output_token_seconds (and the legacy
#: vllm:time_per_output_token_seconds).
TOKEN_LATENCY_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip

#: vllm:e2e_request_latency_seconds and the queue/inference/prefill/decode phase histograms.
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip

#: vllm:iteration_tokens_total (a histogram despite its name).
ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

# llmsim's own. Lag is the simulator's error bar: sub-millisecond when healthy, so the low end is fine.
LAG_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip
STEP_DURATION_BUCKETS: tuple[float, ...] = (
    0.001, 0.002, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip
BATCH_SIZE_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


def build_1_2_5_buckets(max_value: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` inclusive (vLLM's token-count buckets).

    >>> build_1_2_5_buckets(100)
    (1, 2, 5, 10, 20, 50, 100)
    """
    out: list[float] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * scale
            if value > max_value:
                return tuple(out)
            out.append(value)
        scale *= 10
