"""Request bodies of every POST route, parsed once and converted at once to the generator's records.

Validation follows vLLM 0.34 (``vllm/entrypoints/openai/*/protocol.py`` and ``SamplingParams``),
in two kinds, each answered 400 as vLLM answers it:

- field types and bounds (pydantic): ``temperature: "hot"``, ``seed`` outside int64, a negative
  token id... -> vLLM's "N validation error(s)" body (:func:`llmsim.api.errors.from_validation_error`);
- vLLM's own checks, which raise :class:`RequestInvalid` (vLLM's ``VLLMValidationError``): from the
  ``mode="before"`` validators below while parsing (tool_choice, logprobs, stream_options,
  response_format, an empty prompt), and from ``check()`` after the model is known (sampling
  ranges, ``max_tokens``, the logprobs limit, empty and out-of-vocabulary prompts).

Accepted and ignored, as their effect is on sampling, which a script does not do: the values of
temperature, top_p, top_k, min_p, the penalties, logit_bias, min_tokens, user, suffix, and any
unknown field (OpenAI's own clients send new fields before servers know them; the P/D and DP
routers add theirs: ``no_stop_trim``, ``bootstrap_room``...). As vLLM, the routes log the unknown
fields' names. ``kv_transfer_params`` and sglang-router's ``bootstrap_*`` fields drive the P/D
hand-off on a model with a ``kv_transfer`` section; SGLang's ``data_parallel_rank`` is acted on
(:mod:`llmsim.api.data_parallel`) and not logged.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from llmsim.api.errors import echoed
from llmsim.types import GenerationRequest, Message, ToolChoice

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: vLLM's ``--max-logprobs`` default: top_logprobs (chat) and logprobs (completions) above it are refused.
MAX_LOGPROBS = 20
#: Choices per request. NOTE: vLLM's default cap (VLLM_MAX_N_SEQUENCES) is 16384; a simulator
#: process keeps n choices' state per request, so it keeps a lower one.
MAX_N = 128

Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
#: A token id is a JSON integer: ``true`` is refused, where pydantic's lax mode (and so vLLM) would
#: read it as token 1.
TokenId = Annotated[int, Field(ge=0, strict=True)]


class RequestInvalid(Exception):
    """A request vLLM refuses with 400 ``BadRequestError`` (its ``VLLMValidationError``).

    ``str()`` appends `` (parameter=..., value=...)`` as vLLM's does. NOTE: not a ValueError, so
    pydantic lets it out of a validator unchanged (as vLLM 0.34's is not one either).
    """

    def __init__(self, message: str, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        extras = []
        if self.parameter is not None:
            extras.append(f"parameter={self.parameter}")
        if self.value is not None:
            extras.append(f"value={echoed(str(self.value))}")
        return f"{self.message} ({', '.join(extras)})" if extras else self.message


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Lenient):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class TextPart(_Lenient):
    type: str
    text: str | None = None


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    # NOTE: a message without content is accepted, as vLLM accepts it (rendered as empty text).
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = []
        for part in self.content:
            if part.type not in ("text", "input_text"):
                raise ValueError(f"content part type '{part.type}' is not supported by a text-only model")
            parts.append(part.text or "")
        return "".join(parts)


class FunctionDefinition(_Lenient):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolParam(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    function: NamedFunction
    type: Literal["function"] = "function"


class JsonSchemaFormat(_Lenient):
    name: str
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


def _check_response_format(data: dict[str, Any]) -> None:
    rf = data.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema" and rf.get("json_schema") is None:
        raise RequestInvalid(
            "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
            parameter="response_format",
        )


def _check_stream_options(data: dict[str, Any]) -> None:
    if data.get("stream_options") and not data.get("stream"):
        raise RequestInvalid("Stream options can only be defined when `stream=True`.", parameter="stream_options")


def _check_integer(data: dict[str, Any], name: str) -> Any:
    # A before-validator sees raw JSON: a string here would fail the comparisons below (vLLM's words).
    value = data.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise RequestInvalid(f"`{name}` must be an integer.", parameter=name, value=value)
    return value


def _float_range(name: str, value: float | None, low: float, high: float) -> None:
    # vLLM raises these as plain ValueErrors: 400 with no parameter.
    if value is not None and not low <= value <= high:
        raise RequestInvalid(f"{name} must be in [{low:g}, {high:g}], got {value}.")


class _Common(_Lenient):
    model: str
    max_tokens: int | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: Int64 | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    min_tokens: int = 0
    user: str | None = None
    response_format: ResponseFormat | None = None
    # vLLM extension: generate exactly max_tokens.
    ignore_eos: bool = False
    # vLLM's P/D hand-off (the NIXL connector's parameters): acted on for a model with a
    # kv_transfer section (api/kv_transfer.py, docs/pd.md), ignored otherwise.
    kv_transfer_params: dict[str, Any] | None = None

    def stop_tuple(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def continuous_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.continuous_usage_stats

    @property
    def json_output(self) -> bool:
        return self.response_format is not None and self.response_format.type != "text"

    @property
    def num_logprobs(self) -> int | None:
        """Top alternatives per token when logprobs are asked for, else None."""
        raise NotImplementedError

    def effective_max_tokens(self) -> int | None:
        return self.max_tokens

    def check(self, *, vocab_size: int) -> None:
        """vLLM's checks that follow parsing (SamplingParams and the prompt). Raises :class:`RequestInvalid`."""
        # In SamplingParams._verify_args' order.
        if self.n < 1:
            raise RequestInvalid(f"n must be at least 1, got {self.n}.")
        if self.n > MAX_N:
            raise RequestInvalid(f"n must be at most {MAX_N}, got {self.n}.")
        _float_range("presence_penalty", self.presence_penalty, -2.0, 2.0)
        _float_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        rp = self.repetition_penalty
        if rp is not None and not math.isfinite(rp):
            raise RequestInvalid(f"repetition_penalty must be a finite number, got {rp}.")
        if rp is not None and rp <= 0.0:
            raise RequestInvalid(f"repetition_penalty must be greater than zero, got {rp}.")
        t = self.temperature
        if t is not None:
            if not math.isfinite(t):
                raise RequestInvalid(f"temperature must be a finite number, got {t}.", "temperature", t)
            if t < 0.0:
                raise RequestInvalid(f"temperature must be non-negative, got {t}.", "temperature", t)
            if t > 2.0:
                raise RequestInvalid(f"temperature must be in [0, 2], got {t}.", "temperature", t)
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise RequestInvalid(f"top_p must be in (0, 1], got {self.top_p}.", "top_p", self.top_p)
        if self.top_k is not None and self.top_k < -1:
            raise RequestInvalid(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")
        _float_range("min_p", self.min_p, 0.0, 1.0)
        max_tokens = self.effective_max_tokens()
        if max_tokens is not None and max_tokens < 1 and not self._prompt_only():
            raise RequestInvalid(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens)
        if self.min_tokens < 0:
            raise RequestInvalid(f"min_tokens must be greater than or equal to 0, got {self.min_tokens}.")
        if max_tokens is not None and self.min_tokens > max_tokens:
            raise RequestInvalid(
                f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {self.min_tokens}."
            )
        if any(not s for s in self.stop_tuple()):
            raise RequestInvalid("stop cannot contain an empty string.")
        k = self.num_logprobs
        if k is not None:
            requested = vocab_size if k == -1 else k
            if requested > MAX_LOGPROBS:
                raise RequestInvalid(
                    f"Requested sample logprobs of {requested}, which is greater than max allowed: {MAX_LOGPROBS}",
                    "logprobs",
                    requested,
                )

    def _prompt_only(self) -> bool:
        return False


class ChatCompletionRequest(_Common):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: int | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0
    tools: list[ToolParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = "none"
    parallel_tool_calls: bool | None = True

    @model_validator(mode="before")
    @classmethod
    def _vllm_checks(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        _check_response_format(data)
        _check_stream_options(data)
        _check_logprobs(data)
        _check_tool_usage(data)
        return data

    @property
    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def named_tool(self) -> str | None:
        return self.tool_choice.function.name if isinstance(self.tool_choice, NamedToolChoice) else None

    def effective_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def to_generation_request(self) -> GenerationRequest:
        choice = self.tool_choice
        offered = tuple(t.function.name for t in self.tools or ())
        if isinstance(choice, NamedToolChoice):
            tool_choice = ToolChoice.NAMED
        elif choice in ("auto", "required") and offered:
            tool_choice = ToolChoice(choice)
        else:
            tool_choice = ToolChoice.NONE
        return GenerationRequest(
            model=self.model,
            messages=tuple(Message(m.role, m.text()) for m in self.messages),
            max_tokens=self.effective_max_tokens(),
            seed=self.seed,
            stop=self.stop_tuple(),
            ignore_eos=self.ignore_eos,
            n=self.n,
            chat=True,
            tools=offered,
            tool_choice=tool_choice,
            named_tool=self.named_tool,
            parallel_tool_calls=self.parallel_tool_calls is not False,
            json_output=self.json_output,
        )


def _check_logprobs(data: dict[str, Any]) -> None:
    """Chat: ``top_logprobs`` is an integer >= 0 (or -1) and needs ``logprobs: true``."""
    top = _check_integer(data, "top_logprobs")
    if top is None:
        return
    if top < 0 and top != -1:
        raise RequestInvalid("`top_logprobs` must be a positive value or -1.", parameter="top_logprobs", value=top)
    if (top == -1 or top > 0) and not data.get("logprobs"):
        raise RequestInvalid("when using `top_logprobs`, `logprobs` must be set to true.", parameter="top_logprobs")


_CORRECT_USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'


def _check_tool_usage(data: dict[str, Any]) -> None:
    """vLLM's ``check_tool_usage``: tool_choice needs tools, and a named tool must be one of them."""
    tools = data.get("tools")
    if tools == [] and data.get("tool_choice") in ("auto", "required"):
        data["tool_choice"] = "none"
    if "tool_choice" not in data and tools:
        data["tool_choice"] = "auto"
    choice = data.get("tool_choice")
    if choice is None or choice == "none":
        return
    if tools is None:
        raise RequestInvalid("When using `tool_choice`, `tools` must be set.", parameter="tool_choice")
    if choice not in ("auto", "required") and not isinstance(choice, dict):
        raise RequestInvalid(
            f'Invalid value for `tool_choice`: {choice}! Only named tools, "none", "auto" or "required" are supported.',
            parameter="tool_choice",
        )
    if not isinstance(choice, dict):
        return
    function = choice.get("function")
    if not isinstance(function, dict):
        raise RequestInvalid(
            f"Invalid value for `function`: `{function}` in `tool_choice`! {_CORRECT_USAGE}",
            parameter="tool_choice.function",
        )
    if "name" not in function:
        raise RequestInvalid(
            f"Expected field `name` in `function` in `tool_choice`! {_CORRECT_USAGE}",
            parameter="tool_choice.function.name",
        )
    name = function["name"]
    if not isinstance(name, str) or not name:
        raise RequestInvalid(
            f"Invalid `name` in `function`: `{echoed(str(name))}` in `tool_choice`! {_CORRECT_USAGE}",
            parameter="tool_choice.function.name",
        )
    # Malformed tools are left to the field validation that follows (vLLM would fail with a 500 here).
    names = [
        t["function"].get("name") for t in tools or () if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    if name not in names:
        raise RequestInvalid(
            f"The tool `{echoed(name)}` specified in `tool_choice` does not match any of the specified `tools`",
            parameter="tool_choice",
        )


# In vLLM's order: pydantic reports a bad prompt's errors branch by branch, the first one as `param`.
PromptType = list[TokenId] | list[list[TokenId]] | str | list[str]


class CompletionRequest(_Common):
    prompt: PromptType | None = None
    # OpenAI's completions default is 16 tokens (vLLM follows it).
    max_tokens: int | None = 16
    logprobs: int | None = None
    echo: bool | None = False
    suffix: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _vllm_checks(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("max_tokens") is None:
            # vLLM: an explicit null means the default.
            data["max_tokens"] = 16
        _check_response_format(data)
        logprobs = _check_integer(data, "logprobs")
        if logprobs is not None and logprobs < 0 and logprobs != -1:
            raise RequestInvalid("`logprobs` must be a positive value or -1.", parameter="logprobs", value=logprobs)
        _check_stream_options(data)
        prompt = data.get("prompt")
        if prompt is None or prompt == "":
            raise RequestInvalid("Either prompt or prompt_embeds must be provided and non-empty.", parameter="prompt")
        return data

    @property
    def num_logprobs(self) -> int | None:
        return self.logprobs

    def _prompt_only(self) -> bool:
        # echo with max_tokens 0 returns the prompt alone (vLLM's "echo without generation").
        return bool(self.echo) and self.max_tokens == 0

    def check(self, *, vocab_size: int) -> None:
        super().check(vocab_size=vocab_size)
        for ids in self.token_prompts():
            if not ids:
                raise RequestInvalid("The decoder prompt cannot be empty")
            top = max(ids)
            if top >= vocab_size:
                raise RequestInvalid(f"Token id {top} is out of vocabulary")

    def token_prompts(self) -> list[list[int]]:
        """The prompts given as token ids (none for text prompts; ``[]`` is one empty prompt)."""
        prompt = self.prompt
        if not isinstance(prompt, list):
            return []
        if all(isinstance(p, int) for p in prompt):
            return [[p for p in prompt if isinstance(p, int)]]
        return [p for p in prompt if isinstance(p, list)]

    def to_generation_requests(self) -> list[GenerationRequest]:
        """One request per prompt in a batch (a list of strings or of token-id lists)."""
        common: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "stop": self.stop_tuple(),
            "ignore_eos": self.ignore_eos,
            "n": self.n,
            "chat": False,
            "json_output": self.json_output,
        }
        prompt = self.prompt
        assert prompt is not None  # refused while parsing
        if isinstance(prompt, str):
            return [GenerationRequest(messages=(Message("user", prompt),), **common)]
        if all(isinstance(p, int) for p in prompt):
            ids = tuple(p for p in prompt if isinstance(p, int))
            return [GenerationRequest(messages=(), prompt_token_ids=ids, **common)]
        out = []
        for p in prompt:
            if isinstance(p, str):
                out.append(GenerationRequest(messages=(Message("user", p),), **common))
            elif isinstance(p, list):
                out.append(GenerationRequest(messages=(), prompt_token_ids=tuple(p), **common))
        return out


class TokenizeCompletionRequest(_Lenient):
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChatRequest(_Lenient):
    model: str | None = None
    messages: list[ChatMessage]
    add_generation_prompt: bool = True
    return_token_strs: bool | None = False
    continue_final_message: bool = False
    add_special_tokens: bool = False

    @model_validator(mode="before")
    @classmethod
    def _vllm_checks(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("continue_final_message") and data.get("add_generation_prompt", True):
            raise RequestInvalid("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        return data


class DetokenizeRequest(_Lenient):
    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0, le=INT64_MAX, strict=True)]]


EmbeddingInput = list[TokenId] | list[list[TokenId]] | str | list[str]


class EmbeddingRequest(_Lenient):
    model: str | None = None
    input: EmbeddingInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None
    add_special_tokens: bool = True

    def texts_and_ids(self) -> list[str | list[int]]:
        """Each input as text or token ids, in order."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if value and all(isinstance(v, int) for v in value):
            return [[v for v in value if isinstance(v, int)]]
        return [v for v in value if isinstance(v, str | list)]


class SamplingParamsBody(_Lenient):
    """vLLM's ``SamplingParams`` in a token-in request (``/inference/v1/generate``): the fields llmsim acts on.

    ``max_tokens`` unset: up to the context length, as vLLM's route fills it in. The sampling
    values themselves are accepted and ignored (a script does not sample).
    """

    n: int = 1
    max_tokens: int | None = None
    min_tokens: int = 0
    seed: Int64 | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logprobs: int | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True

    def stop_tuple(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def check(self) -> None:
        """SamplingParams' own checks on the fields llmsim acts on. Raises :class:`RequestInvalid`."""
        if not 1 <= self.n <= MAX_N:
            raise RequestInvalid(f"n must be in [1, {MAX_N}], got {self.n}.", "sampling_params.n", self.n)
        if self.max_tokens is not None and self.max_tokens < 1:
            raise RequestInvalid(
                f"max_tokens must be at least 1, got {self.max_tokens}.", "sampling_params.max_tokens", self.max_tokens
            )
        if self.min_tokens < 0:
            raise RequestInvalid(f"min_tokens must be greater than or equal to 0, got {self.min_tokens}.")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise RequestInvalid(
                f"min_tokens must be less than or equal to max_tokens={self.max_tokens}, got {self.min_tokens}."
            )
        if any(not s for s in self.stop_tuple()):
            raise RequestInvalid("stop cannot contain an empty string.")


class GenerateRequest(_Lenient):
    """vLLM's token-in/token-out request (``POST /inference/v1/generate``); what the render routes answer."""

    request_id: str | None = None
    token_ids: list[TokenId]
    features: Any = None
    sampling_params: SamplingParamsBody
    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    cache_salt: str | None = None
    priority: int = 0
    kv_transfer_params: dict[str, Any] | None = None

    def check(self, *, vocab_size: int) -> None:
        """The prompt and the sampling parameters. Raises :class:`RequestInvalid`."""
        if not self.token_ids:
            raise RequestInvalid("The decoder prompt cannot be empty")
        top = max(self.token_ids)
        if top >= vocab_size:
            raise RequestInvalid(f"Token id {top} is out of vocabulary")
        self.sampling_params.check()

    def to_generation_request(self, model: str) -> GenerationRequest:
        params = self.sampling_params
        return GenerationRequest(
            model=model,
            messages=(),
            prompt_token_ids=tuple(self.token_ids),
            max_tokens=params.max_tokens,
            seed=params.seed,
            stop=params.stop_tuple(),
            ignore_eos=params.ignore_eos,
            n=params.n,
            chat=False,
        )
