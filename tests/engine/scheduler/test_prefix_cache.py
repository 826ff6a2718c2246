"""Prefix caching as vLLM V1 does it, with every figure worked out by hand in the test."""

from __future__ import annotations

import pytest

from llmsim.engine.scheduler import Scheduler, Sequence
from llmsim.engine.scheduler.block_hash import hash_blocks
from llmsim.fleet import FleetRequest, simulate
from llmsim.types import BlockRemoved, BlockStored, RequestId

from .builders import roofline, seed_params, step, tiny_params


def ids(start: int, n: int) -> tuple[int, ...]:
    """``n`` distinct token ids from ``start`` (a block of content no other range shares)."""
    return tuple(range(start, start + n))


def test_a_repeated_4096_token_prompt_hits_4080_tokens_and_ttft_falls_by_their_prefill() -> None:
    # Blocks of 16: 4,096 tokens = 256 full blocks. The second request may hit at most
    # 4,096 - 1 tokens, i.e. floor(4,095 / 16) = 255 blocks = 4,080 tokens; it computes the last 16.
    prompt = ids(1000, 4096)
    work = [
        FleetRequest.of(0.0, 4096, 1, prompt_token_ids=prompt),
        FleetRequest.of(1.0, 4096, 1, prompt_token_ids=prompt),
    ]
    result = simulate(seed_params(), work, audit=True)
    first, second = result.requests
    assert (first.prefix_hit_tokens, second.prefix_hit_tokens) == (0, 4080)
    # Each is alone on the GPU: one prefill step releases its only token. Attention still reads
    # the whole 4,096-token context; only the computed tokens fall from 4,096 to 16.
    assert first.ttft == pytest.approx(roofline(4096, 4096), rel=1e-12)
    assert second.ttft == pytest.approx(roofline(16, 4096), rel=1e-12)
    # On the reference GPU the 4,096-token prefill is compute-bound (2 x 6.74e9 x 4,096 / 989e12 =
    # 55.8 ms), the 16-token one memory-bound (weights + 4,096 x 512 KiB over 3 TB/s = 5.21 ms).
    assert first.ttft == pytest.approx(2 * 6.74e9 * 4096 / 989e12, rel=1e-12)
    assert second.ttft == pytest.approx((6.74e9 * 2 + 524_288 * 4096) / 3000e9, rel=1e-12)
    assert [s.num_prefill_tokens for s in result.steps] == [4096, 16]
    summary = result.summary()
    assert (summary.prefix_query_tokens, summary.prefix_hit_tokens) == (2 * 4096, 4080)


def test_a_shared_2048_token_system_prompt_hits_2048_tokens_per_request_after_the_first() -> None:
    # 2,048 = 128 full blocks, shared; each request adds 100 tokens of its own question. The cap
    # floor((2,148 - 1) / 16) = 134 blocks does not bind, and the question's first block already
    # differs, so each later request hits exactly the 2,048 shared tokens and computes 100.
    system = ids(1000, 2048)
    work = [
        FleetRequest.of(float(i), 2148, 1, prompt_token_ids=system + ids(100_000 + 1000 * i, 100)) for i in range(5)
    ]
    result = simulate(seed_params(), work, audit=True)
    assert [r.prefix_hit_tokens for r in result.requests] == [0, 2048, 2048, 2048, 2048]
    assert [s.num_prefill_tokens for s in result.steps] == [2148, 100, 100, 100, 100]
    summary = result.summary()
    assert (summary.prefix_query_tokens, summary.prefix_hit_tokens) == (5 * 2148, 4 * 2048)
    assert summary.prefix_hit_rate == pytest.approx(4 * 2048 / (5 * 2148))


def test_requests_admitted_in_the_same_step_hit_blocks_cached_as_that_step_is_scheduled() -> None:
    # vLLM caches a block when the step computing it is scheduled, so the second of three
    # simultaneous requests already hits the first one's 128 shared blocks: 2,148 + 100 + 100
    # tokens in one step, every later request hitting 2,048.
    system = ids(1000, 2048)
    work = [FleetRequest.of(0.0, 2148, 1, prompt_token_ids=system + ids(100_000 + 1000 * i, 100)) for i in range(3)]
    result = simulate(seed_params(), work, audit=True)
    assert [r.prefix_hit_tokens for r in result.requests] == [0, 2048, 2048]
    assert [s.num_prefill_tokens for s in result.steps] == [2148 + 100 + 100]


