"""Synthetic log-probabilities: the same values for the same token at the same position, everywhere.

A script has no distribution to sample from, so the values are made up, with the properties real
ones have: the sampled token is the most likely (as under greedy decoding), probabilities are in
(0, 1], and the sampled token plus its alternatives sum to less than 1. For a token at position
``i`` (0-based, in its sequence), with ``u`` from a stable hash of ``(i, token)`` in [0, 1)::

    p(sampled)   = 0.5 + 0.5 u                  -> logprob in (-0.693, 0]
    p(j-th alt)  = (1 - p(sampled)) / 2**j       (j = 1, 2, ...; strictly decreasing, below p(sampled))

Alternatives are distinct filler words (with a leading space when the token has one), picked by the
same hash. Computed only when a request asks for logprobs.
"""

from __future__ import annotations

import hashlib
import math

from llmsim.llm.filler import WORDS

__all__ = ["TokenLogprobs", "token_logprobs"]

_LN2 = math.log(2.0)
_SPACED = tuple(" " + w for w in WORDS)
_BARE = WORDS

#: The sampled token's logprob and up to ``k`` candidates, the sampled token first.
TokenLogprobs = tuple[float, tuple[tuple[str, float], ...]]


def token_logprobs(token: str, position: int, k: int) -> TokenLogprobs:
    """The logprob of ``token`` at ``position`` and the top ``k`` candidates (``k`` >= 0), best first.

    The first candidate is ``token`` itself (it is the most likely); ``k == 0`` gives none.
    """
    digest = hashlib.blake2b(
        position.to_bytes(8, "big") + token.encode("utf-8", "surrogatepass"), digest_size=16
    ).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    p = 0.5 + 0.5 * u
    sampled = math.log(p)
    if k <= 0:
        return sampled, ()
    rest = math.log1p(-p)
    words = _SPACED if token.startswith(" ") else _BARE
    start = int.from_bytes(digest[8:], "big")
    candidates: list[tuple[str, float]] = [(token, sampled)]
    j = 0
    while len(candidates) < k:
        word = words[(start + j) % len(words)]
        j += 1
        if word == token:
            continue
        candidates.append((word, rest - len(candidates) * _LN2))
    return sampled, tuple(candidates)
