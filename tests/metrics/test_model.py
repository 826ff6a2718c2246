"""ModelMetrics fed with hand-built engine stats: counters and bucket counts against hand-worked values.

Times are multiples of 1/8 s so every difference is exact in binary and lands in a known bucket.
"""

from __future__ import annotations

import pytest

from llmsim.metrics import MetricsHub, ModelMetrics, cache_config_labels
from llmsim.types import EngineSnapshot, FinishReason, RequestId, RequestStats, StepStats
from tests.metrics.scrape import Page, parse

M = {"model_name": "m", "engine": "0"}


def step(
    index: int, *, prefill: int, decode: int, batch: int, preempted: int = 0, duration: float = 0.015
) -> StepStats:
    return StepStats(
        index=index,
        start=index * duration,
        duration=duration,
        batch_size=batch,
        num_prefill_tokens=prefill,
        num_decode_tokens=decode,
        num_running=batch,
        num_waiting=0,
        kv_used_blocks=0,
        kv_total_blocks=100,
        num_preemptions=preempted,
        lag=0.0,
    )


# A: 100-token prompt, queued 0.25 s, first token at 1.0 s, then 1.125, 1.25, 1.5: stop.
A = RequestStats(RequestId("a"), 100, 4, FinishReason.STOP, 0.0, 0.25, 1.0, 1.5, 0, [1.0, 1.125, 1.25, 1.5])
# B: 30-token prompt, aborted while waiting, 0.5 s after arrival: no token.
B = RequestStats(RequestId("b"), 30, 0, FinishReason.ABORT, 2.0, None, None, 2.5, 0, [])
# C: 10-token prompt, one token (length), scheduled on arrival, first token after 0.5 s.
C = RequestStats(RequestId("c"), 10, 1, FinishReason.LENGTH, 3.0, 3.0, 3.5, 3.5, 1, [3.5])


def fed(**kwargs: object) -> tuple[MetricsHub, ModelMetrics]:
    hub = MetricsHub()
    m = hub.add_model("m", max_model_len=4096, **kwargs)  # type: ignore[arg-type]
    m.on_first_token(1.0)
    m.on_first_token(0.5)
    for stats in (A, B, C):
        m.on_request_finished(stats)
    m.on_step(step(0, prefill=100, decode=0, batch=1))
    m.on_step(step(1, prefill=10, decode=1, batch=2, preempted=2))
    m.on_step(step(2, prefill=0, decode=3, batch=3, preempted=1))
    m.observe_lags([0.0005, 0.003, 0.003])
    return hub, m


def page() -> Page:
    hub, _ = fed()
    return parse(hub.render().decode())


def test_token_counters_count_prompts_that_produced_a_token() -> None:
    p = page()
    # B was aborted before its first token: vLLM never counts its prompt.
    assert p.get("vllm:prompt_tokens_total", **M) == 100 + 10
    assert p.get("vllm:generation_tokens_total", **M) == 4 + 0 + 1
    assert p.get("vllm:num_preemptions_total", **M) == 2 + 1


def test_requests_by_finish_reason_every_reason_listed() -> None:
    p = page()
    got = {r: p.get("vllm:request_success_total", **M, finished_reason=r) for r in ("stop", "length", "abort", "error")}
    assert got == {"stop": 1, "length": 1, "abort": 1, "error": 0}


def test_ttft_lands_in_its_bucket() -> None:
    p = page()
    name = "vllm:time_to_first_token_seconds"
    # TTFTs 1.0 (on the 1.0 bound: le is inclusive) and 0.5 (on the 0.5 bound).
    assert p.bucket(name, "0.25") == 0
    assert p.bucket(name, "0.5") == 1
    assert p.bucket(name, "0.75") == 1
    assert p.bucket(name, "1.0") == 2
    assert p.bucket(name, "+Inf") == 2
    assert p.get(name + "_count", **M) == 2
    assert p.get(name + "_sum", **M) == 1.5


def test_request_phase_histograms() -> None:
    p = page()
    # A: e2e 1.5, queue 0.25, prefill 1.0-0.25=0.75, decode 1.5-1.0=0.5, inference 1.5-0.25=1.25.
    # B: e2e 0.5, queue 0.5 (never scheduled: until it left); no prefill/decode/inference.
    # C: e2e 0.5, queue 0, prefill 0.5, decode 0, inference 0.5.
    e2e = "vllm:e2e_request_latency_seconds"
    assert [p.bucket(e2e, le) for le in ("0.3", "0.5", "1.0", "1.5", "+Inf")] == [0, 2, 2, 3, 3]
    assert p.get(e2e + "_sum", **M) == 2.5
    queue = "vllm:request_queue_time_seconds"
    assert [p.bucket(queue, le) for le in ("0.3", "0.5", "+Inf")] == [2, 3, 3]
    assert p.get(queue + "_sum", **M) == 0.75
    prefill = "vllm:request_prefill_time_seconds"
    assert [p.bucket(prefill, le) for le in ("0.3", "0.5", "0.8", "+Inf")] == [0, 1, 2, 2]
    decode = "vllm:request_decode_time_seconds"
    assert [p.bucket(decode, le) for le in ("0.3", "0.5", "+Inf")] == [1, 2, 2]
    inference = "vllm:request_inference_time_seconds"
    assert [p.bucket(inference, le) for le in ("0.5", "1.0", "1.5", "+Inf")] == [1, 1, 2, 2]
    assert p.get(inference + "_sum", **M) == 1.75