def test_requests_without_token_ids_or_with_caching_off_never_hit() -> None:
    prompt = ids(1000, 64)
    same_ids = [FleetRequest.of(float(i), 64, 1, prompt_token_ids=prompt) for i in range(2)]
    off = simulate(seed_params(enable_prefix_caching=False), same_ids).summary()
    assert (off.prefix_query_tokens, off.prefix_hit_tokens) == (0, 0)  # vLLM does not query a disabled cache
    unknown = simulate(seed_params(), [FleetRequest.of(float(i), 64, 1) for i in range(2)]).summary()
    assert (unknown.prefix_query_tokens, unknown.prefix_hit_tokens) == (2 * 64, 0)


def test_eviction_takes_the_least_recently_freed_block_and_a_chains_tail_first() -> None:
    # 6 usable blocks (1-6) of 4 tokens. Prompts of 9 tokens hold 2 full blocks and a partial one.
    #   A (a1..a9) takes 1, 2, 3; freed in reverse: 3 (no hash) to the front, then 2, 1 to the back
    #       -> queue 3 4 5 6 2 1
    #   B (b1..b9) takes 3, 4, 5; freed: 5 to the front, 4, 3 to the back -> queue 5 6 2 1 4 3
    #   C (16 tokens) takes 5, 6, 2, 1: evicting A's second block (2) and then its first (1).
    # So A's blocks went first (freed least recently), and of A's chain the tail before the head;
    # B's blocks survive: B repeated hits its 2 blocks (cap floor(8 / 4) = 2), A repeated hits none.
    params = tiny_params(6, block_size=4, enable_kv_cache_events=True)
    sched: Scheduler[Sequence] = Scheduler(params)
    a_ids, b_ids, c_ids = ids(100, 9), ids(200, 9), ids(300, 16)
    a_hashes, b_hashes = hash_blocks(a_ids, 4), hash_blocks(b_ids, 4)
    removed: list[bytes] = []
    for clock, (name, prompt) in enumerate((("a", a_ids), ("b", b_ids), ("c", c_ids))):
        sched.add_request(Sequence(RequestId(name), 0.0, len(prompt), 1, prompt_token_ids=prompt))
        out, result = step(sched, clock)
        assert [s.request_id for s in result.finished] == [name]
        events = sched.step_stats(out, 0.0, 1.0).kv_events
        removed += [h for e in events if isinstance(e, BlockRemoved) for h in e.block_hashes]
    assert removed == [a_hashes[1], a_hashes[0]]
    assert sched.kv.num_used == 0  # cached blocks nobody holds count as free (vLLM's usage)
    again_a = Sequence(RequestId("a2"), 0.0, 9, 1, prompt_token_ids=a_ids)
    again_b = Sequence(RequestId("b2"), 0.0, 9, 1, prompt_token_ids=b_ids)
    assert sched.kv.find_cached_prefix(again_a) == []
    assert sched.kv.find_cached_prefix(again_b) == [3, 4]
    assert sched.cached_prefix_tokens(b_hashes) == 8


def test_a_hit_on_a_free_cached_block_costs_a_free_block_at_admission() -> None:
    # 4 usable blocks of 4. A (8 tokens) finishes; its 2 blocks are cached and free (4 free).
    # B (12 tokens: A's 8 + 4 more) hits both (cap floor(11 / 4) = 2): it needs 3 blocks in all,
    # 1 new + the 2 hits taken off the free queue = 3 of the 4 free, as vLLM's
    # get_num_blocks_to_allocate counts them.
    sched: Scheduler[Sequence] = Scheduler(tiny_params(4, block_size=4))
    a = Sequence(RequestId("a"), 0.0, 8, 1, prompt_token_ids=ids(100, 8))
    sched.add_request(a)
    step(sched, 0)
    b = Sequence(RequestId("b"), 0.0, 12, 1, prompt_token_ids=ids(100, 8) + ids(500, 4))
    hits = sched.kv.find_cached_prefix(b)
    assert len(hits) == 2
    assert sched.kv.num_blocks_to_admit(b, hits) == 3
    # A hit on blocks a running request holds costs nothing: once H (A's 8 tokens + 4 of its own)
    # holds blocks 1 and 2, B needs only its 1 new block.
    holder = Sequence(RequestId("h"), 0.0, 12, 5, prompt_token_ids=ids(100, 8) + ids(900, 4))
    sched.add_request(holder)
    step(sched, 1)
    assert sched.kv.num_blocks_to_admit(b, sched.kv.find_cached_prefix(b)) == 1


