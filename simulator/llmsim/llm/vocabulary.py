"""Token ids for the regex tokenizer: a stable map from token text to id, the same in every process.

The regex tokenizer has no vocabulary file, so an id is derived from the token's text::

    id = FIRST_TEXT_ID + blake2b(utf8(text), digest_size=8) mod (2**31 - FIRST_TEXT_ID)

Every replica, every restart and every client that knows this formula gives a text the same id
(so prefix-cache block hashes agree across replicas, and a router can compute them), and ids fit
in a signed 32-bit integer, as real vocabularies' do (some consumers store them as uint32).
Different texts may, rarely, share an id (birthday bound: ~1 % chance of one collision among
the first 6,500 distinct tokens): a simulator accepts that.

Ids below FIRST_TEXT_ID are reserved for the chat template's special tokens
(:data:`SPECIAL_TOKENS`); the template itself is in :mod:`llmsim.llm.prompt`.

Per request the cost is one dict lookup per token (``map`` over a dict subclass whose
``__missing__`` hashes a token seen for the first time); the map is bounded: past
:data:`MAX_ENTRIES` texts it starts over.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["FIRST_TEXT_ID", "MAX_ENTRIES", "SPECIAL_TOKENS", "Vocabulary", "text_id"]

#: Ids of the regex tokenizer's special tokens (a Llama-3-style chat template, see prompt.py).
SPECIAL_TOKENS: dict[str, int] = {
    "<|begin_of_text|>": 1,
    "<|start_header_id|>": 2,
    "<|end_header_id|>": 3,
    "<|eot_id|>": 4,
    # Role names, one token each inside a header.
    "system": 5,
    "developer": 6,
    "user": 7,
    "assistant": 8,
    "tool": 9,
    "function": 10,
}
#: Text tokens get ids from here up (0-255 stay reserved for special tokens).
FIRST_TEXT_ID = 256
_SPAN = 2**31 - FIRST_TEXT_ID
#: Most texts remembered; beyond that the map is cleared (ids never change, only the cache).
MAX_ENTRIES = 1 << 20


def text_id(text: str) -> int:
    """The id of a (non-special) token text."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return FIRST_TEXT_ID + int.from_bytes(digest, "big") % _SPAN


class Vocabulary(dict[str, int]):
    """Token text -> id, filled on first use; ``ids_of`` is the per-request path.

    Also remembers id -> text for the texts it has seen, so ids it handed out decode back
    (``/detokenize``); an id never produced by this process is unknown to it.
    """

    __slots__ = ("_texts",)

    def __init__(self) -> None:
        super().__init__()
        self._texts: dict[int, str] = {}
        self._reset()

    def _reset(self) -> None:
        self.clear()
        self._texts.clear()
        for text, i in SPECIAL_TOKENS.items():
            self._texts[i] = text

    def __missing__(self, text: str) -> int:
        if len(self) >= MAX_ENTRIES:
            self._reset()
        i = self[text] = text_id(text)
        self._texts[i] = text
        return i

    def ids_of(self, tokens: Iterable[str]) -> list[int]:
        """Ids of token texts (as :func:`llmsim.llm.tokenizer.encode` splits them)."""
        # C-level map over dict.__getitem__: __missing__ runs only for texts not seen yet.
        return list(map(self.__getitem__, tokens))

    def text_of(self, token_id: int) -> str | None:
        """The text of an id this vocabulary produced (special tokens included), None if unknown."""
        return self._texts.get(token_id)
