"""Records shared by the generator (what is said) and the engines (when it is sent).

This module imports nothing from llmsim: it is the only thing the two halves share.
Times are seconds on the engine's clock (monotonic, same timebase as ``arrival``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NewType, TypeAlias

RequestId = NewType("RequestId", str)


class FinishReason(enum.StrEnum):
    """Why a sequence ended; the values are OpenAI's and vLLM's ``finished_reason`` labels."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"


class ToolChoice(enum.StrEnum):
    """Whether the model may, or must, answer with tool calls (OpenAI's ``tool_choice``)."""

    NONE = "none"
    AUTO = "auto"
    REQUIRED = "required"
    # One function, named in GenerationRequest.named_tool.
    NAMED = "named"


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message reduced to what the simulator reads: its role and its text."""

    role: str
    content: str


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A validated request, free of HTTP and pydantic, as the generator sees it."""

    model: str
    # Chat messages; a completions prompt arrives as one ``user`` message.
    messages: tuple[Message, ...]
    # Prompt given as token ids (completions): counted as is, matched as empty text.
    prompt_token_ids: tuple[int, ...] | None = None
    # Upper bound on output tokens; None means "up to the context length".
    max_tokens: int | None = None
    # Overrides the responses file's seed for variant choice.
    seed: int | None = None
    stop: tuple[str, ...] = ()
    # vLLM's ignore_eos: emit exactly max_tokens, padding scripted text with filler.
    ignore_eos: bool = False
    # Number of choices; each gets its own plan.
    n: int = 1
    # True for /v1/chat/completions (per-message overhead counts), False for /v1/completions.
    chat: bool = True
    # Names of the functions the request offers as tools.
    tools: tuple[str, ...] = ()
    tool_choice: ToolChoice = ToolChoice.NONE
    # The function a NAMED tool_choice forces.
    named_tool: str | None = None
    # False: at most one tool call per answer.
    parallel_tool_calls: bool = True
    # response_format json_object / json_schema: the answer must be JSON.
    json_output: bool = False
    # LoRA adapter the request names in ``model`` (None: the base model); the API resolves it.
    lora_name: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call of an answer; ``arguments`` is JSON text."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """What one output token adds to the answer's tool calls, as a tool-call parser streams it.

    The token that completes a call's name carries ``name`` (the call's first delta); tokens of
    its arguments carry their piece of the arguments' JSON text.
    """

    index: int
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Pacing:
    """A change to when one request's tokens leave, in plain numbers (the API derives it from faults).

    Token ``i``, due at ``t`` on the engine's own timeline, leaves at
    ``arrival + slowdown * (t - arrival)``, plus ``pause_s`` from token ``pause_at`` on.
    """

    slowdown: float = 1.0
    # Index of the first token held back by the pause.
    pause_at: int = 0
    pause_s: float = 0.0

    def deadline(self, arrival: float, due: float, index: int) -> float:
        paced = arrival + self.slowdown * (due - arrival)
        return paced + self.pause_s if index >= self.pause_at else paced


@dataclass(frozen=True, slots=True)
class RemotePrefill:
    """Where a decode leg's prompt KV waits: a prefill answer's ``kv_transfer_params`` (vLLM's NIXL
    connector), read by the decode replica's engine to pull it."""

    # "" (SGLang's hand-off): whichever engine the replica serves the request id on.
    engine_id: str
    request_id: str
    host: str
    port: int
    block_ids: tuple[int, ...]
    # How long the prefill replica may take to start holding the blocks (SGLang sends both legs
    # at once: the decode leg waits for its room's prefill); 0: held already (vLLM's sequence).
    wait_s: float = 0.0


@dataclass(frozen=True, slots=True)
class KVHandoff:
    """A request's part in disaggregated prefill/decode (vLLM's ``kv_transfer_params``)."""

    # A prefill leg (do_remote_decode): keep its blocks for a decode replica to pull.
    remote_decode: bool = False
    # A decode leg (do_remote_prefill with valid params): pull the prompt's KV from there.
    remote_prefill: RemotePrefill | None = None
    # A prefill leg's blocks are held under this name (None: its request id); SGLang's legs meet
    # by their bootstrap room.
    held_as: str | None = None


