"""Disaggregated prefill/decode in the scheduler core: prefill legs hold their blocks for a pull,
decode legs pull their prompt's KV over the link and recompute the last prompt token.

Expected values come from vLLM's rules (NIXL connector ``request_finished``,
``get_num_new_matched_tokens``; scheduler ``_update_waiting_for_remote_kv``) and the link's
arithmetic (bytes / bandwidth + latency), worked out by hand on tiny configs.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from llmsim.engine.scheduler import Scheduler, Sequence, SequenceStatus
from llmsim.engine.scheduler.kv_link import KVLinkSpec
from llmsim.types import FinishReason, RequestId
from tests.engine.scheduler.builders import tiny_params

# 1 byte of KV per token (tiny_params), so a pull of n tokens is n bytes: at 100 B/s and 0.5 s
# latency, 8 tokens arrive 0.08 + 0.5 s after the pull starts.
LINK = KVLinkSpec(bandwidth_bytes_per_s=100.0, latency_s=0.5)


def pd_scheduler(num_blocks: int, **overrides: Any) -> Scheduler[Sequence]:
    return Scheduler(tiny_params(num_blocks, kv_link=LINK, kv_abort_timeout_s=10.0, **overrides))


def prefill_leg(name: str, prompt: int, ids: tuple[int, ...] | None = None) -> Sequence:
    s = Sequence(RequestId(name), 0.0, prompt, 1, FinishReason.LENGTH, prompt_token_ids=ids, remote_decode=True)
    return s


def decode_leg(name: str, prompt: int, output: int, arrival: float = 0.0) -> Sequence:
    return Sequence(RequestId(name), arrival, prompt, output, remote_prefill=True)


def audit(sched: Scheduler[Sequence]) -> None:
    sched.kv.audit([*sched.running, *sched.receiving, *sched.held, *(s for s in sched.waiting if s.blocks)])


def test_prefill_leg_finishes_with_length_and_keeps_its_blocks_until_released() -> None:
    sched = pd_scheduler(16)
    leg = prefill_leg("p", 10)  # 10 tokens in blocks of 4: 3 blocks
    sched.add_request(leg)
    out = sched.schedule(0.0)
    assert out.num_prefill_tokens == 10
    result = sched.update_from_output(out, 1.0)
    assert result.finished == [leg]
    assert leg.num_output_tokens == 1
    assert leg.to_stats().finish_reason is FinishReason.LENGTH
    assert len(leg.blocks) == 3
    assert sched.kv.num_used == 3
    assert sched.held == {leg: 1.0 + 10.0}
    assert sched.next_held_expiry() == 11.0
    audit(sched)
    assert sched.release_held(leg) is True
    assert sched.kv.num_used == 0
    assert not sched.held
    assert sched.release_held(leg) is False  # a second pull finds nothing
    audit(sched)


def test_held_blocks_are_freed_at_the_abort_timeout_and_not_before() -> None:
    sched = pd_scheduler(16)
    leg = prefill_leg("p", 8)
    sched.add_request(leg)
    sched.update_from_output(sched.schedule(0.0), 1.0)
    assert sched.expire_held(10.999) == []
    assert sched.kv.num_used == 2
    assert sched.expire_held(11.0) == [leg]
    assert sched.kv.num_used == 0
    assert sched.release_held(leg) is False


def test_held_blocks_count_in_admission() -> None:
    # 4 blocks; the held leg keeps 3, so a 2-block request cannot start until the release.
    sched = pd_scheduler(4)
    leg = prefill_leg("p", 12)
    sched.add_request(leg)
    sched.update_from_output(sched.schedule(0.0), 1.0)
    other = Sequence(RequestId("o"), 1.0, 6, 2)
    sched.add_request(other)
    out = sched.schedule(1.0)
    assert out.scheduled == []
    assert other.status is SequenceStatus.WAITING
    sched.release_held(leg)
    out = sched.schedule(2.0)
    assert out.scheduled == [other]


def test_a_prefill_leg_that_stops_early_frees_at_once() -> None:
    # vLLM delays the free only for FINISHED_LENGTH_CAPPED.
    sched = pd_scheduler(16)
    leg = Sequence(RequestId("p"), 0.0, 8, 1, FinishReason.STOP, remote_decode=True)
    sched.add_request(leg)
    sched.update_from_output(sched.schedule(0.0), 1.0)
    assert not sched.held
    assert sched.kv.num_used == 0


def test_decode_leg_pulls_then_recomputes_the_last_prompt_token() -> None:
    sched = pd_scheduler(16)
    leg = decode_leg("d", 8, 3)
    sched.add_request(leg)
    out = sched.schedule(0.0)
    # Admitted into WAITING_FOR_REMOTE_KVS: blocks for the whole prompt, nothing computed here.
    assert out.scheduled == []
    assert out.pulls == [leg]
    assert leg.status is SequenceStatus.WAITING_FOR_REMOTE_KVS
    assert len(leg.blocks) == 2
    assert leg.num_external_tokens == 8
    assert leg.kv_ready_time == pytest.approx(8 / 100.0 + 0.5)
    # A step that runs nothing is not reported: its lookups go with the next step that runs.
    assert out.external_prefix_cache_queries == 0
    assert sched.snapshot().num_waiting == 1
    assert sched.snapshot().num_running == 0
    assert sched.next_pull_time() == leg.kv_ready_time
    audit(sched)
    # Not before the pull is done.
    out = sched.schedule(0.5)
    assert out.scheduled == []
    assert out.received == []
    out = sched.schedule(0.58)
    assert out.received == [leg]
    assert out.scheduled == [leg]
    # One token computed (the last prompt token), counted as prefill; the first token follows.
    assert out.num_prefill_tokens == 1
    assert out.num_decode_tokens == 0
    assert out.external_prefix_cache_queries == 8
    assert out.external_prefix_cache_hits == 8
    assert leg.num_cached_tokens == 7
    assert leg.remote_prefill is False
    result = sched.update_from_output(out, 0.6)
    assert result.released == [leg]
    assert leg.first_token_time == 0.6
    stats_before = leg.num_external_tokens
    for t in (1.0, 2.0):
        sched.update_from_output(sched.schedule(t), t + 0.1)
    assert leg.is_finished
    assert leg.num_output_tokens == 3
    assert leg.to_stats().num_external_tokens == stats_before == 8
    assert sched.kv.num_used == 0


def test_pulls_queue_on_the_link() -> None:
    sched = pd_scheduler(32)
    a, b = decode_leg("a", 20, 2), decode_leg("b", 30, 2)
    sched.add_request(a)
    sched.add_request(b)
    sched.schedule(0.0)
    # a occupies the link for 0.2 s, b starts after it: 0.2 + 0.3, each plus the latency.
    assert a.kv_ready_time == pytest.approx(0.2 + 0.5)
    assert b.kv_ready_time == pytest.approx(0.5 + 0.5)


def test_decode_leg_local_prefix_hits_are_not_pulled() -> None:
    ids = tuple(range(100, 112))  # 12 tokens, 3 full blocks of 4
    sched = pd_scheduler(32)
    warm = Sequence(RequestId("w"), 0.0, 12, 1, prompt_token_ids=ids)
    sched.add_request(warm)
    sched.update_from_output(sched.schedule(0.0), 1.0)
    leg = Sequence(RequestId("d"), 1.0, 12, 2, prompt_token_ids=ids, remote_prefill=True)
    sched.add_request(leg)
    out = sched.schedule(1.0)
    # Hit capped at length - 1 tokens: 2 full blocks (8 tokens); 4 tokens pulled.
    assert out.pulls == [leg]
    assert leg.num_external_tokens == 4
    out = sched.schedule(leg.kv_ready_time)
    assert out.prefix_cache_hits == 8
    assert out.external_prefix_cache_hits == 4
    assert out.scheduled == [leg]
    assert out.num_prefill_tokens == 1
    assert leg.num_cached_tokens == 11


def test_unconfirmed_pull_waits_for_its_confirmation() -> None:
    sched = pd_scheduler(16)
    leg = decode_leg("d", 8, 2)
    leg.kv_pull_confirmed = False
    sched.add_request(leg)
    sched.schedule(0.0)
    assert sched.next_pull_time() == math.inf
    assert sched.schedule(5.0).received == []
    leg.kv_pull_confirmed = True
    assert sched.schedule(6.0).received == [leg]


def test_failed_pull_recompute_prefills_locally() -> None:
    sched = pd_scheduler(16)
    leg = decode_leg("d", 8, 2)
    sched.add_request(leg)
    sched.schedule(0.0)
    assert sched.fail_pull(leg, 0.1, recompute=True) is True
    assert sched.kv.num_used == 0
    assert leg.status is SequenceStatus.WAITING
    out = sched.schedule(0.2)
    assert out.scheduled == [leg]
    assert out.num_prefill_tokens == 8
    assert out.pulls == []
    assert leg.num_external_tokens == 0


def test_failed_pull_fail_ends_with_error() -> None:
    sched = pd_scheduler(16)
    leg = decode_leg("d", 8, 2)
    sched.add_request(leg)
    sched.schedule(0.0)
    assert sched.fail_pull(leg, 0.1, recompute=False) is False
    assert leg.is_finished
    assert leg.to_stats().finish_reason is FinishReason.ERROR
    assert sched.kv.num_used == 0
    assert not sched.has_work()
    assert not sched.receiving


def test_abort_while_pulling_frees_the_blocks() -> None:
    sched = pd_scheduler(16)
    leg = decode_leg("d", 8, 2)
    sched.add_request(leg)
    sched.schedule(0.0)
    assert sched.abort(leg, 0.1) is True
    assert sched.kv.num_used == 0
    assert not sched.receiving


def test_preempted_decode_leg_recomputes_locally() -> None:
    sched = pd_scheduler(16)
    leg = decode_leg("d", 8, 2)
    sched.add_request(leg)
    sched.schedule(0.0)
    sched.update_from_output(sched.schedule(1.0), 1.1)
    sched._preempt(leg)  # what a block shortage would do
    sched.running.remove(leg)
    out = sched.schedule(2.0)
    assert out.pulls == []
    assert out.num_prefill_tokens == 9


def test_under_tensor_parallelism_each_rank_pulls_its_share_of_the_heads() -> None:
    # 8 KV heads over 2 ranks: each rank's NIC carries half of a token's KV, all ranks at once, so
    # the pull takes half the bytes' time. 8 tokens x 4 B / 2 = 16 B at 100 B/s, plus 0.5 s.
    base = tiny_params(16, kv_link=LINK, kv_abort_timeout_s=10.0)
    model = replace(base.model, kv_bytes_per_token=4, num_key_value_heads=8, num_hidden_layers=1, hidden_size=8)
    gpu = replace(base.gpu, hbm_bytes=base.gpu.hbm_bytes * 8, interconnect_bandwidth=1e9)
    sched: Scheduler[Sequence] = Scheduler(replace(base, model=model, gpu=gpu, tensor_parallel_size=2))
    leg = decode_leg("d", 8, 2)
    sched.add_request(leg)
    sched.schedule(0.0)
    assert leg.kv_ready_time == pytest.approx(16 / 100.0 + 0.5)
