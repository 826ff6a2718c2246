"""The fast /metrics writer must give exactly the bytes of prometheus_client's own text encoder."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from llmsim.metrics import MetricsHub, cache_config_labels
from llmsim.types import EngineSnapshot, FinishReason, RequestId, RequestStats, StepStats


def busy(hub: MetricsHub, name: str, scale: int) -> None:
    m = hub.models[name]
    for i in range(scale):
        t0 = i * 0.37
        m.on_first_token(0.021 * i)
        times = [t0 + 0.2 + 0.013 * k for k in range(i % 7)]
        m.on_request_finished(
            RequestStats(
                RequestId(str(i)),
                17 * i,
                len(times),
                list(FinishReason)[i % 4],
                t0,
                t0 + 0.05 if i % 5 else None,
                times[0] if times else None,
                times[-1] if times else t0 + 0.3,
                0,
                times,
            )
        )
        m.on_step(StepStats(i, t0, 0.0123 * (i % 9), i % 33, 3 * i, i, i, 1, 5, 10, i % 2, 0.0001 * i, 7 * i, 3 * i))
        m.observe_lags([0.00001 * k - 0.0002 for k in range(i % 11)])


def both(hub: MetricsHub) -> tuple[str, str]:
    return hub.render().decode(), generate_latest(hub.registry).decode()


def test_empty_hub() -> None:
    fast, reference = both(MetricsHub())
    assert fast == reference
    assert "llmsim_info" in fast


@pytest.mark.parametrize("scale", [0, 1, 50])
def test_models_of_every_kind(scale: int) -> None:
    hub = MetricsHub()
    kv = cache_config_labels(block_size=16, num_gpu_blocks=7609, gpu_memory_utilization=0.9, enable_prefix_caching=True)
    snap = EngineSnapshot(num_running=4, num_waiting=2, kv_used_blocks=333, kv_total_blocks=7609)
    hub.add_model("scheduler", max_model_len=32768, snapshot=lambda: snap, cache_config=kv)
    hub.add_model("legacy", max_model_len=2048, legacy_metrics=True, cache_config=kv | {"extra": "x"})
    hub.add_model("fixed", max_model_len=100)
    lora_snap = EngineSnapshot(1, 2, 3, 10, running_lora_adapters=("sql",), waiting_lora_adapters=("chat", "sql"))
    lora = hub.add_model("lora", max_model_len=100, snapshot=lambda: lora_snap, cache_config=kv, max_lora=2)
    lora.wall_clock = lambda: 1_765_432_109.25
    for name in hub.models:
        busy(hub, name, scale)
    fast, reference = both(hub)
    assert fast == reference
    assert 'running_lora_adapters="sql,chat"' in fast


def test_odd_model_names_and_big_numbers_are_escaped_and_formatted_alike() -> None:
    hub = MetricsHub()
    m = hub.add_model('we"ird\\name\nx', max_model_len=10)
    m.generation_tokens = 12_345_678  # Go-style exponent past 1e6: 1.2345678e+07
    m.prompt_tokens = 999_999
    m.itl.observe(1e-7)
    m.requests[FinishReason.STOP] = 10**6
    fast, reference = both(hub)
    assert fast == reference
    assert "1.2345678e+07" in fast


def test_models_added_after_the_first_scrape_appear() -> None:
    hub = MetricsHub()
    hub.add_model("a", max_model_len=10)
    assert both(hub)[0] == both(hub)[1]
    hub.add_model("b", max_model_len=10)
    fast, reference = both(hub)
    assert fast == reference
    assert 'model_name="b"' in fast


def test_injected_faults_are_counted_by_kind_on_both_pages() -> None:
    hub = MetricsHub()
    m = hub.add_model("flaky", max_model_len=100)
    for kind in ["stall", "rate_limit", "stall", "crash"]:
        m.count_fault(kind)
    fast, reference = both(hub)
    assert fast == reference
    lines = [line for line in fast.splitlines() if line.startswith("llmsim_faults_injected_total{")]
    counts = {line.split('kind="')[1].split('"')[0]: line.rsplit(" ", 1)[1] for line in lines}
    # Every kind, the ones never injected at 0.
    assert counts == {
        "rate_limit": "1.0",
        "server_error": "0.0",
        "unavailable": "0.0",
        "bad_request": "0.0",
        "abort_mid_stream": "0.0",
        "stall": "2.0",
        "slow": "0.0",
        "crash": "1.0",
    }
    assert "# TYPE llmsim_faults_injected_total counter" in fast


def test_fault_phases_appear_on_both_pages_for_models_with_a_timeline_only() -> None:
    hub = MetricsHub()
    hub.add_model("steady", max_model_len=100)
    m = hub.add_model("phased", max_model_len=100)
    m.set_fault_phases(["base", "down", "up"])
    for name in ("base", "down", "up", "down"):
        m.enter_fault_phase(name)
    fast, reference = both(hub)
    assert fast == reference
    phase = {
        line.split('phase="')[1].split('"')[0]: line.rsplit(" ", 1)[1]
        for line in fast.splitlines()
        if line.startswith("llmsim_fault_phase{")
    }
    assert phase == {"base": "0.0", "down": "1.0", "up": "0.0"}
    entered = [line for line in fast.splitlines() if line.startswith("llmsim_fault_phase_transitions_total{")]
    assert [line.rsplit(" ", 1)[1] for line in entered] == ["1.0", "2.0", "1.0"]
    assert not any(
        line.startswith("llmsim_fault_phase") and 'model_name="steady"' in line for line in fast.splitlines()
    )