def test_a_preempted_request_hits_its_own_blocks_when_it_resumes() -> None:
    # 4 usable blocks of 4, budget 1000. A: prompt 8 (a1..a8), 4 outputs; B: prompt 4, 4 outputs.
    #   step 0: both admitted: A takes 1, 2 (both full: cached), B takes 3 (full: cached).
    #   step 1: A's token 9 needs a 3rd block: takes 4. B's token 5 needs a 2nd: none left, so B
    #           (the newest) preempts itself; its block 3 keeps its hash and goes to the back.
    #   steps 2-3: A alone; at step 3 A releases its 4th token and frees 4 (partial) to the front,
    #           2, 1 to the back: queue 4 3 2 1.
    #   step 4: B resumes with 5 tokens (prompt + its first output): it hits block 3 (its own
    #           prompt, cap floor(4 / 4) = 1 block) and recomputes 1 token instead of 5.
    # vLLM 0.34 leaves re-admissions out of the prefix-cache counters: only the first admissions
    # count (8 + 4 queried, 0 hit), and B's cached_tokens stays what its first admission found (0).
    sched: Scheduler[Sequence] = Scheduler(tiny_params(4, block_size=4))
    a = Sequence(RequestId("a"), 0.0, 8, 4, prompt_token_ids=ids(100, 8))
    b = Sequence(RequestId("b"), 0.0, 4, 4, prompt_token_ids=ids(200, 4))
    sched.add_request(a)
    sched.add_request(b)
    queries = hits = 0
    shapes = []
    for i in range(6):
        out, _ = step(sched, i)
        stats = sched.step_stats(out, float(i), 1.0)
        queries += stats.prefix_cache_queries
        hits += stats.prefix_cache_hits
        shapes.append(([s.request_id for s in out.scheduled], out.num_tokens, [s.request_id for s in out.preempted]))
    assert shapes == [
        (["a", "b"], 12, []),
        (["a"], 1, ["b"]),
        (["a"], 1, []),
        (["a"], 1, []),
        (["b"], 1, []),  # 5 without the hit
        (["b"], 1, []),
    ]
    assert b.blocks == [3, 4]
    assert (queries, hits) == (12, 0)
    assert b.num_cached_tokens == 0


def test_block_stored_events_carry_the_chain_and_the_tokens() -> None:
    # One 10-token prompt in blocks of 4: blocks 0 and 1 are full and stored at once, in one
    # event, chained from no parent; the 3rd block (tokens 9-10) is partial and not stored.
    sched: Scheduler[Sequence] = Scheduler(tiny_params(8, block_size=4, enable_kv_cache_events=True))
    prompt = ids(100, 10)
    sched.add_request(Sequence(RequestId("a"), 0.0, 10, 3, prompt_token_ids=prompt, output_token_ids=(7, 8, 9)))
    out, _ = step(sched, 0)
    (stored,) = sched.step_stats(out, 0.0, 1.0).kv_events
    h = hash_blocks(prompt, 4)
    assert stored == BlockStored(block_hashes=tuple(h), parent_block_hash=None, token_ids=prompt[:8], block_size=4)
    # Step 1 computes token 11 (the first output, id 7); step 2 token 12 (id 8): block 2 is then
    # full - prompt tokens 9, 10 and outputs 7, 8 - and stored, chained on block 1.
    out, _ = step(sched, 1)
    assert sched.step_stats(out, 1.0, 1.0).kv_events == []
    out, _ = step(sched, 2)
    (stored,) = sched.step_stats(out, 2.0, 1.0).kv_events
    assert isinstance(stored, BlockStored)
    assert stored.parent_block_hash == h[1]
    assert stored.token_ids == (108, 109, 7, 8)
    assert stored.block_hashes == tuple(hash_blocks((*prompt, 7, 8), 4)[2:])
