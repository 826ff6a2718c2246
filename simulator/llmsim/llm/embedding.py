"""Deterministic embeddings: the same input gives the same unit vector, and texts that share words point alike.

Feature hashing: each token (casefolded, without its leading space; whitespace skipped) adds
+1 or -1 at :data:`HASHES_PER_TOKEN` coordinates picked by a stable hash of it, and the sum is
scaled to unit length (vLLM normalizes embeddings). Cosine similarity then grows with the words
two inputs share. A request's ``dimensions`` keeps the first coordinates and renormalizes them, as
a Matryoshka model's truncated embedding.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence

__all__ = ["HASHES_PER_TOKEN", "embed"]

HASHES_PER_TOKEN = 8


@functools.lru_cache(maxsize=65536)
def _features(key: str) -> tuple[tuple[int, int], ...]:
    # 8 x (3 bytes of coordinate, 1 byte whose low bit is the sign).
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=4 * HASHES_PER_TOKEN).digest()
    return tuple(
        (int.from_bytes(digest[4 * j : 4 * j + 3], "big"), 1 if digest[4 * j + 3] & 1 else -1)
        for j in range(HASHES_PER_TOKEN)
    )


def embed(tokens: Sequence[str], dimensions: int, keep: int | None = None) -> list[float]:
    """The unit vector of ``tokens`` in ``dimensions`` coordinates, cut to the first ``keep`` when given."""
    vector = [0.0] * dimensions
    for token in tokens:
        key = token.strip().casefold()
        if not key:
            continue
        for coordinate, sign in _features(key):
            vector[coordinate % dimensions] += sign
    if keep is not None:
        vector = vector[:keep]
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        # Nothing to go on (no words): a fixed unit vector rather than zeros, which normalize to NaN.
        return [1.0] + [0.0] * (len(vector) - 1)
    return [x / norm for x in vector]
