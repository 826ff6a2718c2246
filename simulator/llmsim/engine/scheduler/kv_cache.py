"""The KV block pool and its prefix cache (vLLM V1's ``BlockPool`` + ``KVCacheManager``): answers
whether a sequence's tokens fit, never picks a victim.

A sequence holding ``len(blocks)`` blocks may hold KV for ``len(blocks) * block_size`` tokens;
scheduling ``n`` more tokens needs ``ceil((num_computed + n) / block_size)`` blocks in all::

    block_size = 4, num_computed = 6, n = 3
    | t0 t1 t2 t3 | t4 t5 n0 n1 | n2 .. .. .. |
    |  held       |  held       |  new block  |    -> allocate 1

vLLM's rules, read from ``vllm/v1/core/block_pool.py`` and ``kv_cache_manager.py`` (0.34):

- Block 0 is the *null block*, taken at startup and never handed out: of ``N`` blocks ``N - 1``
  are usable, and usage is ``1 - free / (N - 1)``.
- Free blocks wait in a queue, initially by block id. Allocation pops from the front. A freed
  request returns its blocks in reverse order (the tail of a chain first); blocks without a hash
  (a partial tail, or caching off) go to the *front* (reused first), hashed blocks to the *back*
  in that order, so the least recently freed cached block is evicted first, and a chain's tail
  before its prefix.
- A full block gets its hash when the step that computes its last token is *scheduled* (so a
  request admitted later in the same step can already hit it), and keeps it after being freed:
  it stays findable until an allocation pops it from the free queue (lazy eviction, one
  ``BlockRemoved`` per evicted hash).
- A lookup finds the longest run of cached full blocks from the start, at most
  ``num_tokens - 1`` tokens (one token is always computed, for its logits). A hit on a free
  block takes it off the free queue, so it costs a free block in the admission check; a hit on
  a block another request holds costs nothing (reference counts).
- Identical blocks computed by two requests at once are both cached under one hash (vLLM does
  not de-duplicate, so block tables stay append-only); each is announced and evicted on its own.

Invariants (checked every step, O(1)): ``free + held == N - 1``. :meth:`KVCache.audit` checks
everything, for tests.

Reference counts are kept for the blocks in the prefix cache's map only (a mapped block is free
iff its count is 0); an unmapped block's count stays 0. Only a lookup can give a block a second
holder, and a lookup finds mapped blocks only, so an unmapped held block has exactly one holder,
the sequence whose ``blocks`` list it is in: freeing it needs no count, and allocating one needs
no store. Most blocks are never mapped (caching off; partial blocks; a fleet request's own
text, below), so a request's blocks are allocated and freed as slices, without a Python loop.

The free queue is vLLM's order in a cheaper shape (vLLM keeps a doubly linked list of blocks,
one Python object per block): a list read from a head index, so a request's blocks are popped as
one slice, a freed request's cached blocks appended in one call and its uncached ones written in
front of the head in one slice assignment. A hit on a free block (the only removal from the
middle) leaves its entry in place, marked stale: the pop that reaches it skips it. A block's
stale entries always come before its live one (a hit block is cached, so it goes back to the
tail when freed, and the front only ever receives uncached blocks, which have no stale entries).
Consumed entries are dropped now and then, and the stale ones too once they outnumber the blocks,
so the list stays O(N) whatever the mix of hits and allocations.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence as Seq
from typing import TypeVar

from llmsim.engine.scheduler.block_hash import BlockHash
from llmsim.engine.scheduler.sequence import Sequence
from llmsim.types import AllBlocksCleared, BlockRemoved, BlockStored, KVCacheEvent

S = TypeVar("S", bound=Sequence)

#: Block 0, never allocated (vLLM's null block: padding for skipped attention blocks).
NULL_BLOCK = 0

#: Consumed entries at the front of the free queue's list beyond which (and beyond half the list)
#: they are dropped.
COMPACT_AFTER = 4096


def _digest(block_hash: BlockHash) -> bytes:
    """A block's hash as a KV event carries it: only engines that hash token ids (sha256 digests)
    record events; the fleet planner's integer identities never reach one."""
    assert isinstance(block_hash, bytes), "KV events are recorded only for blocks hashed from token ids"
    return block_hash


