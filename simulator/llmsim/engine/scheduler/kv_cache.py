"""The KV block pool: answers whether a sequence's next tokens fit, never picks a victim.

A sequence holding ``len(blocks)`` blocks may hold KV for ``len(blocks) * block_size`` tokens;
scheduling ``n`` more tokens needs ``ceil((num_computed + n) / block_size)`` blocks in all::

    block_size = 4, num_computed = 6, n = 3
    | t0 t1 t2 t3 | t4 t5 n0 n1 | n2 .. .. .. |
    |  held       |  held       |  new block  |    -> allocate 1

Blocks are conserved (free + held == total) and a block is never held twice: every allocation
and free checks an ownership flag, which costs one byte per block and O(1) per block moved.
"""

from __future__ import annotations

from collections import deque

from llmsim.engine.scheduler.sequence import Sequence


class KVCache:
    """Free blocks in a deque (allocate from the left, free to the right)."""

    __slots__ = ("_free", "_num_held", "_owned", "block_size", "num_blocks")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: deque[int] = deque(range(num_blocks))
        # 1 while some sequence holds the block.
        self._owned = bytearray(num_blocks)
        self._num_held = 0

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use (vLLM's ``kv_cache_usage_perc``, 0-1)."""
        return self.num_used / self.num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens of KV."""
        return -(-num_tokens // self.block_size)

    def allocate_slots(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Grow ``seq`` to hold ``num_new_tokens`` more tokens; False (and no change) if blocks are short."""
        need = self.blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.blocks)
        if need <= 0:
            return True
        free = self._free
        if need > len(free):
            return False
        owned = self._owned
        held = seq.blocks
        # At most one block per block_size tokens: rare on the decode path.
        for _ in range(need):
            block = free.popleft()
            assert not owned[block], f"block {block} is free and held at once"
            owned[block] = 1
            held.append(block)
        self._num_held += need
        return True

    def free(self, seq: Sequence) -> None:
        """Return every block ``seq`` holds to the pool."""
        owned = self._owned
        free = self._free
        for block in seq.blocks:
            assert owned[block], f"block {block} freed but not held"
            owned[block] = 0
            free.append(block)
        self._num_held -= len(seq.blocks)
        seq.blocks.clear()

    def check(self) -> None:
        """Cheap conservation check (O(1)), run at the end of every step."""
        assert len(self._free) + self._num_held == self.num_blocks, "KV blocks leaked or double-counted"

    def audit(self, holders: list[Sequence]) -> None:
        """Full check for tests: the holders' blocks and the free list partition the pool exactly."""
        held = [b for seq in holders for b in seq.blocks]
        if len(set(held)) != len(held):
            raise AssertionError("a block is held by two sequences")
        if len(set(self._free)) != len(self._free):
            raise AssertionError("a block is on the free list twice")
        if set(held) & set(self._free):
            raise AssertionError("a block is both free and held")
        if len(held) + len(self._free) != self.num_blocks or len(held) != self._num_held:
            raise AssertionError(f"{len(held)} held + {len(self._free)} free != {self.num_blocks} blocks")
        if sum(self._owned) != len(held):
            raise AssertionError("ownership flags disagree with the holders")