def test_time_per_output_token_and_inter_token_latency() -> None:
    p = page()
    # TPOT per request: A 0.5 / (4 - 1) = 0.1667 (le 0.2); C one token -> 0 (as vLLM reports).
    tpot = "vllm:request_time_per_output_token_seconds"
    assert [p.bucket(tpot, le) for le in ("0.01", "0.15", "0.2", "+Inf")] == [1, 1, 2, 2]
    assert p.get(tpot + "_sum", **M) == pytest.approx(0.5 / 3)
    # ITL per token gap: A 0.125, 0.125, 0.25; C has none.
    itl = "vllm:inter_token_latency_seconds"
    assert [p.bucket(itl, le) for le in ("0.1", "0.15", "0.2", "0.3", "+Inf")] == [0, 2, 2, 3, 3]
    assert p.get(itl + "_sum", **M) == 0.5


def test_token_count_histograms_use_1_2_5_buckets_up_to_the_context() -> None:
    p = page()
    prompt = "vllm:request_prompt_tokens"
    # Prompts 100, 30, 10 -> le 10: 1, le 50: 2, le 100: 3; buckets stop at 2000 (max_model_len 4096).
    assert [p.bucket(prompt, le) for le in ("5.0", "10.0", "20.0", "50.0", "100.0", "+Inf")] == [0, 1, 1, 2, 3, 3]
    assert not p.has(prompt + "_bucket", **M, le="5000.0")
    assert p.has(prompt + "_bucket", **M, le="2000.0")
    gen = "vllm:request_generation_tokens"
    # Outputs 4, 0, 1.
    assert [p.bucket(gen, le) for le in ("1.0", "2.0", "5.0", "+Inf")] == [2, 2, 3, 3]


def test_prefill_kv_computed_tokens_leave_out_the_prefix_cache_hit() -> None:
    hub, m = fed()
    # D: a 64-token prompt of which 48 (three blocks of 16) were in the prefix cache: 16 computed.
    m.on_request_finished(
        RequestStats(RequestId("d"), 64, 2, FinishReason.STOP, 4.0, 4.0, 4.125, 4.25, 0, [4.125, 4.25], 48)
    )
    p = parse(hub.render().decode())
    name = "vllm:request_prefill_kv_computed_tokens"
    assert p.types[name] == "histogram"
    # Observed: A 100, B 30 (aborted waiting: nothing cached), C 10, D 64 - 48 = 16.
    assert [p.bucket(name, le) for le in ("10.0", "20.0", "50.0", "100.0", "+Inf")] == [1, 2, 3, 4, 4]
    assert p.get(name + "_sum", **M) == 156
    # The same 1-2-5 buckets up to max_model_len as the prompt histogram.
    assert p.has(name + "_bucket", **M, le="2000.0")
    assert not p.has(name + "_bucket", **M, le="5000.0")


def test_step_histograms() -> None:
    p = page()
    # Tokens per step: 100, 11, 3 -> le 8: 1, le 16: 2, le 128: 3.
    it = "vllm:iteration_tokens_total"
    assert [p.bucket(it, le) for le in ("1.0", "8.0", "16.0", "64.0", "128.0")] == [0, 1, 2, 2, 3]
    batch = "llmsim_batch_size"
    assert [p.bucket(batch, le) for le in ("1.0", "2.0", "4.0", "+Inf")] == [1, 2, 3, 3]
    duration = "llmsim_step_duration_seconds"
    assert [p.bucket(duration, le) for le in ("0.01", "0.015", "+Inf")] == [0, 3, 3]
    assert p.bucket("llmsim_step_lag_seconds", "0.0001") == 3


def test_token_lag_histogram() -> None:
    p = page()
    lag = "llmsim_token_lag_seconds"
    assert [p.bucket(lag, le) for le in ("0.00025", "0.0005", "0.002", "0.005", "+Inf")] == [0, 1, 1, 3, 3]
    assert p.get(lag + "_sum", **M) == pytest.approx(0.0065)


def test_gauges_come_from_the_snapshot_at_scrape_time() -> None:
    hub = MetricsHub()
    state = {"snap": EngineSnapshot(num_running=3, num_waiting=7, kv_used_blocks=25, kv_total_blocks=100)}
    hub.add_model("m", max_model_len=1024, snapshot=lambda: state["snap"])
    p = parse(hub.render().decode())
    assert p.get("vllm:num_requests_running", **M) == 3
    assert p.get("vllm:num_requests_waiting", **M) == 7
    assert p.get("vllm:kv_cache_usage_perc", **M) == 0.25
    state["snap"] = EngineSnapshot(num_running=0, num_waiting=0, kv_used_blocks=0, kv_total_blocks=100)
    p = parse(hub.render().decode())
    assert p.get("vllm:num_requests_running", **M) == 0
    assert p.get("vllm:kv_cache_usage_perc", **M) == 0


