"""vLLM's KV-event wire format, written down field by field (``vllm/distributed/kv_events.py``, 0.34).

One ZMQ message per engine step with events: three frames ``[topic, seq, payload]``, ``seq`` a
uint64 big-endian counter from 0, ``payload`` msgpack of an ``EventBatch``, a positional array::

    [ts (float, unix seconds), [event, ...], data_parallel_rank (0)]

Each event is a msgpack map tagged by ``"type"`` (vLLM since PR 42892, 2026-06; msgspec structs
with ``tag=True``, ``omit_defaults=True``: required fields are always present, even when None;
fields with a default only when they differ from it)::

    {"type": "BlockStored", "block_hashes": [u64, ...], "parent_block_hash": u64 | None,
     "token_ids": [int, ...], "block_size": 16, "lora_id": int | None, "medium": "GPU",
     "lora_name": str | None, "extra_keys": [None | [lora_name], ...], "group_idx": 0,
     "kv_cache_spec_kind": "full_attention"}
    {"type": "BlockRemoved", "block_hashes": [u64], "medium": "GPU", "group_idx": 0}
    {"type": "AllBlocksCleared"}

- Hashes are the low 64 bits of the 32-byte sha256 block hash, big-endian (vLLM's default
  ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``); values above 2**63 are sent as msgpack uint64.
- ``token_ids`` holds every stored block's tokens in order (``block_size`` per block).
- ``extra_keys`` has one entry per block: None, or the block's untagged extra keys (a LoRA
  block: ``[lora_name]``, vLLM's ``to_event_extra_keys``).
- ``lora_id`` is the adapter's engine id (1, 2, ... in load order), deprecated in vLLM in favour
  of ``lora_name``.

``event_format="array"`` writes the events as vLLM up to 0.23 did (msgspec ``array_like=True``):
``[tag, field, field, ...]`` in declaration order, trailing default-valued fields left out::

    ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
     lora_name, extra_keys, group_idx, kv_cache_spec_kind]
    ["BlockRemoved", block_hashes, medium, group_idx]
    ["AllBlocksCleared"]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import msgpack

from llmsim.types import AllBlocksCleared, BlockRemoved, BlockStored, KVCacheEvent

__all__ = ["MEDIUM", "EventFormat", "encode_batch", "event_hash"]

EventFormat = Literal["map", "array"]
#: Where the blocks live (vLLM's MEDIUM_GPU).
MEDIUM = "GPU"
#: vLLM's kv_cache_spec_kind for a decoder-only model's single full-attention group.
SPEC_KIND = "full_attention"
_MASK64 = (1 << 64) - 1


def event_hash(block_hash: bytes) -> int:
    """A block hash as events carry it: the low 64 bits, big-endian, unsigned."""
    return int.from_bytes(block_hash, "big") & _MASK64


def _stored(e: BlockStored, as_map: bool) -> Any:
    hashes = [event_hash(h) for h in e.block_hashes]
    parent = None if e.parent_block_hash is None else event_hash(e.parent_block_hash)
    extra = [None if e.lora_name is None else [e.lora_name]] * len(hashes)
    if as_map:
        return {
            "type": "BlockStored",
            "block_hashes": hashes,
            "parent_block_hash": parent,
            "token_ids": list(e.token_ids),
            "block_size": e.block_size,
            "lora_id": e.lora_id,
            "medium": MEDIUM,
            "lora_name": e.lora_name,
            "extra_keys": extra,
            "group_idx": 0,
            "kv_cache_spec_kind": SPEC_KIND,
        }
    return [
        "BlockStored",
        hashes,
        parent,
        list(e.token_ids),
        e.block_size,
        e.lora_id,
        MEDIUM,
        e.lora_name,
        extra,
        0,
        SPEC_KIND,
    ]


def _event(e: KVCacheEvent, as_map: bool) -> Any:
    if isinstance(e, BlockStored):
        return _stored(e, as_map)
    if isinstance(e, BlockRemoved):
        hashes = [event_hash(h) for h in e.block_hashes]
        if as_map:
            return {"type": "BlockRemoved", "block_hashes": hashes, "medium": MEDIUM, "group_idx": 0}
        return ["BlockRemoved", hashes, MEDIUM, 0]
    assert isinstance(e, AllBlocksCleared)
    return {"type": "AllBlocksCleared"} if as_map else ["AllBlocksCleared"]


def encode_batch(
    events: Sequence[KVCacheEvent], ts: float, *, event_format: EventFormat = "map", data_parallel_rank: int = 0
) -> bytes:
    """The msgpack payload of one event batch."""
    as_map = event_format == "map"
    payload: bytes = msgpack.packb([ts, [_event(e, as_map) for e in events], data_parallel_rank], use_bin_type=True)
    return payload
