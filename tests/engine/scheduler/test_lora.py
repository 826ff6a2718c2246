"""LoRA in the scheduler: vLLM V1's max_loras admission rule, adapter loading cost, per-adapter hashes."""

from __future__ import annotations

import pytest

from llmsim.engine.scheduler.params import LoraParams
from llmsim.fleet import FleetRequest, simulate

from .builders import tiny_params

ADAPTERS = (("sql", "/adapters/sql"), ("chat", "/adapters/chat"))


def lora_params(max_loras: int = 1, max_cpu_loras: int = 2, load_s: float = 0.0) -> LoraParams:
    return LoraParams(max_loras=max_loras, max_cpu_loras=max_cpu_loras, load_s=load_s, adapters=ADAPTERS)


def test_a_request_whose_adapter_would_exceed_max_loras_waits_without_blocking_the_queue() -> None:
    # max_loras 1. Queue at t=0: A (sql), B (chat), C (base model), D (sql).
    #   step 0: A admitted (running adapters {sql}); B would make 2 -> skipped, keeps its place;
    #           C needs no adapter; D uses sql, already running -> admitted. B is not head-of-line.
    #   A and D decode 3 tokens (steps 0-2) and finish at step 2; B is admitted at step 3.
    work = [
        FleetRequest.of(0.0, 4, 3, adapter="sql"),
        FleetRequest.of(0.0, 4, 3, adapter="chat"),
        FleetRequest.of(0.0, 4, 1),
        FleetRequest.of(0.0, 4, 3, adapter="sql"),
    ]
    result = simulate(tiny_params(16, lora=lora_params(max_loras=1)), work, audit=True)
    a, b, c, d = result.requests
    step_starts = [s.start for s in result.steps]
    assert a.queue_time == c.queue_time == d.queue_time == 0.0
    assert b.arrival + b.queue_time == step_starts[3]
    assert [s.batch_size for s in result.steps[:4]] == [3, 2, 2, 1]
    # With room for two adapters, all four run at once.
    both = simulate(tiny_params(16, lora=lora_params(max_loras=2)), work)
    assert [r.queue_time for r in both.requests] == [0.0] * 4


def test_loading_a_non_resident_adapter_costs_load_s_in_the_step_that_needs_it() -> None:
    # max_cpu_loras 1: at startup sql then chat are loaded, so only chat stays resident.
    #   step 0 runs sql (+1 load), step 1 runs sql again (resident: no cost), chat arrives later
    #   and was evicted by sql's load: its first step pays once more.
    load = 0.25
    params = tiny_params(16, lora=lora_params(max_loras=1, max_cpu_loras=1, load_s=load))
    base = simulate(tiny_params(16), [FleetRequest.of(0.0, 4, 2), FleetRequest.of(5.0, 4, 1)])
    with_lora = simulate(
        params, [FleetRequest.of(0.0, 4, 2, adapter="sql"), FleetRequest.of(5.0, 4, 1, adapter="chat")]
    )
    extra = [w.duration - b.duration for w, b in zip(with_lora.steps, base.steps, strict=True)]
    assert extra == pytest.approx([load, 0.0, load], abs=1e-12)


def test_an_adapter_is_part_of_the_block_hash_so_prefixes_are_not_shared_across_adapters() -> None:
    prompt = tuple(range(100, 164))  # 16 blocks of 4
    work = [
        FleetRequest.of(0.0, 64, 1, prompt_token_ids=prompt, adapter="sql"),
        FleetRequest.of(1.0, 64, 1, prompt_token_ids=prompt, adapter="chat"),
        FleetRequest.of(2.0, 64, 1, prompt_token_ids=prompt),
        FleetRequest.of(3.0, 64, 1, prompt_token_ids=prompt, adapter="sql"),
    ]
    # 64 blocks: room for all three copies (48 blocks), so nothing is evicted.
    result = simulate(tiny_params(64, lora=lora_params(max_loras=2)), work, audit=True)
    # Only the second sql request finds its adapter's blocks: 63 // 4 = 15 blocks = 60 tokens.
    assert [r.prefix_hit_tokens for r in result.requests] == [0, 0, 0, 60]


def test_unknown_adapters_and_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown LoRA adapter 'nope'"):
        simulate(tiny_params(16, lora=lora_params()), [FleetRequest.of(0.0, 4, 1, adapter="nope")])
    with pytest.raises(ValueError, match=r"max_cpu_loras \(1\) must be >= max_loras \(2\)\."):
        LoraParams(max_loras=2, max_cpu_loras=1)
