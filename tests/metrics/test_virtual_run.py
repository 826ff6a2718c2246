"""A scripted virtual-time run of the real scheduler core, fed to ModelMetrics as the driver would."""

from __future__ import annotations

import pytest

from llmsim.engine.scheduler import GpuSpec, ModelSpec, SchedulerParams
from llmsim.fleet import FleetRequest, FleetResult, simulate
from llmsim.metrics import MetricsHub, ModelMetrics
from llmsim.types import FinishReason, RequestId, RequestStats
from tests.metrics.scrape import parse

M = {"model_name": "tiny", "engine": "0"}
N, PROMPT, OUTPUT = 4, 64, 100

# 21 KV blocks of 16 tokens: (1.336e6 B HBM - 1e6 B weights) / (16 tokens x 1000 B), 20 usable
# besides vLLM's null block. Four sequences
# growing to 64 + 100 tokens (11 blocks each) cannot all fit: the newest get preempted.
PARAMS = SchedulerParams(
    gpu=GpuSpec(hbm_bytes=1.336e6, memory_bandwidth=1e9, peak_flops=1e12),
    model=ModelSpec(num_parameters=1e6, weight_bytes=1e6, kv_bytes_per_token=1000),
    context_length=320,
    gpu_memory_utilization=1.0,
)


def ttfts(result: FleetResult) -> list[float]:
    return [r.ttft for r in result.requests if r.ttft is not None]


def feed(result: FleetResult, m: ModelMetrics) -> None:
    """Replay in the driver's order: first tokens, step stats, finished requests."""
    for r in result.requests:
        if r.ttft is not None:
            m.on_first_token(r.ttft)
    for s in result.steps:
        m.on_step(s)
    for r in result.requests:
        m.on_request_finished(
            RequestStats(
                request_id=RequestId(str(r.index)),
                prompt_tokens=r.prompt_tokens,
                output_tokens=r.output_tokens,
                finish_reason=r.finish_reason,
                arrival=r.arrival,
                scheduled=r.arrival + r.queue_time,
                first_token=r.token_times[0] if r.token_times else None,
                finished=r.arrival + r.e2e,
                num_preemptions=r.num_preemptions,
                token_times=list(r.token_times),
            )
        )


def test_counters_after_a_preempting_run() -> None:
    result = simulate(PARAMS, [FleetRequest.of(0.0, PROMPT, OUTPUT) for _ in range(N)])
    hub = MetricsHub()
    feed(result, hub.add_model("tiny", max_model_len=PARAMS.context_length))
    p = parse(hub.render().decode())

    assert p.get("vllm:prompt_tokens_total", **M) == N * PROMPT
    assert p.get("vllm:generation_tokens_total", **M) == N * OUTPUT
    assert p.get("vllm:request_success_total", **M, finished_reason="stop") == N
    # The counter adds each step's preemptions; each sequence counts its own: the two must agree.
    per_request = sum(r.num_preemptions for r in result.requests)
    assert per_request > 0, "the scenario must preempt"
    assert p.get("vllm:num_preemptions_total", **M) == per_request
    summary = hub.summary()["models"]["tiny"]
    assert summary["preemptions"] == per_request
    # One TTFT per request, one ITL per token after the first, one observation per step.
    assert p.get("vllm:time_to_first_token_seconds_count", **M) == N
    assert p.get("vllm:time_to_first_token_seconds_sum", **M) == pytest.approx(sum(ttfts(result)))
    assert p.get("vllm:inter_token_latency_seconds_count", **M) == N * (OUTPUT - 1)
    assert p.get("vllm:iteration_tokens_total_count", **M) == len(result.steps)
    assert p.get("llmsim_batch_size_count", **M) == len(result.steps)
    # Every token computed shows up in some step: prompts, outputs fed back, and the recomputation
    # of the preempted ones; without preemption that would be N * (PROMPT + OUTPUT - 1).
    tokens = p.get("vllm:iteration_tokens_total_sum", **M)
    assert tokens > N * (PROMPT + OUTPUT - 1)
    assert tokens == sum(s.num_prefill_tokens + s.num_decode_tokens for s in result.steps)
    # The decode of one request ends at its last token: the sum of decode times is sum(last - first).
    assert p.get("vllm:request_decode_time_seconds_sum", **M) == pytest.approx(
        sum(r.token_times[-1] - r.token_times[0] for r in result.requests)
    )
    assert summary["requests"] == {"stop": N, "length": 0, "abort": 0, "error": 0, "total": N}
    assert summary["ttft"]["max"] == pytest.approx(max(ttfts(result)))
    assert all(r.finish_reason is FinishReason.STOP for r in result.requests)
