"""A prompt as the fleet sees it: its length, and enough of its content to say which prefix it shares.

A prompt is a run of segments, each ``length`` tokens of a named text. The token at offset ``j``
of segment ``key`` is the same in every prompt that holds that segment, so two prompts share
their first k tokens exactly when their segments agree up to there::

    request 7:  | system:0 (1,000)          | user:7 (200) |
    request 9:  | system:0 (1,000)          | user:9 (200) |       shared prefix: 1,000 tokens
    turn 2:     | system:0 | user:c3.0 | answer:c3.0 | user:c3.1 |  extends turn 1's whole prompt

Token ids are only made when asked for (:meth:`Prompt.token_ids`): a trace of a million requests
holds segment names and lengths, not a billion integers. A trace that gives explicit token ids
keeps them in one segment.

The prefix cache of a simulated replica needs an identity per full block, chained like vLLM's
block hashes: equal exactly when the two prompts agree on every token up to the block's end.
:class:`BlockHasher` derives it from the segments instead of hashing token ids::

    block i = hash((block i-1, pieces of the segments inside tokens [16i, 16i + 16)))
    piece   = (segment code, first offset, end offset)   or the block's explicit ids, as one piece
    block i = hash((block i-1, segment code, first offset))   when one synthetic segment fills it
    block i = segment code / 4 + i                            inside a prompt's first synthetic segment

Two prompts agree on their first k tokens exactly when their segments do (the rule
:meth:`Prompt.shared_prefix` states), so the cache finds the same hits as with vLLM's sha256 of
the token ids, at a fraction of the cost: no ids are made and no sha256 is taken.
NOTE: a deliberate difference, for speed (bench/bench_plan.py measures it). Identities are
integers: the blocks of a prompt's first segment (a system prompt, or a whole prompt known only
by its length: most blocks of most workloads) are numbered on from their segment's 62-bit code,
one ``range`` per prompt with no hashing at all (machine-word integers: a range of them is made
in C); the others are 64-bit tuple hashes (Python's hash of integers, the same in every
process). Two different blocks would collide with a probability near 1e-8 in a run of a million
blocks, as with 64-bit digests; two first segments' runs of ``n`` blocks overlap with a
probability near ``2n / 2^62`` per pair (1e-5 in all for a million 32-block prompts).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from llmsim.engine.scheduler.block_hash import BlockHash

#: Synthetic token ids are drawn below this (Llama 3's vocabulary size).
VOCAB_SIZE = 128_256

#: Parent of a prompt's first block (any constant: it only starts the chain).
_ROOT = 0x6C6C6D73696D
#: Marks a piece of explicit ids; a synthetic piece starts with its segment's code (>= 0).
_IDS = -1
#: Memoized prefixes kept per block size before the memo starts over.
_MEMO_SIZE = 4096
#: A first segment's block ``i`` is ``(code >> _CODE_SHIFT) + i``: below 2^63, a machine word.
_CODE_SHIFT = 2


def _numbered(code: int, count: int) -> range:
    """The identities of a first segment's ``count`` whole blocks, from its key's ``code`` (the one
    rule for them: the memoized chain and :class:`NumberedBlocks` must agree)."""
    base = code >> _CODE_SHIFT
    return range(base, base + count)


@dataclass(frozen=True, slots=True)
class Segment:
    """``length`` tokens of the text named ``key`` (or the explicit ``ids``, when a trace gave them)."""

    key: str
    length: int
    ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.length < 0:
            raise ValueError(f"segment '{self.key}': length must be >= 0, got {self.length}")
        if self.ids is not None and len(self.ids) != self.length:
            raise ValueError(f"segment '{self.key}': {len(self.ids)} ids for length {self.length}")

    def token_ids(self) -> list[int]:
        if self.ids is not None:
            return list(self.ids)
        # Seeded from a stable digest of the key (Python's hash() is salted per process): the
        # same key gives the same tokens in every prompt, process and run, and a shorter
        # segment of the same key is a prefix of a longer one.
        seed = int.from_bytes(hashlib.blake2b(self.key.encode(), digest_size=8).digest(), "big")
        rng = random.Random(seed)
        return [rng.randrange(VOCAB_SIZE) for _ in range(self.length)]


@dataclass(frozen=True, slots=True)
class Prompt:
    """The segments of one prompt, in order."""

    segments: tuple[Segment, ...]
    num_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_tokens", sum(s.length for s in self.segments))

    @classmethod
    def unique(cls, key: str, length: int) -> Prompt:
        """A prompt that shares nothing with any other (a request known only by its token count)."""
        return cls((Segment(key, length),))

    def token_ids(self) -> list[int]:
        """The prompt's token ids (deterministic; what a prefix cache keyed by token ids reads)."""
        ids: list[int] = []
        for segment in self.segments:
            ids.extend(segment.token_ids())
        return ids

    def shared_prefix(self, other: Prompt) -> int:
        """How many leading tokens this prompt and ``other`` have in common, from their segments.

        Exact for synthetic segments; for explicit ids it compares the ids. (Two different
        synthetic keys are taken to differ from their first token.)
        """
        shared = 0
        for a, b in zip(self.segments, other.segments, strict=False):
            if a.ids is not None or b.ids is not None:
                ids_a, ids_b = a.token_ids(), b.token_ids()
                common = 0
                for x, y in zip(ids_a, ids_b, strict=False):
                    if x != y:
                        break
                    common += 1
                shared += common
                if common < a.length or common < b.length:
                    return shared
                continue
            if a.key != b.key:
                return shared
            shared += min(a.length, b.length)
            if a.length != b.length:
                return shared
        return shared


