"""Stable draws for per-request choices (variant, synthetic length, filler offset).

Python's ``hash()`` is salted per process; these draws come from BLAKE2b and are the same in every
process, on every machine, across restarts. The digest of one choice is::

    blake2b(b"llmsim/v1\\0" + str(seed) + b"\\0"
            + len(entry_id) (4 bytes, big-endian) + entry_id
            + len(text) (8 bytes, big-endian) + text
            + str(choice_index), digest_size=16)

with strings UTF-8 encoded (lone surrogates passed through), split into two big-endian 64-bit
draws. Length prefixes keep the fields unambiguous whatever the text contains.
"""

from __future__ import annotations

import hashlib

__all__ = ["ChoiceHash"]

_DOMAIN = b"llmsim/v1\x00"


def _utf8(text: str) -> bytes:
    # Request JSON may carry lone surrogates ("\ud800"); they must hash, not raise.
    return text.encode("utf-8", "surrogatepass")


class ChoiceHash:
    """Draws for one (seed, entry, matched text); hashes the text once for all choices."""

    __slots__ = ("_base",)

    def __init__(self, seed: int, entry_id: str, text: str) -> None:
        entry = _utf8(entry_id)
        body = _utf8(text)
        base = hashlib.blake2b(digest_size=16)
        base.update(_DOMAIN + str(seed).encode() + b"\x00")
        base.update(len(entry).to_bytes(4, "big") + entry)
        base.update(len(body).to_bytes(8, "big"))
        base.update(body)
        self._base = base

    def draw(self, choice_index: int) -> tuple[int, int]:
        """Two independent 64-bit draws for choice ``choice_index``."""
        h = self._base.copy()
        h.update(str(choice_index).encode())
        digest = h.digest()
        return int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big")
