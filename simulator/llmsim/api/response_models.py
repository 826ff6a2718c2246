"""Every response body the API sends, as pydantic models: published in /openapi.json and checked in tests.

The bodies themselves are built elsewhere, without these models (completion_bodies.py builds dicts
and byte templates on the hot path); tests and the schemathesis run check that what is sent
validates against them. Field names, order and optionality follow vLLM 0.34's response models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from llmsim.config.schema import FaultState, FaultTimeline


class _Body(BaseModel):
    # What a client may see beyond these fields is not an error (OpenAI adds fields over time).
    model_config = ConfigDict(extra="allow")


class ErrorInfo(_Body):
    message: str
    type: str
    param: str | None = None
    # vLLM: the HTTP status; OpenAI's string code for some errors ("model_not_found").
    code: int | str | None = None


class ErrorResponse(_Body):
    error: ErrorInfo


class PromptTokensDetails(_Body):
    cached_tokens: int = 0


class UsageInfo(_Body):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int | None = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class FunctionCall(_Body):
    name: str
    # JSON text.
    arguments: str


class ToolCall(_Body):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatLogprob(_Body):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatLogprobsContent(ChatLogprob):
    top_logprobs: list[ChatLogprob] = Field(default_factory=list)


class ChatLogprobs(_Body):
    content: list[ChatLogprobsContent] | None = None


class ChatCompletionMessage(_Body):
    role: str
    content: str | None = None
    # Omitted when empty, as vLLM does.
    tool_calls: list[ToolCall] = Field(default_factory=list)


class ChatCompletionChoice(_Body):
    index: int
    message: ChatCompletionMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionResponse(_Body):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatCompletionChoice]
    usage: UsageInfo


class DeltaFunctionCall(_Body):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(_Body):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall | None = None


class DeltaMessage(_Body):
    role: str | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] = Field(default_factory=list)


class ChatCompletionChunkChoice(_Body):
    index: int
    delta: DeltaMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(_Body):
    """One ``data:`` event of a streamed chat completion."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatCompletionChunkChoice]
    usage: UsageInfo | None = None


class CompletionLogprobs(_Body):
    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class CompletionChoice(_Body):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


class CompletionResponse(_Body):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo


class CompletionChunk(_Body):
    """One ``data:`` event of a streamed text completion."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None


class ModelCard(_Body):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    root: str | None = None
    parent: str | None = None
    max_model_len: int | None = None
    permission: list[dict[str, Any]] = Field(default_factory=list)
    # llmsim's own: the engine serving the model (EngineInfo).
    llmsim: dict[str, Any] | None = None


class ModelList(_Body):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeResponse(_Body):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeResponse(_Body):
    prompt: str


class Embedding(_Body):
    index: int
    object: Literal["embedding"] = "embedding"
    # A list of floats, or base64 of little-endian float32 with encoding_format "base64".
    embedding: list[float] | str


class EmbeddingUsage(_Body):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int | None = 0
    completion_tokens_details: Any = None


class EmbeddingResponse(_Body):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[Embedding]
    usage: EmbeddingUsage


class VersionResponse(_Body):
    version: str


class LoadResponse(_Body):
    # Requests in flight (running + waiting) across the server.
    server_load: int


class FaultSettings(RootModel[dict[str, FaultState]]):
    """``/admin/faults``: each served model's fault injection, keyed by model name (a PUT names some of them)."""


class TimelineSettings(RootModel[dict[str, FaultTimeline | None]]):
    """``PUT /admin/timeline``: a new fault timeline per model named (null: none)."""


class TimelineStart(_Body):
    """``POST /admin/timeline/start``: who this replica is, when the command line did not say (both optional)."""

    # Strict: a JSON true is not replica 1.
    ordinal: Annotated[int, Field(strict=True, ge=0)] | None = None
    replicas: Annotated[int, Field(strict=True, ge=1)] | None = None


class SleepResponse(_Body):
    status: Literal["sleeping"] = "sleeping"
    level: int


class WakeUpResponse(_Body):
    status: Literal["awake", "sleeping"]
    # The tags woken, None for all.
    tags: list[str] | None


class IsSleepingResponse(_Body):
    is_sleeping: bool


