"""The wire format, decoded with vLLM's own struct declarations; values worked out by hand."""

from __future__ import annotations

import msgpack
import pytest

from llmsim.engine.scheduler.block_hash import hash_blocks, lora_extra_keys
from llmsim.kv_events import encode_batch
from llmsim.types import AllBlocksCleared, BlockRemoved, BlockStored

from . import vllm_structs as v
from .vllm_structs import decode_batch, decode_legacy_batch

# Tokens 1..32 in two blocks of 16: the sha256 chain's low 64 bits, computed independently in
# the research notes (vLLM's sha256 over pickle, seed "vllm-none-hash").
BLOCK0, BLOCK1 = 1403909460543360175, 1643945449041937783


def stored(lora: str | None = None) -> BlockStored:
    keys = lora_extra_keys(lora, "/adapters/" + lora) if lora else None
    hashes = hash_blocks(tuple(range(1, 33)), 16, keys)
    return BlockStored(tuple(hashes), None, tuple(range(1, 33)), 16, lora_id=1 if lora else None, lora_name=lora)


def test_a_batch_in_vllms_current_map_format() -> None:
    event = stored()
    payload = encode_batch([event, BlockRemoved((event.block_hashes[1],)), AllBlocksCleared()], 12.5)
    batch = decode_batch(payload)
    assert (batch.ts, batch.data_parallel_rank) == (12.5, 0)
    s, r, c = batch.events
    assert isinstance(s, v.BlockStored)
    assert isinstance(r, v.BlockRemoved)
    assert isinstance(c, v.AllBlocksCleared)
    assert s.block_hashes == [BLOCK0, BLOCK1]
    assert s.parent_block_hash is None
    assert s.token_ids == list(range(1, 33))
    assert (s.block_size, s.lora_id, s.medium, s.lora_name) == (16, None, "GPU", None)
    assert s.extra_keys == [None, None]
    assert (s.group_idx, s.kv_cache_spec_kind) == (0, "full_attention")
    assert (r.block_hashes, r.medium, r.group_idx) == ([BLOCK1], "GPU", 0)
    # Raw msgpack: a positional batch of maps tagged "type"; required None fields are present.
    raw = msgpack.unpackb(payload)
    assert raw[0] == 12.5
    assert raw[1][0]["type"] == "BlockStored"
    assert "lora_id" in raw[1][0]
    assert raw[1][0]["lora_id"] is None
    assert raw[1][2] == {"type": "AllBlocksCleared"}


def test_a_lora_block_carries_its_adapter() -> None:
    batch = decode_batch(encode_batch([stored("sql")], 1.0))
    (s,) = batch.events
    assert isinstance(s, v.BlockStored)
    assert (s.lora_id, s.lora_name) == (1, "sql")
    # vLLM's to_event_extra_keys: the adapter's name (untagged, no path), one entry per block.
    assert s.extra_keys == [("sql",), ("sql",)]
    assert s.block_hashes[0] != BLOCK0  # the adapter is in the hash


@pytest.mark.parametrize("event", [stored(), stored("sql")])
def test_the_legacy_array_format_decodes_with_vllm_023s_structs(event: BlockStored) -> None:
    payload = encode_batch([event, BlockRemoved((event.block_hashes[0],))], 2.0, event_format="array")
    s, r = decode_legacy_batch(payload).events
    assert isinstance(s, v.LegacyBlockStored)
    assert isinstance(r, v.LegacyBlockRemoved)
    assert s.block_hashes == [h % 2**64 for h in (int.from_bytes(b, "big") for b in event.block_hashes)]
    assert s.token_ids == list(range(1, 33))
    assert (s.block_size, s.medium, s.lora_name) == (16, "GPU", event.lora_name)
    assert r.block_hashes == [s.block_hashes[0]]
    # Positional: llm-d's adapter reads fields[0] as the tag, then the fields in this order.
    raw = msgpack.unpackb(payload)
    assert raw[1][0][:2] == ["BlockStored", s.block_hashes]
    assert raw[1][1] == ["BlockRemoved", [s.block_hashes[0]], "GPU", 0]
