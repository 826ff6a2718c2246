"""Scheduling decisions, step by step, on tiny caches (blocks of 4 tokens); every trace is worked by hand."""

from __future__ import annotations

import pytest

from llmsim.engine.scheduler import SequenceStatus
from llmsim.types import FinishReason

from .builders import names, seq, step, tiny_scheduler


def test_prefill_releases_the_first_token_then_one_per_decode_step() -> None:
    # Prompt 6, 3 outputs, blocks of 4:
    #   step 0: prefill 6 tokens (2 blocks), sample token 1
    #   step 1: compute token 7 (its KV), sample token 2; context read 7
    #   step 2: compute token 8, sample token 3 -> planned length reached, finish, free.
    sched = tiny_scheduler(8)
    a = seq("a", 6, 3)
    sched.add_request(a)
    shapes = []
    for i in range(3):
        out, result = step(sched, i)
        shapes.append((out.num_prefill_tokens, out.num_decode_tokens, out.num_context_tokens))
        assert names(result.released) == ["a"]
        assert len(a.blocks) <= 2 or a.is_finished  # never more than ceil((6 + 3 - 1) / 4) = 2 blocks
    assert shapes == [(6, 0, 6), (0, 1, 7), (0, 1, 8)]
    assert a.token_times == [1.0, 2.0, 3.0]
    assert a.status is SequenceStatus.FINISHED
    assert a.finished_time == 3.0
    assert sched.kv.num_used == 0
    assert not sched.has_work()


def test_running_first_then_prefill_chunks_fill_the_budget() -> None:
    # Budget 4 tokens. a: prompt 2, 5 outputs; b: prompt 10, 1 output, queued behind a.
    #   step 0: admit a (2) and b's first chunk (2)        prefill 4
    #   step 1: a decodes (1), b chunk 3 -> 5              prefill 3, decode 1
    #   step 2: a decodes, b chunk 3 -> 8
    #   step 3: a decodes, b's last 2 -> 10: b samples its only token and finishes
    #   step 4: a decodes its 5th token and finishes
    sched = tiny_scheduler(16, max_batch_tokens=4)
    a, b = seq("a", 2, 5), seq("b", 10, 1)
    sched.add_request(a)
    sched.add_request(b)
    shapes = []
    for i in range(5):
        out, _ = step(sched, i)
        shapes.append((out.num_prefill_tokens, out.num_decode_tokens))
        assert out.num_tokens <= 4
    assert shapes == [(4, 0), (3, 1), (3, 1), (2, 1), (0, 1)]
    assert a.token_times == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert b.token_times == [4.0]
    assert b.scheduled_time == 0.0  # admitted with its first chunk in step 0


def test_admission_needs_the_whole_prompt_and_the_head_blocks_the_queue() -> None:
    # 8 blocks of 4, budget 8. a: prompt 20 (5 blocks), 4 outputs. b: prompt 16 (4 blocks). c: prompt 4.
    #   steps 0-2: a's prefill in chunks 8, 8, 4 (5 blocks); step 2 samples a's first token.
    #   step 2 has 4 tokens of budget left and 3 free blocks: b's first chunk (1 block) would fit,
    #   but its whole prompt (4 blocks) does not, so b waits - and c (1 block) waits behind it.
    #   step 3: a needs a 6th block (token 21) -> 2 free; a releases tokens at steps 2-5, then frees.
    #   step 6: b is admitted (8 tokens), c still behind it (budget used up).
    sched = tiny_scheduler(8, max_batch_tokens=8)
    a, b, c = seq("a", 20, 4), seq("b", 16, 1), seq("c", 4, 1)
    for s in (a, b, c):
        sched.add_request(s)
    for i in range(6):
        out, _ = step(sched, i)
        assert names(out.scheduled) == ["a"], i
        assert names(list(sched.waiting)) == ["b", "c"] or a.is_finished
    assert sched.kv.num_free == 8
    assert a.token_times == [3.0, 4.0, 5.0, 6.0]
    out, _ = step(sched, 6)
    assert names(out.scheduled) == ["b"]
    assert out.num_prefill_tokens == 8
    out, _ = step(sched, 7)
    assert names(out.scheduled) == ["b"]  # b's second chunk uses the whole budget
    out, _ = step(sched, 8)
    assert names(out.scheduled) == ["c"]  # b finished at step 7; c admitted


