"""Prefix-cache block hashes, computed as vLLM V1 computes them (``vllm/v1/core/kv_cache_utils.py``).

Every *full* block of a sequence (``block_size`` tokens) is identified by a chained hash::

    h_0 = sha256(pickle((NONE_HASH, (t_0, ..., t_15), extra_keys)))
    h_i = sha256(pickle((h_{i-1},  (t_16i, ..., t_16i+15), extra_keys)))

with ``pickle`` protocol 5 (``pickle.HIGHEST_PROTOCOL`` on Python 3.8+) and
``NONE_HASH = sha256(pickle("vllm-none-hash"))``: vLLM's default algorithm (``sha256``) and
default seed, so equal token ids give equal hashes in every process, on every replica, and
the same hashes vLLM itself computes. ``extra_keys`` is None, or a tuple such as
``(("lora", name, path),)`` for a LoRA adapter (on every block: no sharing across adapters).
KV events carry the low 64 bits of a hash as an unsigned int (vLLM's
``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``, its default): see :func:`to_event_hash`.

NOTE: vLLM lets ``PYTHONHASHSEED`` replace the seed; llmsim always uses the default seed, so
hashes never depend on the environment.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Sequence
from typing import Any

__all__ = [
    "NONE_HASH",
    "BlockHash",
    "ExtraKeys",
    "hash_block_tokens",
    "hash_blocks",
    "lora_extra_keys",
    "to_event_hash",
]

#: ``None`` or a tuple of tagged keys, e.g. ``(("lora", "sql-lora", "/adapters/sql"),)``.
ExtraKeys = tuple[Any, ...] | None

#: A full block's identity in the prefix cache: vLLM's sha256 digest (below), or the fleet
#: planner's integer derived from a prompt's segments (``llmsim.fleet.prompt``). The pool only
#: compares them; KV events, which carry digests, are recorded for digests only.
BlockHash = bytes | int

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_dumps = pickle.dumps
_sha256 = hashlib.sha256
_MASK64 = (1 << 64) - 1


def _sha256_pickle(value: object) -> bytes:
    return _sha256(_dumps(value, protocol=_PROTOCOL)).digest()


#: The parent of a sequence's first block (vLLM's ``NONE_HASH`` with its default seed).
NONE_HASH: bytes = _sha256_pickle("vllm-none-hash")


def hash_block_tokens(parent: bytes | None, token_ids: Sequence[int], extra_keys: ExtraKeys = None) -> bytes:
    """One block's hash from its parent's (None for the first block), its token ids and extra keys."""
    return _sha256(_dumps((parent or NONE_HASH, tuple(token_ids), extra_keys), protocol=_PROTOCOL)).digest()


def hash_blocks(
    token_ids: Sequence[int], block_size: int, extra_keys: ExtraKeys = None, *, parent: bytes | None = None
) -> list[bytes]:
    """Hashes of the full blocks of ``token_ids``, chained on ``parent`` (None: these start the sequence).

    A partial last block is not hashed, as in vLLM. Per request this is the cost of prefix caching:
    one pickle and one sha256 of a small tuple per block (bench/bench_prefix_cache.py measures it).
    """
    out: list[bytes] = []
    prev = parent or NONE_HASH
    dumps = _dumps
    sha = _sha256
    protocol = _PROTOCOL
    ids = token_ids if isinstance(token_ids, tuple) else tuple(token_ids)
    # One iteration per block (P / 16 per prompt): slicing a tuple gives the tuple pickle needs.
    for begin in range(0, len(ids) - block_size + 1, block_size):
        prev = sha(dumps((prev, ids[begin : begin + block_size], extra_keys), protocol=protocol)).digest()
        out.append(prev)
    return out


def lora_extra_keys(name: str, path: str) -> ExtraKeys:
    """vLLM's extra keys for a LoRA request: its name and path, on every block."""
    return (("lora", name, path),)


def to_event_hash(block_hash: bytes) -> int:
    """The hash as KV events carry it: the low 64 bits, big-endian, unsigned."""
    return int.from_bytes(block_hash, "big") & _MASK64
