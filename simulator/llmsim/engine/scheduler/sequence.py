"""Per-request state the scheduler moves between its queues (vLLM's ``Request``).

Token layout of one sequence (P prompt tokens, k outputs released so far)::

    | prompt (P)                        | out_1 ... out_k |
    |<------ num_computed_tokens ------>|                 |   KV written so far
    |<---------------- num_tokens = P + k --------------->|

A step computes the next ``num_tokens - num_computed_tokens`` tokens (or a chunk of them); when
it catches up, a new token is sampled and released, so ``num_tokens`` grows by one. The last
released token's KV is only ever written by the following step, so a sequence never holds KV
for more than ``P + max_output_tokens - 1`` tokens.

With token ids (``prompt_token_ids``, and ``output_token_ids`` for the planned outputs) the
sequence's full blocks get chained hashes (:mod:`.block_hash`), extended lazily as tokens are
released: that is what the prefix cache looks up and stores. Without ids a sequence is content
nobody else has: it neither hits nor stores. A caller that knows which content is shared without
the ids (the fleet planner, from its prompts' segments) may instead give ``block_hashes`` for every
block it knows at construction: the cache then sees those blocks and no others (no KV events: a
``BlockStored`` carries token ids).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

from llmsim.engine.scheduler.block_hash import BlockHash, ExtraKeys, hash_blocks
from llmsim.types import FinishReason, RequestId, RequestStats


class SequenceStatus(enum.IntEnum):
    """Ordered so that "finished" is one comparison: ``status >= FINISHED``."""

    WAITING = 0
    PREEMPTED = 1
    # A decode leg of disaggregated prefill/decode: blocks allocated, its prompt's KV on the way
    # from the prefill replica (vLLM's WAITING_FOR_REMOTE_KVS); counted as waiting.
    WAITING_FOR_REMOTE_KVS = 2
    RUNNING = 3
    FINISHED = 4
    ABORTED = 5
    # Refused at arrival (the waiting queue was full): never scheduled, never reported.
    REJECTED = 6


@dataclass(slots=True, eq=False, init=False)
class Sequence:
    """One request's scheduling state; compared by identity (request ids may repeat across choices).

    The fields below document the state; ``__init__`` is written out (same parameters as the
    dataclass's would be): compiled with mypyc, a generated one runs interpreted, ~10,000
    instructions a sequence against a few hundred.
    """

    request_id: RequestId
    # Stamp on the engine's timeline; a step decided at or after it plus the request overhead
    # (scheduler.ready_time) may schedule the sequence. TTFT and queue time count from it.
    arrival: float
    # As reported in stats (may be 0); scheduling uses num_prompt_tokens.
    prompt_tokens: int
    # Planned output length: used only to stop the sequence, like an end-of-sequence token.
    max_output_tokens: int
    # Reason reported when all planned tokens are out.
    finish_reason: FinishReason = FinishReason.STOP
    # Prompt length as scheduled: at least one token (vLLM always has one, e.g. BOS).
    num_prompt_tokens: int = field(init=False, default=0)
    # Tokens whose KV has been (or is being, in the step in flight) computed.
    num_computed_tokens: int = 0
    # Output tokens released so far.
    num_output_tokens: int = 0
    # KV block ids held, in token order.
    blocks: list[int] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    num_preemptions: int = 0
    # Simulated times: start of the first step that scheduled it, first release, end (or abort).
    scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    # Release time of every output token, in order.
    token_times: list[float] = field(default_factory=list)
    # Token ids of the prompt (len == prompt_tokens) and of the planned outputs; None: unknown.
    prompt_token_ids: tuple[int, ...] | None = None
    output_token_ids: tuple[int, ...] | None = None
    # LoRA adapter the sequence runs with (None: the base model), its engine id (vLLM's
    # lora_int_id, 1, 2, ...; 0 for none) and the hash extra keys it puts on every block.
    lora_name: str | None = None
    lora_id: int = 0
    extra_keys: ExtraKeys = None
    # Hashes of the full blocks computed so far (see ensure_block_hashes): a list the sequence
    # extends when it has token ids, else any sequence given at construction, never changed (a
    # fleet's ``range`` of numbered blocks, or a list it shares with other sequences).
    block_hashes: Seq[BlockHash] = field(default_factory=list)
    # Leading blocks of ``blocks`` that are in the prefix cache (hit or stored by this sequence).
    num_cached_blocks: int = 0
    # Leading blocks whose identities another request may hold too (None: all of them). The
    # fleet planner knows the whole workload, so it knows which blocks no one else will ever look
    # up; the pool keeps those out of its map until the sequence is preempted (only it could hit
    # them, and only when it comes back), which changes no result (see KVCache.cache_blocks).
    num_shareable_blocks: int | None = None
    # Prompt tokens found in the prefix cache at first admission (vLLM's num_cached_tokens).
    num_cached_tokens: int = 0
    # Whether the prefix cache can see this sequence: its prompt token ids are known, or its
    # block hashes were given at construction (a field, not a property: read once per step).
    hashable: bool = field(init=False, default=False)
    # Disaggregated prefill/decode (vLLM's kv_transfer_params; see the package docstring).
    # A prefill leg (do_remote_decode): finished with reason ``length``, its blocks stay held for
    # a decode replica to pull (Scheduler.held) instead of returning to the pool.
    remote_decode: bool = False
    # A decode leg (do_remote_prefill): its prompt's KV is pulled, not computed; cleared once the
    # pull is done or given up (one pull per request, as vLLM).
    remote_prefill: bool = False
    # Prompt tokens pulled from the prefill replica (vLLM's num_external_computed_tokens).
    num_external_tokens: int = 0
    # Decode leg: when the pull's last byte has arrived, on the scheduler's clock (inf: not started).
    kv_ready_time: float = math.inf
    # Decode leg: whether the prefill replica confirmed it holds the blocks. A virtual-time caller
    # leaves it True; the live driver sets it False until its side channel answers.
    kv_pull_confirmed: bool = True
    # Pipeline parallelism (Scheduler with pipeline_parallel_size > 1; vLLM's batch queue): batches
    # in flight whose end samples a token of this sequence, how many of them count as vLLM's
    # output placeholders (async scheduling: tokens scheduled past the known ones), how many are
    # stale (scheduled before a preemption: vLLM still delivers their tokens), and the first step
    # index at which the sequence may decode again (vLLM's next_decode_eligible_step).
    num_in_flight: int = 0
    num_placeholders: int = 0
    num_stale: int = 0
    decode_eligible_step: int = 0

    def __init__(
        self,
        request_id: RequestId,
        arrival: float,
        prompt_tokens: int,
        max_output_tokens: int,
        finish_reason: FinishReason = FinishReason.STOP,
        num_computed_tokens: int = 0,
        num_output_tokens: int = 0,
        blocks: list[int] | None = None,
        status: SequenceStatus = SequenceStatus.WAITING,
        num_preemptions: int = 0,
        scheduled_time: float | None = None,
        first_token_time: float | None = None,
        finished_time: float | None = None,
        token_times: list[float] | None = None,
        prompt_token_ids: tuple[int, ...] | None = None,
        output_token_ids: tuple[int, ...] | None = None,
        lora_name: str | None = None,
        lora_id: int = 0,
        extra_keys: ExtraKeys = None,
        block_hashes: Seq[BlockHash] | None = None,
        num_cached_blocks: int = 0,
        num_shareable_blocks: int | None = None,
        num_cached_tokens: int = 0,
        remote_decode: bool = False,
        remote_prefill: bool = False,
    ) -> None:
        if prompt_tokens < 0 or max_output_tokens < 0:
            raise ValueError("prompt_tokens and max_output_tokens must be >= 0")
        self.request_id = request_id
        self.arrival = arrival
        self.prompt_tokens = prompt_tokens
        self.max_output_tokens = max_output_tokens
        self.finish_reason = finish_reason
        self.num_prompt_tokens = num_prompt = max(1, prompt_tokens)
        self.num_computed_tokens = num_computed_tokens
        self.num_output_tokens = num_output_tokens
        self.blocks = [] if blocks is None else blocks
        self.status = status
        self.num_preemptions = num_preemptions
        self.scheduled_time = scheduled_time
        self.first_token_time = first_token_time
        self.finished_time = finished_time
        self.token_times = [] if token_times is None else token_times
        if prompt_token_ids is not None and len(prompt_token_ids) != num_prompt:
            # An empty prompt still schedules one token (BOS) whose id is unknown: nothing to hash.
            prompt_token_ids = None
        self.prompt_token_ids = prompt_token_ids
        self.output_token_ids = output_token_ids
        self.lora_name = lora_name
        self.lora_id = lora_id
        self.extra_keys = extra_keys
        hashes: Seq[BlockHash] = [] if block_hashes is None else block_hashes
        self.block_hashes = hashes
        self.num_cached_blocks = num_cached_blocks
        self.num_shareable_blocks = num_shareable_blocks
        self.num_cached_tokens = num_cached_tokens
        self.hashable = prompt_token_ids is not None or bool(hashes)
        self.remote_decode = remote_decode
        self.remote_prefill = remote_prefill
        self.num_external_tokens = 0
        self.kv_ready_time = math.inf
        self.kv_pull_confirmed = True
        self.num_in_flight = 0
        self.num_placeholders = 0
        self.num_stale = 0
        self.decode_eligible_step = 0

    def ensure_block_hashes(self, num_tokens: int, block_size: int) -> Seq[BlockHash]:
        """Hashes of the full blocks among the first ``num_tokens`` tokens whose ids are known.

        Computed once per block over the sequence's life: the prompt's when first asked (at
        submission, or at the first lookup), an output block when its last token is released.
        """
        hashes = self.block_hashes
        prompt = self.prompt_token_ids
        if prompt is None:
            return hashes
        outputs = self.output_token_ids
        known = len(prompt) + (len(outputs) if outputs is not None else 0)
        num_full = min(num_tokens, known) // block_size
        done = len(hashes)
        if num_full > done:
            ids = self.token_ids_between(done * block_size, num_full * block_size)
            parent = hashes[-1] if hashes else None
            assert not isinstance(parent, int), "a sequence with token ids chains sha256 digests"
            grown = hashes if isinstance(hashes, list) else list(hashes)
            grown.extend(hash_blocks(ids, block_size, self.extra_keys, parent=parent))
            self.block_hashes = hashes = grown
        return hashes

    def token_ids_between(self, start: int, end: int) -> tuple[int, ...]:
        """Ids of tokens ``start`` to ``end`` (prompt then outputs); only for tokens whose ids are known."""
        prompt = self.prompt_token_ids
        assert prompt is not None
        p = len(prompt)
        if end <= p:
            return prompt[start:end]
        outputs = self.output_token_ids
        assert outputs is not None
        return prompt[start:] + outputs[: end - p] if start < p else outputs[start - p : end - p]

    @property
    def num_tokens(self) -> int:
        """Prompt plus released outputs: what a (re)computation must cover before the next token."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def is_finished(self) -> bool:
        return self.status >= SequenceStatus.FINISHED

    def limit_to_context(self, context_length: int) -> None:
        """Stop at the context length (vLLM's max_model_len check) with finish reason ``length``."""
        if self.num_prompt_tokens > context_length:
            raise ValueError(
                f"prompt of {self.num_prompt_tokens} tokens exceeds the context length of {context_length}"
            )
        room = context_length - self.num_prompt_tokens
        if self.max_output_tokens > room:
            self.max_output_tokens = room
            self.finish_reason = FinishReason.LENGTH

    def to_stats(self) -> RequestStats:
        """The engine-neutral record observers receive once the sequence has ended."""
        assert self.finished_time is not None, "only a finished or aborted sequence has stats"
        return RequestStats(
            request_id=self.request_id,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.num_output_tokens,
            finish_reason=FinishReason.ABORT if self.status >= SequenceStatus.ABORTED else self.finish_reason,
            arrival=self.arrival,
            scheduled=self.scheduled_time,
            first_token=self.first_token_time,
            finished=self.finished_time,
            num_preemptions=self.num_preemptions,
            token_times=self.token_times,
            num_cached_tokens=self.num_cached_tokens,
            num_external_tokens=self.num_external_tokens,
        )
