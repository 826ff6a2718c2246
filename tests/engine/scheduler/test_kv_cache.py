"""The block pool: the null block, ceil-division growth, refusals that change nothing, vLLM's free order, conservation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsim.engine.scheduler import KVCache, kv_cache
from llmsim.engine.scheduler.block_hash import BlockHash
from llmsim.engine.scheduler.sequence import Sequence

from .builders import seq


def test_blocks_for_is_a_ceiling() -> None:
    kv = KVCache(10, 16)
    assert [kv.blocks_for(n) for n in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]


def test_block_zero_is_the_null_block_and_usage_is_over_the_rest() -> None:
    # vLLM's BlockPool takes block 0 at startup: of N = 5 blocks, 4 are usable.
    kv = KVCache(5, 4)
    assert (kv.num_blocks, kv.num_usable_blocks, kv.num_free) == (5, 4, 4)
    a = seq("a", 16, 1)
    assert kv.allocate_slots(a, 16)  # 4 blocks: every usable one
    assert a.blocks == [1, 2, 3, 4]
    assert kv.num_free == 0
    assert kv.usage == 1.0  # 4 used / (5 - 1), not 4 / 5
    assert not kv.allocate_slots(seq("b", 1, 1), 1)
    with pytest.raises(ValueError, match="null block"):
        KVCache(1, 4)


def test_allocate_grows_to_cover_computed_plus_new_tokens() -> None:
    # The module docstring's example: blocks of 4, 6 tokens computed (2 blocks), 3 more -> 1 new block.
    kv = KVCache(9, 4)
    s = seq("s", 20, 1)
    assert kv.allocate_slots(s, 6)
    assert s.blocks == [1, 2]
    s.num_computed_tokens = 6
    assert kv.allocate_slots(s, 3)
    assert s.blocks == [1, 2, 3]
    assert kv.num_free == 5
    s.num_computed_tokens = 9
    assert kv.allocate_slots(s, 3)  # 12 tokens still fit in 3 blocks
    assert len(s.blocks) == 3


def test_a_refusal_changes_nothing_and_takes_from_no_one() -> None:
    kv = KVCache(5, 4)
    a, b = seq("a", 12, 1), seq("b", 8, 1)
    assert kv.allocate_slots(a, 12)
    assert not kv.allocate_slots(b, 8)  # needs 2, 1 free
    assert b.blocks == []
    assert a.blocks == [1, 2, 3]
    assert kv.num_free == 1
    kv.audit([a, b])


def test_blocks_without_a_hash_are_reused_first_tail_first() -> None:
    # vLLM 0.34's free_blocks: a request's blocks come back in reverse order, and blocks without a
    # hash (here: caching off) are prepended, so they are reused before never-used ones (LIFO, for
    # GPU locality).
    kv = KVCache(5, 4)
    a, b = seq("a", 8, 1), seq("b", 4, 1)
    kv.allocate_slots(a, 8)  # blocks 1, 2
    kv.allocate_slots(b, 4)  # block 3; block 4 never used
    kv.free(a)
    assert a.blocks == []
    assert kv.num_used == 1
    assert kv.usage == 0.25
    c = seq("c", 12, 1)
    kv.allocate_slots(c, 12)
    # free_blocks(reversed([1, 2])) prepends [2, 1] keeping its order: the queue reads 2, 1, 4.
    assert c.blocks == [2, 1, 4]
    kv.audit([b, c])


def test_audit_catches_a_block_held_twice() -> None:
    kv = KVCache(5, 4)
    a, b = seq("a", 4, 1), seq("b", 4, 1)
    kv.allocate_slots(a, 4)
    b.blocks.append(a.blocks[0])  # corrupt on purpose: b never took a reference
    with pytest.raises(AssertionError, match="reference counts"):
        kv.audit([a, b])


def test_conservation_check_catches_a_leak() -> None:
    kv = KVCache(5, 4)
    a = seq("a", 4, 1)
    kv.allocate_slots(a, 4)
    a.blocks.clear()  # drop the block without freeing it
    kv.check()  # the counters still agree with each other...
    with pytest.raises(AssertionError):
        kv.audit([a])  # ...but the holders no longer account for every block


class _ReferencePool:
    """vLLM's free queue as its docstring states it, one block at a time in a plain list (the model
    the pool's sliced queue with stale entries is checked against)."""

    def __init__(self, num_blocks: int) -> None:
        self.queue = list(range(1, num_blocks))
        self.ref = [0] * num_blocks
        # Cached blocks and their identities, all mapped at once.
        self.hashed: dict[int, BlockHash] = {}

    def take(self, hits: list[int]) -> None:
        for b in hits:
            if self.ref[b] == 0:
                self.queue.remove(b)
            self.ref[b] += 1

    def pop(self, count: int) -> list[int]:
        taken, self.queue = self.queue[:count], self.queue[count:]
        for b in taken:
            self.hashed.pop(b, None)  # evicted on reuse
            self.ref[b] = 1
        return taken

    def free(self, blocks: list[int]) -> None:
        first: list[int] = []
        last: list[int] = []
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                (last if b in self.hashed else first).append(b)
        self.queue = first + self.queue + last


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_free_queue_keeps_vllms_order_through_hits_allocations_and_frees(data: st.DataObject) -> None:
    bs = data.draw(st.sampled_from([1, 2, 4]), label="block_size")
    num_blocks = data.draw(st.integers(2, 24), label="num_blocks")
    kv = KVCache(num_blocks, bs, enable_caching=True)
    model = _ReferencePool(num_blocks)
    # Dropping consumed entries (every few pops here, rarely in a real pool) changes no order.
    compact_after = kv_cache.COMPACT_AFTER
    kv_cache.COMPACT_AFTER = data.draw(st.sampled_from([0, 3, compact_after]), label="compact_after")
    try:
        _play(data, kv, model, bs)
    finally:
        kv_cache.COMPACT_AFTER = compact_after