class RenderedPrompt(_Body):
    """A chat or completions request rendered to token ids (vLLM's render routes): a ``/inference/v1/generate`` body."""

    request_id: str
    # The prompt's token ids, chat template included: the ids the prefix cache hashes.
    token_ids: list[int]
    features: Any = None
    sampling_params: dict[str, Any]
    model: str | None = None
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    cache_salt: str | None = None
    priority: int = 0
    kv_transfer_params: dict[str, Any] | None = None


class RenderedPrompts(RootModel[list[RenderedPrompt]]):
    """``/v1/completions/render``: one rendered request per prompt."""


class GenerateChoice(_Body):
    index: int
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = None


class GenerateResponse(_Body):
    request_id: str
    model: str | None = None
    created: int | None = None
    choices: list[GenerateChoice]
    usage: UsageInfo | None = None
    prompt_logprobs: list[Any] | None = None
    kv_transfer_params: dict[str, Any] | None = None


class GenerateStreamResponse(_Body):
    """One ``data:`` event of a streamed ``/inference/v1/generate``: a choice's new token ids, or the usage."""

    request_id: str
    choices: list[GenerateChoice]
    usage: UsageInfo | None = None


class GetLoadResponse(_Body):
    # vllm-router's power_of_two reads it: requests in flight (running + waiting) across the server.
    load: int


class RankLoad(_Body):
    dp_rank: int
    num_running_reqs: int
    num_waiting_reqs: int
    # Tokens of KV cache the requests hold; absent for an engine without a KV cache.
    num_total_tokens: int | None = None


class AggregateLoad(_Body):
    total_running_reqs: int
    total_waiting_reqs: int
    total_tokens: int | None = None


class LoadsResponse(_Body):
    """SGLang's ``/v1/loads`` (sglang-router's power_of_two reads ``aggregate.total_tokens``)."""

    version: str
    loads: list[RankLoad]
    aggregate: AggregateLoad


class ServerInfo(_Body):
    """SGLang's ``/server_info``: the server arguments a router reads at startup (``dp_size`` above all)."""

    model_path: str
    tokenizer_path: str
    served_model_name: str
    dp_size: int
    tp_size: int
    context_length: int
    disaggregation_mode: str
    is_embedding: bool
    version: str


class ModelInfo(_Body):
    """SGLang's ``/model_info``."""

    model_path: str
    tokenizer_path: str
    is_generation: bool
    preferred_sampling_params: dict[str, Any] | None = None
    weight_version: str
    has_image_understanding: bool
    has_audio_understanding: bool
    model_type: str | None = None
    architectures: list[str] | None = None


class MessagesUsage(_Body):
    input_tokens: int
    output_tokens: int


class MessagesContent(_Body):
    type: str
    text: str | None = None


class MessagesResponse(_Body):
    """Anthropic's message, as vLLM's ``POST /v1/messages`` answers it."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    content: list[MessagesContent]
    model: str
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"] | None = None
    stop_sequence: str | None = None
    usage: MessagesUsage


class MessagesCountTokensResponse(_Body):
    input_tokens: int


class MessagesStreamEvent(_Body):
    """One event of a streamed message (its ``event:`` line names its ``type``)."""

    type: Literal[
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
        "error",
    ]
    message: MessagesResponse | None = None
    delta: dict[str, Any] | None = None
    content_block: MessagesContent | None = None
    index: int | None = None
    error: dict[str, Any] | None = None
    usage: MessagesUsage | None = None


class ResponsesUsage(_Body):
    input_tokens: int
    input_tokens_details: dict[str, Any]
    output_tokens: int
    output_tokens_details: dict[str, Any]
    total_tokens: int


class ResponsesResponse(_Body):
    """OpenAI's response, as vLLM's ``POST /v1/responses`` answers it (the fields clients read)."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    model: str
    status: Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]
    output: list[dict[str, Any]]
    usage: ResponsesUsage | None = None
    previous_response_id: str | None = None


class ResponsesStreamEvent(_Body):
    """One event of a streamed response (its ``event:`` line names its ``type``)."""

    type: str
    sequence_number: int
    response: ResponsesResponse | None = None
    delta: str | None = None