class KVCache:
    """``N`` blocks of ``block_size`` tokens, with an optional prefix cache.

    Parameters
    ----------
    num_blocks:
        ``N``, as sized from memory (``num_gpu_blocks``); ``N - 1`` are usable.
    block_size:
        Tokens per block.
    enable_caching:
        Keep full blocks' hashes for reuse (vLLM's ``enable_prefix_caching``).
    record_events:
        Record :class:`~llmsim.types.KVCacheEvent` in :attr:`events` (for the KV-events publisher).
    """

    __slots__ = (
        "_cached",
        "_hash",
        "_head",
        "_num_stale",
        "_queue",
        "_ref",
        "_stale",
        "block_size",
        "enable_caching",
        "events",
        "num_blocks",
        "num_usable_blocks",
        "num_used",
    )

    def __init__(
        self, num_blocks: int, block_size: int, *, enable_caching: bool = False, record_events: bool = False
    ) -> None:
        if num_blocks < 2 or block_size < 1:
            raise ValueError("num_blocks must be >= 2 (block 0 is the null block) and block_size >= 1")
        self.num_blocks = num_blocks
        self.num_usable_blocks = num_blocks - 1
        self.block_size = block_size
        self.enable_caching = enable_caching
        # Reference count per mapped block: how many sequences hold it (0 for unmapped blocks,
        # which have one holder or none; the null block: always 1).
        self._ref = [0] * num_blocks
        self._ref[NULL_BLOCK] = 1
        # Hash of a block that is (or was, until evicted) a cached full block.
        self._hash: list[BlockHash | None] = [None] * num_blocks
        # The free queue: entries _queue[_head:], front first; stale entries (hits taken off the
        # middle) counted per block in _stale and in all in _num_stale (see the module's notes).
        self._queue: list[int] = list(range(1, num_blocks))
        self._head = 0
        self._stale = [0] * num_blocks
        self._num_stale = 0
        # Cached full blocks by hash: one block id, or a list when identical blocks were computed twice.
        self._cached: dict[BlockHash, int | list[int]] = {}
        # Blocks held by some sequence (the null block excluded).
        self.num_used = 0
        self.events: list[KVCacheEvent] | None = [] if record_events else None

    # -- figures ----------------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        """Blocks an allocation may take: never held, or held once and now only cached."""
        return self.num_usable_blocks - self.num_used

    @property
    def usage(self) -> float:
        """vLLM's ``kv_cache_usage_perc``: ``1 - free / (N - 1)``, 0-1."""
        return self.num_used / self.num_usable_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks that a lookup could find right now (held or free)."""
        return sum(len(v) if isinstance(v, list) else 1 for v in self._cached.values())

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` tokens of KV."""
        return -(-num_tokens // self.block_size)

    # -- prefix cache lookups ---------------------------------------------------------------

    def count_cached_prefix(self, block_hashes: Iterable[BlockHash]) -> int:
        """How many leading blocks of ``block_hashes`` are cached now (a router's question: no state changes).

        ``block_hashes`` come from :func:`~llmsim.engine.scheduler.block_hash.hash_blocks`; the
        hit in tokens is ``block_size`` times the result (a request's own lookup is further capped
        at its length minus one token).
        """
        if not self.enable_caching:
            return 0
        cached = self._cached
        n = 0
        for h in block_hashes:
            if h not in cached:
                break
            n += 1
        return n

    def find_cached_prefix(self, seq: Sequence) -> list[int]:
        """The blocks of ``seq``'s longest cached prefix: full blocks only, at most ``num_tokens - 1`` tokens."""
        if not self.enable_caching or not seq.hashable:
            return []
        bs = self.block_size
        max_blocks = (seq.num_prompt_tokens + seq.num_output_tokens - 1) // bs
        shareable = seq.num_shareable_blocks
        if shareable is not None and shareable < max_blocks and not seq.num_preemptions:
            # Blocks past its shareable ones are mapped only when it is preempted (see
            # cache_blocks): until then no lookup can find them.
            max_blocks = shareable
        if not max_blocks:
            return []
        hashes = seq.ensure_block_hashes(max_blocks * bs, bs)
        cached = self._cached
        hits: list[int] = []
        # One dict lookup per block of the prompt, once per admission attempt.
        for h in hashes[:max_blocks]:
            entry = cached.get(h)
            if entry is None:
                break
            hits.append(entry if type(entry) is int else entry[0])  # type: ignore[index]
        return hits

    def num_blocks_to_admit(self, seq: Sequence, hits: Seq[int]) -> int:
        """Free blocks admitting all of ``seq`` with ``hits`` would take (vLLM's full-sequence admission gate).

        ``ceil(num_tokens / block_size) - len(hits)`` new blocks, plus every hit block that is
        free now (a touched block leaves the free queue).
        """
        needed = -(-(seq.num_prompt_tokens + seq.num_output_tokens) // self.block_size)
        if not hits:
            return needed
        ref = self._ref
        evictable = sum(1 for b in hits if ref[b] == 0)
        return needed - len(hits) + evictable

    # -- allocation -------------------------------------------------------------------------

    def take_cached(self, seq: Sequence, hits: Seq[int]) -> None:
        """Give ``seq`` (holding nothing) the cached blocks ``hits``: they count as computed."""
        assert not seq.blocks, "a hit starts a sequence that holds nothing"
        assert seq.num_computed_tokens == 0, "a hit starts a sequence with nothing computed"
        ref = self._ref
        for b in hits:
            if ref[b] == 0:
                # Off the free queue: its entry stays, stale, until a pop reaches it.
                self._stale[b] += 1
                self._num_stale += 1
                self.num_used += 1
            ref[b] += 1
        if self._num_stale > self.num_usable_blocks:
            # Hits outpacing pops (a workload served from the cache): drop the stale entries
            # before they outnumber the blocks, so the queue stays O(N) (amortized O(1) per hit).
            self._queue = self.free_queue()
            self._head = 0
            self._stale = [0] * self.num_blocks
            self._num_stale = 0
        seq.blocks.extend(hits)
        seq.num_cached_blocks = len(hits)
        seq.num_computed_tokens = len(hits) * self.block_size

    def allocate_slots(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Grow ``seq`` to hold ``num_new_tokens`` more tokens; False (and no change) if blocks are short."""
        held = seq.blocks
        need = -(-(seq.num_computed_tokens + num_new_tokens) // self.block_size) - len(held)
        if need <= 0:
            return True
        if need > self.num_usable_blocks - self.num_used:
            return False
        held += self._pop(need)
        return True

    def allocate_block(self, seq: Sequence) -> bool:
        """Give ``seq`` one more block (a decode step crossing a block boundary); False if none is free."""
        if self.num_used == self.num_usable_blocks:
            return False
        seq.blocks += self._pop(1)
        return True

    def append_blocks(self, seqs: list[S]) -> bool:
        """Give each of ``seqs`` one more block, in that order (a decode step's boundary crossings,
        in batch order); False (and no change) if fewer blocks are free."""
        count = len(seqs)
        if count > self.num_usable_blocks - self.num_used:
            return False
        # By index over two lists (not zip): compiled (setup.py), a typed loop with no tuples.
        new = self._pop(count)
        for i in range(count):
            seqs[i].blocks.append(new[i])
        return True

    def _pop(self, count: int) -> list[int]:
        """Take ``count`` blocks (at most the free ones) from the front of the free queue, evicting
        the cached ones (vLLM's ``get_new_blocks``)."""
        queue = self._queue
        head = self._head
        if not self._num_stale:
            new = queue[head : head + count]
            head += count
        else:
            stale = self._stale
            new = []
            while len(new) < count:
                block = queue[head]
                head += 1
                if stale[block]:
                    stale[block] -= 1
                    self._num_stale -= 1
                else:
                    new.append(block)
        if head > COMPACT_AFTER and head > len(queue) >> 1:
            # Drop the consumed entries now and then: amortized O(1) per block.
            del queue[:head]
            head = 0
        self._head = head
        self.num_used += count
        cached = self._cached
        if not cached:
            return new  # nothing is mapped, so nothing to evict (and new blocks take no count)
        block_hash = self._hash
        events = self.events
        # Once per block allocated while some block is mapped: a mapped block is evicted as it is
        # reused (its count is 0: it was free).
        for block in new:
            h = block_hash[block]
            if h is not None:
                block_hash[block] = None
                entry = cached[h]
                if type(entry) is int:
                    del cached[h]
                else:
                    self._evict_duplicate(h, entry, block)
                if events is not None:
                    events.append(BlockRemoved((_digest(h),)))
        return new

    def _evict_duplicate(self, h: BlockHash, entry: int | list[int], block: int) -> None:
        """Forget ``block``, one of identical blocks cached under ``h`` (vLLM's ``_maybe_evict_cached_block``)."""
        assert isinstance(entry, list)
        entry.remove(block)
        if len(entry) == 1:
            self._cached[h] = entry[0]

    def cache_blocks(self, seq: Sequence, num_tokens: int) -> None:
        """Put ``seq``'s full blocks among its first ``num_tokens`` tokens in the prefix cache.

        Called when a step is scheduled, for ``min(num_computed_tokens, num_tokens)``: vLLM caches
        the KV a step will write as it schedules the step. A block whose token ids are not all
        known (outputs without ids) is not cached.

        Blocks past ``seq.num_shareable_blocks`` count as cached (they go back to the tail of the
        free queue, as vLLM's cached blocks do) but stay out of the map: no other request holds
        their identities, so no lookup could find them before :meth:`free` maps them when the
        sequence is preempted. (The map's only other reader is eviction, which has nothing to
        forget for them.) A fleet of unique prompts so skips a dict insert and delete per block.
        """
        if not self.enable_caching or not seq.hashable:
            return
        bs = self.block_size
        start = seq.num_cached_blocks
        if num_tokens // bs <= start:
            return  # no block filled since the last call: most decode steps end here
        hashes = seq.ensure_block_hashes(num_tokens, bs)
        end = min(num_tokens // bs, len(hashes))
        if end <= start:
            return
        seq.num_cached_blocks = end
        shareable = seq.num_shareable_blocks
        if shareable is not None and end > shareable:
            if start >= shareable:
                return
            end = shareable
        self._map(seq.blocks[start:end], hashes[start:end])
        if self.events is not None:
            self.events.append(
                BlockStored(
                    block_hashes=tuple(_digest(h) for h in hashes[start:end]),
                    parent_block_hash=_digest(hashes[start - 1]) if start else None,
                    token_ids=seq.token_ids_between(start * bs, end * bs),
                    block_size=bs,
                    lora_id=seq.lora_id or None,
                    lora_name=seq.lora_name,
                )
            )

    def _map(self, blocks: list[int], new: Seq[BlockHash]) -> None:
        """Make ``blocks`` findable under their identities ``new`` (none of them mapped yet; each held
        by one sequence, which now counts)."""
        block_hash = self._hash
        ref = self._ref
        # Once per block filled: no per-block check here (audit() checks every block's hash).
        for block, h in zip(blocks, new, strict=True):
            block_hash[block] = h
            ref[block] = 1
        cached = self._cached
        size = len(cached)
        # Hashes nobody has cached (nearly always): one C-level update. Identical blocks computed
        # twice (vLLM keeps both under one hash) take the loop.
        fresh = cached.keys().isdisjoint(new)
        if fresh:
            cached.update(zip(new, blocks, strict=True))
            if len(cached) != size + len(new):
                # A hash repeated within ``new`` itself: undo (none of them was there) and loop.
                for h in new:
                    cached.pop(h, None)
                fresh = False
        if not fresh:
            for block, h in zip(blocks, new, strict=True):
                entry = cached.get(h)
                if entry is None:
                    cached[h] = block
                elif type(entry) is int:
                    cached[h] = [entry, block]
                else:
                    assert isinstance(entry, list)
                    entry.append(block)

    def free(self, seq: Sequence, *, preempted: bool = False) -> None:
        """Return every block ``seq`` holds to the pool, in vLLM's order (tail first).

        A held block is in the prefix cache exactly when it is among the sequence's first
        ``num_cached_blocks`` (hit or stored by it; a block popped for it was evicted first), and
        only those can be shared: the others go back to the front of the queue, unhashed, at once.
        Of the cached ones the mapped ones come first: its hits, then those it stored up to its
        shareable ones (see :meth:`cache_blocks`); the rest have no count and no other holder.
        A ``preempted`` sequence will look its blocks up again: those past its shareable ones
        are mapped now, the state eager mapping would have left.
        """
        blocks = seq.blocks
        n = seq.num_cached_blocks if self.enable_caching else 0
        # Leading blocks that are mapped: all the cached ones, unless some are its own.
        mapped = n
        shareable = seq.num_shareable_blocks
        if shareable is not None and n > shareable:
            mapped = shareable
            block_hash = self._hash
            # Those it hit after an earlier preemption are mapped already (a prefix: hits are).
            while mapped < n and block_hash[blocks[mapped]] is not None:
                mapped += 1
            if preempted and mapped < n:
                self._map(blocks[mapped:n], seq.block_hashes[mapped:n])
                mapped = n
        tail = blocks[n:]
        num_freed = len(tail)
        if tail:
            # Reused first, the sequence's last block at the very front. Every such block was
            # popped from the front, so the head has room for them (module notes).
            head = self._head - num_freed
            if head < 0:
                self._queue[0:0] = [0] * -head
                head = 0
            self._queue[head : head + num_freed] = tail[::-1]
            self._head = head
        if n:
            # Evicted last, least recently freed first: a chain's tail before its prefix. The
            # unmapped ones (its own, freed first) are free now; a mapped one once nobody holds it.
            last = blocks[mapped:n]
            last.reverse()
            if mapped:
                ref = self._ref
                for block in reversed(blocks[:mapped]):
                    count = ref[block] - 1
                    ref[block] = count
                    if not count:
                        last.append(block)
            self._queue += last
            num_freed += len(last)
        self.num_used -= num_freed
        blocks.clear()
        seq.num_cached_blocks = 0

    def free_queue(self) -> list[int]:
        """The free blocks, next to be allocated first (for checks: O(N))."""
        stale = self._stale.copy()
        live: list[int] = []
        for block in self._queue[self._head :]:
            if stale[block]:
                stale[block] -= 1
            else:
                live.append(block)
        return live

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block; only possible while no block is held (as vLLM)."""
        if self.num_used:
            return False
        self._cached.clear()
        self._hash = [None] * self.num_blocks
        if self.events is not None:
            self.events.append(AllBlocksCleared())
        return True

    def take_events(self) -> list[KVCacheEvent]:
        """The events recorded since the last call (empty when not recording)."""
        events = self.events
        if not events:
            return []
        self.events = []
        return events

    # -- checks -----------------------------------------------------------------------------

    def check(self) -> None:
        """Cheap conservation check (O(1)), run at the end of every step."""
        assert len(self._queue) - self._head - self._num_stale + self.num_used == self.num_usable_blocks, (
            "KV blocks leaked or double-counted"
        )

    def cached_hashes(self) -> dict[BlockHash, int]:
        """Every cached hash with the number of blocks cached under it (what KV events rebuild)."""
        return {h: 1 if type(v) is int else len(v) for h, v in self._cached.items()}  # type: ignore[arg-type]

    def audit(self, holders: list[Sequence]) -> None:
        """Full check for tests: reference counts, the free queue and the cache map agree exactly."""
        counts = [0] * self.num_blocks
        counts[NULL_BLOCK] = 1
        for seq in holders:
            if len(set(seq.blocks)) != len(seq.blocks):
                raise AssertionError(f"sequence {seq.request_id} holds a block twice")
            if NULL_BLOCK in seq.blocks:
                raise AssertionError("the null block was handed out")
            for b in seq.blocks:
                counts[b] += 1
        # Counted: the mapped blocks (and the null block); an unmapped one has one holder at most.
        expected = [c if b == NULL_BLOCK or self._hash[b] is not None else 0 for b, c in enumerate(counts)]
        if expected != self._ref or any(self._hash[b] is None and c > 1 for b, c in enumerate(counts)):
            raise AssertionError("reference counts disagree with the holders")
        free = self.free_queue()
        if len(set(free)) != len(free) or NULL_BLOCK in free:
            raise AssertionError("the free queue holds a block twice, or the null block")
        if {b for b in range(1, self.num_blocks) if counts[b] == 0} != set(free):
            raise AssertionError("a block is both free and held, or neither")
        held = sum(1 for b in range(1, self.num_blocks) if counts[b])
        if held != self.num_used or held + len(free) != self.num_usable_blocks:
            raise AssertionError(f"{held} held + {len(free)} free != {self.num_usable_blocks} usable blocks")
        mapped: dict[int, BlockHash] = {}
        for h, v in self._cached.items():
            for b in [v] if type(v) is int else v:  # type: ignore[union-attr]
                if b in mapped:
                    raise AssertionError(f"block {b} cached twice")
                mapped[b] = h
        hashed = {b: h for b, h in enumerate(self._hash) if h is not None}
        if mapped != hashed:
            raise AssertionError("the cache map disagrees with the blocks' hashes")
        for seq in holders:
            # What free() relies on: a held block is cached iff it is among the first num_cached_blocks.
            if any(self._hash[b] is not None for b in seq.blocks[seq.num_cached_blocks :]):
                raise AssertionError(f"sequence {seq.request_id} holds a cached block past its cached ones")
        for seq in holders:
            if seq.num_cached_blocks > len(seq.blocks):
                raise AssertionError(f"sequence {seq.request_id} has more cached blocks than blocks")
            shareable = seq.num_shareable_blocks
            for i, b in enumerate(seq.blocks[: seq.num_cached_blocks]):
                own = self._hash[b]
                if shareable is not None and i >= shareable and own is None:
                    continue  # a block only it can hit, not mapped until it is preempted
                if own != seq.block_hashes[i]:
                    raise AssertionError(f"sequence {seq.request_id}: block {i} is cached under another hash")
