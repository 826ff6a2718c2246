"""Block identities from segments agree with vLLM's block hashes of the token ids, block for block."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from llmsim.engine.scheduler import hash_blocks
from llmsim.fleet import Prompt, Segment
from llmsim.fleet.prompt import BlockHasher

# A few keys at a few lengths: prompts share prefixes often, at every alignment to the blocks.
_SYNTHETIC = st.builds(Segment, st.sampled_from(["system:0", "system:1", "user:0", "answer:0"]), st.integers(0, 40))
_EXPLICIT = st.builds(
    lambda key, ids: Segment(key, len(ids), tuple(ids)),
    st.sampled_from(["ids:0", "ids:1", "ids:2"]),
    st.lists(st.integers(1, 3), max_size=30),
)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([1, 2, 4, 16]),
    st.lists(st.lists(_SYNTHETIC, min_size=1, max_size=4), min_size=2, max_size=5),
    st.lists(st.lists(_EXPLICIT, min_size=1, max_size=4), min_size=2, max_size=5),
)
def test_two_prompts_share_a_block_identity_exactly_when_vllm_s_hashes_agree(
    block_size: int, synthetic: list[list[Segment]], explicit: list[list[Segment]]
) -> None:
    # Synthetic and explicit prompts are compared among themselves: the segment rule assumes
    # synthetic text never equals explicit ids (see BlockHasher).
    for group in (synthetic, explicit):
        hasher = BlockHasher(block_size)
        prompts = [Prompt(tuple(segments)) for segments in group]
        ours = [hasher.of(p.segments) for p in prompts]
        vllm = [hash_blocks(p.token_ids(), block_size) for p in prompts]
        for a in range(len(prompts)):
            assert len(ours[a]) == len(vllm[a]) == prompts[a].num_tokens // block_size
            for b in range(len(prompts)):
                for i in range(min(len(vllm[a]), len(vllm[b]))):
                    assert (ours[a][i] == ours[b][i]) == (vllm[a][i] == vllm[b][i]), (a, b, i)


def test_a_memoized_prefix_gives_the_same_identities_as_a_fresh_hasher() -> None:
    system = Segment("system:0", 37)
    turn1 = (system, Segment("user:0", 20))
    turn2 = (*turn1, Segment("answer:0", 9), Segment("user:1", 30))
    warm = BlockHasher(16)
    warm.of(turn1)
    warm.of((*turn1, Segment("answer:0", 9)))
    assert warm.of(turn2) == BlockHasher(16).of(turn2)
    # A shorter stretch of a key is a prefix of a longer one: 32 of the system prompt's 37 tokens.
    assert list(BlockHasher(16).of((Segment("system:0", 32),))) == warm.of(turn1)[:2]


def test_a_one_segment_prompt_numbers_its_blocks_from_its_key() -> None:
    # The documented rule, worked by hand: block i of a prompt's first segment is its key's 64-bit
    # blake2b digest shifted right by 2, plus i; 40 tokens of 16-token blocks are 2 whole blocks.
    base = int.from_bytes(hashlib.blake2b(b"request:7", digest_size=8).digest(), "big") >> 2
    hasher = BlockHasher(16)
    blocks = hasher.of((Segment("request:7", 40),))
    assert len(blocks) == 2
    assert list(blocks) == [base, base + 1]
    assert (blocks[1], list(blocks[1:])) == (base + 1, [base + 1])
    # The same blocks when the segment is followed by others (the memoized chain's path).
    assert hasher.of((Segment("request:7", 40), Segment("user:1", 0)))[:2] == [base, base + 1]
    assert list(hasher.of((Segment("request:7", 15),))) == []