def test_max_num_sequences_caps_the_running_set() -> None:
    sched = tiny_scheduler(32, max_num_sequences=2)
    a, b, c = seq("a", 4, 2), seq("b", 4, 3), seq("c", 4, 1)
    for s in (a, b, c):
        sched.add_request(s)
    out, _ = step(sched, 0)
    assert names(out.scheduled) == ["a", "b"]
    assert names(list(sched.waiting)) == ["c"]
    out, _ = step(sched, 1)  # a finishes at the end of step 1
    assert names(out.scheduled) == ["a", "b"]
    out, _ = step(sched, 2)  # running first (b), then c takes a's place
    assert names(out.scheduled) == ["b", "c"]


def test_preemption_takes_the_newest_which_recomputes_prompt_and_outputs() -> None:
    # 6 blocks of 4. a, b, c: prompt 8 (2 blocks each), 4 outputs each.
    #   step 0: all three admitted (2 <= 6, 2 <= 4, 2 <= 2): 24 prefill tokens, token 1 each.
    #   step 1: a needs a 3rd block (token 9), none free -> preempt the newest, c (frees 2);
    #           a takes 1, b takes 1. c: computed 0, keeps its 1 output, front of the queue.
    #   steps 2-3: a and b decode; c needs 9 tokens = 3 blocks, 0 free: waits. a, b finish at 3.
    #   step 4: c recomputes 8 + 1 = 9 tokens and samples token 2; steps 5, 6: tokens 3, 4.
    sched = tiny_scheduler(6)
    a, b, c = seq("a", 8, 4), seq("b", 8, 4), seq("c", 8, 4)
    for s in (a, b, c):
        sched.add_request(s)
    trace = []
    for i in range(7):
        out, _ = step(sched, i)
        trace.append((names(out.scheduled), names(out.preempted), out.num_prefill_tokens, out.num_decode_tokens))
        if i == 1:
            assert c.status is SequenceStatus.PREEMPTED
            assert (c.num_computed_tokens, c.num_output_tokens, c.blocks) == (0, 1, [])
            assert names(list(sched.waiting)) == ["c"]
    assert trace == [
        (["a", "b", "c"], [], 24, 0),
        (["a", "b"], ["c"], 0, 2),
        (["a", "b"], [], 0, 2),
        (["a", "b"], [], 0, 2),
        (["c"], [], 9, 0),
        (["c"], [], 0, 1),
        (["c"], [], 0, 1),
    ]
    assert c.token_times == [1.0, 5.0, 6.0, 7.0]
    assert (a.num_preemptions, b.num_preemptions, c.num_preemptions) == (0, 0, 1)
    assert sched.num_preemptions == 1
    assert sched.kv.num_used == 0


def test_a_sequence_that_is_the_newest_preempts_itself() -> None:
    # 5 blocks of 4. a: prompt 7 (2 blocks, room for 8); b: prompt 12 (3 blocks, full).
    #   step 1: a computes token 8 (no new block); b computes token 13 and needs a 4th block:
    #           none free and b is the newest, so b preempts itself and the pass ends.
    #   step 2: a needs a 3rd block (3 free); b needs 13 tokens = 4 blocks > 2 free: waits.
    #   step 3: a finished at step 2 (3 outputs), so b is admitted and recomputes 13 tokens.
    sched = tiny_scheduler(5)
    a, b = seq("a", 7, 3), seq("b", 12, 3)
    sched.add_request(a)
    sched.add_request(b)
    step(sched, 0)
    out, _ = step(sched, 1)
    assert names(out.scheduled) == ["a"]
    assert names(out.preempted) == ["b"]
    assert sched.kv.num_free == 3
    assert b.blocks == []
    out, _ = step(sched, 2)
    assert names(out.scheduled) == ["a"]
    assert a.is_finished
    out, _ = step(sched, 3)
    assert names(out.scheduled) == ["b"]
    assert out.num_prefill_tokens == 13
    assert b.token_times == [1.0, 4.0]


