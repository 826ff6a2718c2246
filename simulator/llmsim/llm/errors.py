"""Request errors the generator raises; the API maps them to vLLM's 400 responses."""

from __future__ import annotations

__all__ = ["ContextLengthError", "ResponseFormatError"]


class ContextLengthError(ValueError):
    """The prompt, or the prompt plus ``max_tokens``, does not fit the model's context.

    ``message`` is vLLM's wording; ``param`` names the offending input (``input_tokens`` or
    ``max_tokens``), as in vLLM's error body.
    """

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    @classmethod
    def prompt_too_long(cls, context_length: int, prompt_tokens: int) -> ContextLengthError:
        # vLLM's wording for a prompt that cannot fit even with no output.
        return cls(
            f"This model's maximum context length is {context_length} tokens. However, your prompt contains "
            f"{prompt_tokens} input tokens, which exceeds this limit even without any output tokens. "
            "Please reduce the length of the input prompt.",
            "input_tokens",
        )

    @classmethod
    def embedding_too_long(cls, context_length: int, prompt_tokens: int) -> ContextLengthError:
        # vLLM's wording for an embedding input longer than the context.
        return cls(
            f"This model's maximum context length is {context_length} tokens. However, you requested "
            f"{prompt_tokens} tokens in the input for embedding generation. Please reduce the length of the input.",
            "input_tokens",
        )

    @classmethod
    def max_tokens_too_large(cls, context_length: int, prompt_tokens: int, max_tokens: int) -> ContextLengthError:
        # vLLM's OpenAI server wording (serving engine's input validation) for prompt + max_tokens.
        return cls(
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum context "
            f"length is {context_length} tokens and your request has {prompt_tokens} input tokens "
            f"({max_tokens} > {context_length} - {prompt_tokens}).",
            "max_tokens",
        )


class ResponseFormatError(ValueError):
    """``response_format`` asks for JSON and the script's answer is not JSON (a 400, ``param`` response_format)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @classmethod
    def not_json(cls, entry_id: str) -> ResponseFormatError:
        return cls(
            f"response_format asks for JSON, but the scripted answer (responses.yml entry '{entry_id}') is not "
            "JSON: give that entry a `json:` body, or match JSON requests with an entry that has one."
        )
