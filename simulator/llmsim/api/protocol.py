"""Request bodies of the OpenAI endpoints, parsed once and converted at once to GenerationRequest.

Accepted and ignored (they change sampling, which the simulator does not do): temperature, top_p,
top_k, min_p, frequency_penalty, presence_penalty, repetition_penalty, logit_bias, logprobs,
top_logprobs, user, tools, tool_choice, response_format, parallel_tool_calls, best_of, echo,
suffix, min_tokens, skip_special_tokens, and any other unknown field (as OpenAI's own clients send
new fields before servers know them).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmsim.types import GenerationRequest, Message


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


class _Common(_Lenient):
    model: str
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    n: Annotated[int, Field(ge=1, le=128)] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    # vLLM extension: generate exactly max_tokens.
    ignore_eos: bool = False

    def stop_tuple(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(s for s in self.stop if s)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def continuous_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.continuous_usage_stats


class ChatCompletionRequest(_Common):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None

    def to_generation_request(self) -> GenerationRequest:
        return GenerationRequest(
            model=self.model,
            messages=tuple(Message(m.role, m.text()) for m in self.messages),
            max_tokens=self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens,
            seed=self.seed,
            stop=self.stop_tuple(),
            ignore_eos=self.ignore_eos,
            n=self.n,
            chat=True,
        )


PromptType = str | list[str] | list[int] | list[list[int]]


class CompletionRequest(_Common):
    prompt: PromptType
    # OpenAI's completions default is 16 tokens (vLLM follows it).
    max_tokens: Annotated[int, Field(ge=1)] | None = 16

    @field_validator("prompt")
    @classmethod
    def _non_empty(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("prompt must not be an empty list")
        return v

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
        }
        prompt = self.prompt
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