def test_watermark_keeps_blocks_free_only_while_something_runs() -> None:
    # 10 blocks, watermark 0.2 -> 2 blocks kept free at admission.
    # a (prompt 4) runs; at step 1 it holds 2 blocks (token 5), leaving 8 free.
    # b (prompt 28 = 7 blocks): 7 + 2 > 8 with the watermark, 7 <= 8 without.
    for watermark, admitted in ((0.2, False), (0.0, True)):
        sched = tiny_scheduler(10, watermark=watermark)
        a, b = seq("a", 4, 10), seq("b", 28, 1)
        sched.add_request(a)
        step(sched, 0)
        sched.add_request(b)
        out, _ = step(sched, 1)
        assert (b in out.scheduled) is admitted
    # Nothing running: a 9-block prompt is admitted into 10 free blocks despite the 2 reserved.
    sched = tiny_scheduler(10, watermark=0.2)
    lone = seq("lone", 36, 1)
    sched.add_request(lone)
    out, _ = step(sched, 0)
    assert names(out.scheduled) == ["lone"]


def test_abort_frees_blocks_wherever_the_sequence_is() -> None:
    sched = tiny_scheduler(8, max_num_sequences=2)
    a, b, c = seq("a", 8, 5), seq("b", 8, 5), seq("c", 4, 5)
    for s in (a, b, c):
        sched.add_request(s)
    step(sched, 0)
    assert sched.kv.num_used == 4
    # Running: blocks back at once.
    assert sched.abort(a, 1.5)
    assert sched.kv.num_used == 2
    assert a not in sched.running
    # Waiting: leaves the queue.
    assert sched.abort(c, 1.5)
    assert not sched.waiting
    # Mid-step: scheduled, then aborted before the step ends -> no token, blocks already free.
    out = sched.schedule(2.0)
    assert names(out.scheduled) == ["b"]
    assert sched.abort(b, 2.5)
    result = sched.update_from_output(out, 3.0)
    assert result.released == []
    assert b.num_output_tokens == 1
    assert sched.kv.num_used == 0
    assert not sched.has_work()
    assert not sched.abort(b, 4.0)  # already ended
    stats = b.to_stats()
    assert stats.finish_reason is FinishReason.ABORT
    assert stats.finished == 2.5
    assert stats.output_tokens == 1


def test_context_length_stops_a_long_plan_and_refuses_a_long_prompt() -> None:
    sched = tiny_scheduler(8, context_length=16)
    a = seq("a", 10, 10)
    sched.add_request(a)
    assert a.max_output_tokens == 6
    assert a.finish_reason is FinishReason.LENGTH
    with pytest.raises(ValueError, match="context length"):
        sched.add_request(seq("b", 17, 1))


def test_a_plan_without_tokens_prefills_then_ends() -> None:
    sched = tiny_scheduler(8)
    a = seq("a", 5, 0)
    sched.add_request(a)
    out, result = step(sched, 0)
    assert out.num_prefill_tokens == 5
    assert result.released == []
    assert result.finished == [a]
    assert a.to_stats().ttft is None
    assert sched.kv.num_used == 0


def test_an_empty_prompt_is_scheduled_as_one_token() -> None:
    sched = tiny_scheduler(8)
    a = seq("a", 0, 2)
    sched.add_request(a)
    out, _ = step(sched, 0)
    assert out.num_prefill_tokens == 1
    step(sched, 1)
    assert a.is_finished
    assert a.to_stats().prompt_tokens == 0


def test_a_cache_smaller_than_one_full_context_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit in the KV cache"):
        tiny_scheduler(8, context_length=33)  # 8 blocks x 4 = 32 tokens