@dataclass(frozen=True, slots=True)
class GenerationPlan:
    """What one choice will say: decided up front, released over time by an engine."""

    prompt_tokens: int
    # Output token texts; ``"".join(tokens)`` is the completion text.
    tokens: tuple[str, ...]
    finish_reason: FinishReason
    # Id of the responses.yml entry that matched.
    entry_id: str
    # Index of the chosen variant, None when the entry has a single body.
    variant: int | None = None
    # Position among the request's ``n`` choices.
    choice_index: int = 0
    # The answer's tool calls (the tokens are their text as the model writes it), else ().
    tool_calls: tuple[ToolCall, ...] = ()
    # With tool_calls: per output token, what it adds to them (None: nothing, a wrapper token).
    tool_deltas: tuple[ToolCallDelta | None, ...] = ()
    # None for almost every request: the engine's own timeline, unchanged.
    pacing: Pacing | None = None
    # Token ids of the prompt as the model's tokenizer and chat template give them
    # (``len == prompt_tokens``), and of ``tokens``; None when the generator was not asked for
    # ids. Engines read them as numbers only (prefix-cache block hashes), never as text.
    prompt_token_ids: tuple[int, ...] | None = None
    token_ids: tuple[int, ...] | None = None
    # LoRA adapter to run with (None: the base model).
    lora_name: str | None = None
    # Disaggregated prefill/decode: set by the API from kv_transfer_params (None: a whole request).
    kv_handoff: KVHandoff | None = None

    @property
    def num_output_tokens(self) -> int:
        return len(self.tokens)


@dataclass(slots=True)
class TokenEvent:
    """One token released by an engine; ``sim_time`` is its deadline on the simulated timeline.

    How late the API sends it against that deadline is the token's *lag*, measured where the
    chunk is written (the simulator's own error bar, never part of simulated latency).
    """

    index: int
    text: str
    sim_time: float


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Full blocks newly put in the prefix cache (vLLM's ``BlockStored`` KV event).

    ``token_ids`` holds the blocks' tokens in order (``len == block_size * len(block_hashes)``);
    ``parent_block_hash`` is the hash of the block before the first (None at a sequence start).
    Hashes are the 32-byte sha256 digests (the publisher converts them for the wire).
    """

    block_hashes: tuple[bytes, ...]
    parent_block_hash: bytes | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_id: int | None = None
    lora_name: str | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """A cached block evicted to be reused (vLLM's ``BlockRemoved``: one hash per event)."""

    block_hashes: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The prefix cache was reset (vLLM's ``AllBlocksCleared``)."""


KVCacheEvent: TypeAlias = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(slots=True)
class StepStats:
    """One engine step (scheduler engine) as reported to observers."""

    index: int
    # Simulated start and duration of the step.
    start: float
    duration: float
    # Sequences that got tokens computed in this step.
    batch_size: int
    num_prefill_tokens: int
    num_decode_tokens: int
    num_running: int
    num_waiting: int
    # Blocks held by requests, and the blocks requests can use (vLLM: all but the null block).
    kv_used_blocks: int
    kv_total_blocks: int
    num_preemptions: int
    # How late the step's release was against its deadline (0 in virtual time).
    lag: float = 0.0
    # Prefix cache lookups of requests admitted in this step, in tokens, counted as vLLM 0.34
    # does: once per request at its first admission (queries = prompt tokens, hits = cached
    # tokens); re-admissions after preemption are not counted.
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    # The KV connector's lookups (replicas with kv_transfer only), counted at the same moment:
    # queries = prompt tokens, hits = tokens to pull (vLLM's connector_prefix_cache_stats).
    external_prefix_cache_queries: int = 0
    external_prefix_cache_hits: int = 0
    # KV-cache events of the step (only when the engine records them), in the order they happened.
    kv_events: list[KVCacheEvent] = field(default_factory=list)


@dataclass(slots=True)
class RequestStats:
    """One finished (or aborted) sequence, reported once by the engine that ran it."""

    request_id: RequestId
    prompt_tokens: int
    output_tokens: int
    finish_reason: FinishReason
    arrival: float
    # Simulated time of the first scheduled step (None if never scheduled).
    scheduled: float | None
    # Simulated time of the first token (None if none was released).
    first_token: float | None
    finished: float
    num_preemptions: int = 0
    # Simulated release time of every output token, in order.
    token_times: list[float] = field(default_factory=list)
    # Prompt tokens found in the prefix cache at admission (vLLM's num_cached_tokens).
    num_cached_tokens: int = 0
    # Of those, tokens whose KV was pulled from a prefill replica (vLLM's
    # num_external_computed_tokens; disaggregated prefill/decode's decode leg).
    num_external_tokens: int = 0

    @property
    def queue_time(self) -> float:
        return (self.scheduled if self.scheduled is not None else self.finished) - self.arrival

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrival

    @property
    def e2e(self) -> float:
        return self.finished - self.arrival


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """Live state of an engine, read on demand (e.g. at scrape time)."""

    num_running: int
    num_waiting: int
    # Blocks held by requests, and the blocks requests can use (vLLM: all but the null block);
    # cached blocks nobody holds count as free, as in vLLM's kv_cache_usage_perc.
    kv_used_blocks: int
    kv_total_blocks: int
    # LoRA adapters of the running and of the waiting requests, each name once, in the order
    # the requests were admitted / queued.
    running_lora_adapters: tuple[str, ...] = ()
    waiting_lora_adapters: tuple[str, ...] = ()