def test_no_kv_cache_means_zero_usage_and_no_cache_config_info() -> None:
    hub = MetricsHub()
    hub.add_model("m", max_model_len=1024)  # fixed/instant engines: no snapshot KV blocks, no cache config
    p = parse(hub.render().decode())
    assert p.get("vllm:kv_cache_usage_perc", **M) == 0
    assert "vllm:cache_config_info" not in p.types


def test_cache_config_info_labels_as_strings() -> None:
    hub = MetricsHub()
    labels = cache_config_labels(
        block_size=16, num_gpu_blocks=7609, gpu_memory_utilization=0.9, enable_prefix_caching=False
    )
    hub.add_model("m", max_model_len=1024, cache_config=labels)
    p = parse(hub.render().decode())
    assert p.types["vllm:cache_config_info"] == "gauge"
    expected = dict(
        M,
        block_size="16",
        num_gpu_blocks="7609",
        gpu_memory_utilization="0.9",
        enable_prefix_caching="False",
        cache_dtype="auto",
    )
    assert p.get("vllm:cache_config_info", **expected) == 1


def test_prefix_cache_counters_add_up_what_each_step_admitted() -> None:
    # The engine counts each request once, at its first admission (vLLM 0.34): step 0 admitted a
    # 100-token prompt that missed, step 1 a 64-token prompt with 48 tokens cached.
    hub = MetricsHub()
    m = hub.add_model("m", max_model_len=4096)
    first = step(0, prefill=100, decode=0, batch=1)
    first.prefix_cache_queries = 100
    second = step(1, prefill=16, decode=1, batch=2)
    second.prefix_cache_queries, second.prefix_cache_hits = 64, 48
    for s in (first, second, step(2, prefill=0, decode=2, batch=2)):
        m.on_step(s)
    p = parse(hub.render().decode())
    assert p.get("vllm:prefix_cache_queries_total", **M) == 100 + 64
    assert p.get("vllm:prefix_cache_hits_total", **M) == 48


def test_lora_requests_info_only_with_lora_and_with_vllms_labels() -> None:
    assert "vllm:lora_requests_info" not in page().names()
    snap = EngineSnapshot(2, 1, 0, 10, running_lora_adapters=("sql", "chat"), waiting_lora_adapters=("news",))
    hub = MetricsHub()
    m = hub.add_model("m", max_model_len=4096, snapshot=lambda: snap, max_lora=2)
    m.wall_clock = lambda: 1_700_000_000.5
    p = parse(hub.render().decode())
    # vLLM 0.34 puts every adapter with a running or waiting request in both labels; the value is
    # the time of the update (consumers take the series with the latest one).
    everyone = "sql,chat,news"
    labels = {"max_lora": "2", "running_lora_adapters": everyone, "waiting_lora_adapters": everyone}
    assert p.get("vllm:lora_requests_info", **M, **labels) == 1_700_000_000.5
    assert p.types["vllm:lora_requests_info"] == "gauge"


def test_legacy_names_only_when_asked() -> None:
    legacy_names = {
        "vllm:gpu_cache_usage_perc",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:time_per_output_token_seconds_count",
    }
    assert not legacy_names & page().names()
    hub, _ = fed(legacy_metrics=True)
    p = parse(hub.render().decode())
    assert legacy_names <= p.names()
    # The deprecated TPOT name carries the same per-token values as the ITL histogram that replaced it.
    assert p.get("vllm:time_per_output_token_seconds_count", **M) == 3
    assert p.get("vllm:time_per_output_token_seconds_sum", **M) == 0.5


def test_legacy_is_per_model() -> None:
    hub = MetricsHub()
    hub.add_model("old", max_model_len=1024, legacy_metrics=True)
    hub.add_model("new", max_model_len=1024)
    p = parse(hub.render().decode())
    assert p.has("vllm:gpu_cache_usage_perc", model_name="old", engine="0")
    assert not p.has("vllm:gpu_cache_usage_perc", model_name="new", engine="0")
    assert p.has("vllm:kv_cache_usage_perc", model_name="new", engine="0")


def test_types_are_vllms() -> None:
    p = page()
    gauges = {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"}
    counters = {
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        "vllm:num_preemptions",
        "vllm:request_success",
        "vllm:prefix_cache_queries",
        "vllm:prefix_cache_hits",
    }
    histograms = {
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:request_time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_inference_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
        "vllm:request_prefill_kv_computed_tokens",
        "vllm:iteration_tokens_total",
        "llmsim_token_lag_seconds",
        "llmsim_step_lag_seconds",
        "llmsim_step_duration_seconds",
        "llmsim_batch_size",
    }
    for names, kind in ((gauges, "gauge"), (counters, "counter"), (histograms, "histogram")):
        for name in names:
            assert p.types.get(name) == kind, name


def test_duplicate_model_is_refused() -> None:
    hub = MetricsHub()
    hub.add_model("m", max_model_len=1024)
    with pytest.raises(ValueError, match="already"):
        hub.add_model("m", max_model_len=1024)