def _code(key: str) -> int:
    """A segment key as a 64-bit integer that is the same in every process (str hashes are salted)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


#: A piece of a block: ``(code, start, end)`` of a synthetic segment, or ``(_IDS, ids)``.
_Piece = tuple[Any, ...]
#: Full-block identities of a run of segments (not to be mutated), the pieces of its trailing
#: partial block, their length in tokens, and the last full block's identity.
_Chain = tuple[list[BlockHash], tuple[_Piece, ...], int, int]


class BlockHasher:
    """Full-block identities of prompts for one block size, memoized by segment prefix.

    A conversation's next turn extends the previous prompt and its answer, and requests of a
    shared system prompt start with the same segment: both find their start in the memo and only
    their own segments are hashed.
    """

    __slots__ = ("_codes", "_last", "_memo", "_root", "_salt", "block_size")

    def __init__(self, block_size: int, salt: str = "") -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        # Put before every key, and the root of every chain: identities of another space (a LoRA
        # adapter's blocks, which vLLM keys by the adapter too: they never hit the base model's).
        self._salt = salt
        self._root = _ROOT if not salt else _code(salt)
        self._codes: dict[str, int] = {}
        # Segments -> (block identities, pieces of the partial block, its length, last identity).
        self._memo: dict[tuple[Segment, ...], _Chain] = {}
        # The last prompt asked for: a router asks once per replica for the same prompt.
        self._last: tuple[tuple[Segment, ...], Sequence[BlockHash]] | None = None

    def of(self, segments: tuple[Segment, ...]) -> Sequence[BlockHash]:
        """Identities of the full blocks of ``segments`` (a prompt's, or a prompt's plus its answer's).

        Not to be changed: a list shared with the memo, or a one-segment prompt's NumberedBlocks.
        """
        if len(segments) == 1:
            only = segments[0]
            if only.ids is None:
                # All of it is the first segment: its numbered blocks, what _chain would list (a
                # prompt known only by its length, most of them): no memo lookup, which would hash
                # the segment, no list of integers, and no code until an identity is read.
                return NumberedBlocks(self, only.key, only.length // self.block_size)
        last = self._last
        if last is not None and last[0] is segments:
            return last[1]
        hashes: Sequence[BlockHash] = self._chain(segments)[0]
        self._last = (segments, hashes)
        return hashes

    def _chain(self, segments: tuple[Segment, ...]) -> _Chain:
        memo = self._memo
        known = memo.get(segments)
        if known is not None:
            return known
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        bs = self.block_size
        # The longest memoized prefix; a prompt has a handful of segments.
        k = len(segments) - 1
        while k > 0 and segments[:k] not in memo:
            k -= 1
        if k:
            done, partial, filled, parent = memo[segments[:k]]
            hashes = list(done)
        else:
            hashes, partial, filled, parent = [], (), 0, self._root
        if parent == self._root and not filled:
            # Nothing but empty segments so far. The first segment with tokens, if synthetic: its
            # whole blocks need no chain, they are numbered from its code (no hashing at all).
            while k < len(segments) and not segments[k].length:
                k += 1
            first = segments[k] if k < len(segments) else None
            if first is not None and first.ids is None and first.length >= bs:
                code = self._code(first.key)
                count = first.length // bs
                numbers = _numbered(code, count)
                hashes = list(numbers)
                parent = numbers[-1]
                if count * bs < first.length:
                    partial, filled = ((code, count * bs, first.length),), first.length - count * bs
                k += 1
                if k < len(segments):
                    # What other prompts of this system prompt or conversation start from.
                    memo[segments[:k]] = (list(hashes), partial, filled, parent)
        append = hashes.append
        for i in range(k, len(segments)):
            segment = segments[i]
            ids = segment.ids
            code = self._code(segment.key) if ids is None else _IDS
            length = segment.length
            offset = 0
            if filled and length:
                # Complete the block the previous segments started.
                offset = min(bs - filled, length)
                if ids is None:
                    partial += ((code, 0, offset),)
                elif partial[-1][0] == _IDS:
                    # Ids are content: a block's ids give one piece however segments split them.
                    partial = (*partial[:-1], (_IDS, partial[-1][1] + ids[:offset]))
                else:
                    partial += ((_IDS, ids[:offset]),)
                filled += offset
                if filled == bs:
                    parent = hash((parent, partial))
                    append(parent)
                    partial, filled = (), 0
            # Whole blocks of this segment: one hash each (P / block_size per prompt).
            whole = offset + (length - offset) // bs * bs
            if ids is None:
                # A block inside one synthetic segment (most of them): a flat tuple, the cheapest
                # to build and hash. Its length (3) tells it from a block of pieces (2).
                for o in range(offset, whole, bs):
                    parent = hash((parent, code, o))
                    append(parent)
            else:
                for o in range(offset, whole, bs):
                    parent = hash((parent, ((_IDS, ids[o : o + bs]),)))
                    append(parent)
            if whole < length:
                partial = ((code, whole, length) if ids is None else (_IDS, ids[whole:length]),)
                filled = length - whole
            if i == 0 and len(segments) > 1:
                # The first segment (a system prompt, a conversation's opening) is what others share.
                memo[segments[:1]] = (list(hashes), partial, filled, parent)
        chain: _Chain = (hashes, partial, filled, parent)
        memo[segments] = chain
        return chain

    def _code(self, key: str) -> int:
        code = self._codes.get(key)
        if code is None:
            if len(self._codes) >= _MEMO_SIZE:
                self._codes.clear()
            code = self._codes[key] = _code(self._salt + key)
        return code


class NumberedBlocks(Sequence[int]):
    """The identities of the first ``count`` blocks of a prompt's first segment, ``code / 4 + i``,
    with the segment key's code computed when one is first read.

    A request whose whole text is its own (``FleetWorkload.own_text_starts`` is 0) has its
    identities read only if it is preempted (the pool maps its blocks then, and its next lookup
    reads them) or a prefix-aware router asks about it; most never are, and skip the digest.
    """

    __slots__ = ("_count", "_hasher", "_key", "_numbers")

    def __init__(self, hasher: BlockHasher, key: str, count: int) -> None:
        self._hasher = hasher
        self._key = key
        self._count = count
        self._numbers: range | None = None

    def _range(self) -> range:
        numbers = self._numbers
        if numbers is None:
            numbers = self._numbers = _numbered(self._hasher._code(self._key), self._count)
        return numbers

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...

    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        return self._range()[index]

    def __iter__(self) -> Iterator[int]:
        return iter(self._range())

    def __repr__(self) -> str:
        return f"NumberedBlocks({self._key!r}, {self._count})"
