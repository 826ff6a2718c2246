"""A Hugging Face ``tokenizer.json`` (the ``tokenizers`` library), for counts and ids a gateway can reproduce.

Models.yml: ``tokenizer: {path: /models/llama/tokenizer.json, chat_template: llama-3}``. The file is
read at startup; nothing is downloaded. With it, prompt token counts, output token boundaries and
prefix-cache block hashes come from the model's own tokenizer, so a client or gateway that
tokenizes with it counts what the server counts.

Chat prompts are rendered with a built-in template, then tokenized without adding special tokens
(vLLM does the same with the model's Jinja template); the template's markers are single tokens
when the tokenizer has them as added tokens, as real tokenizers of those families do:

- ``chatml``: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, then
  ``<|im_start|>assistant\\n`` (Qwen, many fine-tunes);
- ``llama-3``: ``<|begin_of_text|>``, then ``<|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>``
  per message, then ``<|start_header_id|>assistant<|end_header_id|>\\n\\n``.

NOTE: the model's own ``tokenizer_config.json`` chat template (Jinja) is not read: two templates
cover the families gateways meet most, without a template engine on the request path.

Completions prompts are tokenized with the tokenizer's own special tokens (``add_special_tokens``,
vLLM's default), e.g. a BOS from its post-processor. Output text is split at the tokenizer's
token boundaries (pieces that join back to the text exactly).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tokenizers import Tokenizer as _HFTokenizer

from llmsim.llm.filler import filler_tokens
from llmsim.llm.tokenizer import Tokens
from llmsim.types import Message

__all__ = ["CHAT_TEMPLATES", "ChatTemplate", "HuggingFaceTokenizer"]

ChatTemplateName = Literal["chatml", "llama-3"]


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A chat template as three strings: before everything, around each message, to prime the reply."""

    prefix: str
    message: str  # with {role} and {content}
    reply: str


CHAT_TEMPLATES: dict[str, ChatTemplate] = {
    "chatml": ChatTemplate("", "<|im_start|>{role}\n{content}<|im_end|>\n", "<|im_start|>assistant\n"),
    "llama-3": ChatTemplate(
        "<|begin_of_text|>",
        "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
}


class HuggingFaceTokenizer:
    """A ``tokenizers.Tokenizer`` loaded from a tokenizer.json, with a chat template.

    Raises ValueError when the file cannot be read or parsed, or the template is unknown.
    """

    __slots__ = ("_tokenizer", "name", "template")

    def __init__(self, path: str | Path, chat_template: str = "chatml") -> None:
        if chat_template not in CHAT_TEMPLATES:
            known = ", ".join(CHAT_TEMPLATES)
            raise ValueError(f"unknown chat_template '{chat_template}' (known: {known})")
        try:
            self._tokenizer = _HFTokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises plain Exception subclasses from Rust
            raise ValueError(f"cannot load tokenizer {path}: {exc}") from None
        self.name = str(path)
        self.template = CHAT_TEMPLATES[chat_template]

    @property
    def vocab_size(self) -> int:
        size: int = self._tokenizer.get_vocab_size(with_added_tokens=True)
        return size

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def chat_prompt(
        self,
        messages: Sequence[Message],
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        add_special_tokens: bool = False,
    ) -> tuple[list[str], list[int]]:
        # NOTE: the built-in templates have no variants: /tokenize's template options change nothing.
        ids = self.chat_prompt_ids(messages)
        return self.id_to_token(ids), ids

    def text_prompt(self, text: str, *, add_special_tokens: bool = True) -> tuple[list[str], list[int]]:
        encoding = self._tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return list(encoding.tokens), list(encoding.ids)

    def ids_of_tokens(self, tokens: Sequence[str]) -> tuple[int, ...]:
        # Token strings of this vocabulary map back directly; another text (a piece of output
        # text cut elsewhere) gets its first token's id.
        ids = []
        for token in tokens:
            i = self._tokenizer.token_to_id(token)
            if i is None:
                encoded = self._tokenizer.encode(token, add_special_tokens=False).ids
                i = encoded[0] if encoded else 0
            ids.append(i)
        return tuple(ids)

    def split(self, text: str, with_ids: bool) -> Tokens:
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        ids = encoding.ids
        # Pieces cut at each token's end offset (chars), so they tile the text: a token whose
        # bytes split a character (byte-level BPE) gets an empty piece, the next one the character.
        pieces = []
        start = 0
        for _, end in encoding.offsets:
            end = max(end, start)
            pieces.append(text[start:end])
            start = end
        if pieces:
            pieces[-1] += text[start:]
        return tuple(pieces), tuple(ids)

    def filler(self, n: int, draw: int, *, leading_space: bool, with_ids: bool) -> Tokens:
        if n <= 0:
            return (), ()
        # The regex filler's prose, re-split by this tokenizer (at least as many tokens for
        # word-piece tokenizers; grown until there are enough), then cut to exactly n tokens.
        words = n
        while True:
            text = "".join(filler_tokens(words, draw, leading_space=leading_space))
            pieces, ids = self.split(text, True)
            if len(pieces) >= n:
                assert ids is not None
                return pieces[:n], ids[:n]
            words *= 2

    def chat_prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        t = self.template
        text = t.prefix + "".join(t.message.format(role=m.role, content=m.content) for m in messages) + t.reply
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def completion_prompt_ids(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=True).ids)

    def decode(self, token_ids: Sequence[int]) -> str:
        self.id_to_token(token_ids)  # the same error for an unknown id
        text: str = self._tokenizer.decode(list(token_ids), skip_special_tokens=False)
        return text

    def id_to_token(self, token_ids: Sequence[int]) -> list[str]:
        out = []
        for i in token_ids:
            token = self._tokenizer.id_to_token(i)
            if token is None:
                raise ValueError(f"Token id {i} is out of vocabulary")
            out.append(token)
        return out