def _play(data: st.DataObject, kv: KVCache, model: _ReferencePool, bs: int) -> None:
    # Prompts drawn from a few shared chains, so hits (on free and on held blocks) happen. A
    # request may end in text of its own (identities no other request holds, after its first
    # ``shareable`` blocks): the pool keeps those blocks out of its map until it is preempted,
    # which must change no order (the model maps every cached block at once).
    chains = [[bytes([c, i]) for i in range(8)] for c in range(3)]
    holders: list[Sequence] = []
    preempted: list[Sequence] = []
    for step in range(data.draw(st.integers(1, 40), label="operations")):
        op = data.draw(st.sampled_from(["admit", "grow", "free", "preempt"]))
        if op == "admit":
            resume: bool = data.draw(st.booleans(), label="resume") if preempted else False
            if resume:
                s = preempted.pop(0)
            else:
                chain = data.draw(st.sampled_from(chains))
                tokens = data.draw(st.integers(1, 8 * bs))
                s = seq(f"r{step}", tokens, 4)
                shareable = data.draw(st.none() | st.integers(0, tokens // bs), label="shareable")
                if shareable is None:
                    s.block_hashes = list(chain[: tokens // bs])
                else:
                    own = [bytes([9, step, i]) for i in range(8)]
                    s.block_hashes = (chain[:shareable] + own)[: tokens // bs]
                s.num_shareable_blocks = shareable
                s.hashable = True
            hits = kv.find_cached_prefix(s)
            # The longest cached prefix, as the model's eager map has it (own blocks included).
            known = set(model.hashed.values())
            expected = 0
            for h in s.block_hashes[: (s.num_tokens - 1) // bs]:
                if h not in known:
                    break
                expected += 1
            assert len(hits) == expected
            if kv.num_blocks_to_admit(s, hits) > kv.num_free:
                if s.num_preemptions:
                    preempted.insert(0, s)
                continue
            kv.take_cached(s, hits)
            model.take(hits)
            before = len(s.blocks)
            assert kv.allocate_slots(s, s.num_tokens - s.num_computed_tokens)
            assert s.blocks[before:] == model.pop(len(s.blocks) - before)
            s.num_computed_tokens = s.num_tokens
            kv.cache_blocks(s, s.num_tokens)
            model.hashed.update(zip(s.blocks[: s.num_cached_blocks], s.block_hashes, strict=False))
            holders.append(s)
        elif op == "grow" and holders:
            s = data.draw(st.sampled_from(holders))
            if kv.allocate_block(s):
                assert [s.blocks[-1]] == model.pop(1)
            else:
                assert not model.queue
        elif op in ("free", "preempt") and holders:
            s = holders.pop(data.draw(st.integers(0, len(holders) - 1)))
            model.free(s.blocks)
            kv.free(s, preempted=op == "preempt")
            if op == "preempt":
                # As the scheduler's _preempt: it will be admitted again, and hit its own blocks.
                s.num_computed_tokens = 0
                s.num_preemptions += 1
                preempted.append(s)
        assert kv.free_queue() == model.queue
        assert kv.num_free == len(model.queue)
        kv.check()
        kv.audit(holders)


def test_hits_on_free_blocks_do_not_grow_the_free_queue_without_bound() -> None:
    # Every request is served from the cache (8 hits on free blocks) and allocates one block: each
    # hit leaves a stale entry, pops reach few of them. The queue is compacted before the stale
    # entries outnumber the blocks, so it stays within a few times N (39 usable blocks here).
    kv = KVCache(40, 4, enable_caching=True)
    chain = [bytes([7, i]) for i in range(8)]
    for i in range(2000):
        s = seq(f"r{i}", 33, 4)
        s.block_hashes = list(chain)
        s.hashable = True
        hits = kv.find_cached_prefix(s)
        assert len(hits) == (8 if i else 0)
        kv.take_cached(s, hits)
        assert kv.allocate_slots(s, s.num_tokens - s.num_computed_tokens)
        s.num_computed_tokens = s.num_tokens
        kv.cache_blocks(s, s.num_tokens)
        kv.free(s)
        kv.audit([])
        # Private, on purpose: the entries the list really holds past its head.
        assert len(kv._queue) - kv._head <= 3 * kv.num_usable_blocks


def test_a_lookup_stops_at_the_shareable_blocks_until_the_sequence_is_preempted() -> None:
    # Blocks of 4 tokens. A computes and caches 3 blocks under identities x, y, z. B's text has the
    # same identities but is declared its own from block 1 on (num_shareable_blocks = 1): the rule
    # says nobody else holds them, so before B is preempted its lookup reads block 0 only (1 hit,
    # though y is mapped); once preempted (its own blocks are then mapped), it reads them all:
    # 3 hits, the most a 13-token prompt may take (at most num_tokens - 1 = 12 tokens).
    kv = KVCache(16, 4, enable_caching=True)
    a = seq("a", 12, 1)
    a.block_hashes, a.hashable = [b"x", b"y", b"z"], True
    assert kv.allocate_slots(a, 12)
    a.num_computed_tokens = 12
    kv.cache_blocks(a, 12)
    b = seq("b", 13, 1)
    b.block_hashes, b.hashable, b.num_shareable_blocks = [b"x", b"y", b"z"], True, 1
    assert kv.find_cached_prefix(b) == a.blocks[:1]
    b.num_preemptions = 1
    assert kv.find_cached_prefix(b) == a.blocks[:3]
