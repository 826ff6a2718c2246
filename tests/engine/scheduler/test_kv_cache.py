"""The block pool: ceil-division growth, refusals that change nothing, conservation."""

from __future__ import annotations

import pytest

from llmsim.engine.scheduler import KVCache

from .builders import seq


def test_blocks_for_is_a_ceiling() -> None:
    kv = KVCache(10, 16)
    assert [kv.blocks_for(n) for n in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]


def test_allocate_grows_to_cover_computed_plus_new_tokens() -> None:
    # The module docstring's example: blocks of 4, 6 tokens computed (2 blocks), 3 more -> 1 new block.
    kv = KVCache(8, 4)
    s = seq("s", 20, 1)
    assert kv.allocate_slots(s, 6)
    assert s.blocks == [0, 1]
    s.num_computed_tokens = 6
    assert kv.allocate_slots(s, 3)
    assert s.blocks == [0, 1, 2]
    assert kv.num_free == 5
    s.num_computed_tokens = 9
    assert kv.allocate_slots(s, 3)  # 12 tokens still fit in 3 blocks
    assert len(s.blocks) == 3


def test_a_refusal_changes_nothing_and_takes_from_no_one() -> None:
    kv = KVCache(4, 4)
    a, b = seq("a", 12, 1), seq("b", 8, 1)
    assert kv.allocate_slots(a, 12)
    assert not kv.allocate_slots(b, 8)  # needs 2, 1 free
    assert b.blocks == []
    assert a.blocks == [0, 1, 2]
    assert kv.num_free == 1
    kv.audit([a, b])


def test_free_returns_blocks_to_the_back_of_the_queue() -> None:
    kv = KVCache(4, 4)
    a, b = seq("a", 8, 1), seq("b", 4, 1)
    kv.allocate_slots(a, 8)
    kv.allocate_slots(b, 4)
    kv.free(a)
    assert a.blocks == []
    assert kv.num_used == 1
    assert kv.usage == 0.25
    c = seq("c", 8, 1)
    kv.allocate_slots(c, 8)
    assert c.blocks == [3, 0]  # never-used block 3 first, then the freed ones in order
    kv.audit([b, c])


def test_audit_catches_a_block_held_twice() -> None:
    kv = KVCache(4, 4)
    a, b = seq("a", 4, 1), seq("b", 4, 1)
    kv.allocate_slots(a, 4)
    b.blocks.append(a.blocks[0])  # corrupt on purpose
    with pytest.raises(AssertionError, match="held by two"):
        kv.audit([a, b])


def test_conservation_check_catches_a_leak() -> None:
    kv = KVCache(4, 4)
    a = seq("a", 4, 1)
    kv.allocate_slots(a, 4)
    a.blocks.clear()  # drop the block without freeing it
    kv.check()  # the counters still agree with each other...
    with pytest.raises(AssertionError):
        kv.audit([a])  # ...but the holders no longer account for every block
