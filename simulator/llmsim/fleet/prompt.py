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
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

#: Synthetic token ids are drawn below this (Llama 3's vocabulary size).
VOCAB_SIZE = 128_256


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
