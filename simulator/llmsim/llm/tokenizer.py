"""A lossless regex tokenizer in the style of GPT-2's pre-tokenizer.

Every token is one match of :data:`TOKEN_PATTERN`; the alternatives are tried in this order:

1. contractions ``'s 't 're 've 'm 'll 'd`` (any case, so ``IT'S`` -> ``IT``, ``'S``);
2. CJK ideographs, kana, hangul and CJK punctuation, one character per token;
3. letter runs with an optional leading space (``" world"``);
4. digits in groups of up to three, no leading space (``"12345"`` -> ``"123"``, ``"45"``);
5. runs of punctuation and symbols (``_`` included) with an optional leading space;
6. whitespace runs that leave their last space to start the next word (GPT-2's ``\\s+(?!\\S)``),
   else the whole run (before a digit, at the end of the text);
7. any other character alone.

No alternative matches the empty string and the last one matches any character, so the matches
tile the text: ``"".join(encode(text)) == text`` for every string.

:class:`Tokenizer` is what the generator uses: this regex tokenizer with stable ids
(:class:`RegexTokenizer`, ids from :mod:`llmsim.llm.vocabulary`) or a Hugging Face
``tokenizer.json`` (:class:`llmsim.llm.hf_tokenizer.HuggingFaceTokenizer`). Both put the chat
template's tokens around the content, so a prompt's ids are exactly what the engine hashes and
``len(ids) == usage.prompt_tokens``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from llmsim.llm.filler import filler_tokens
from llmsim.llm.vocabulary import SPECIAL_TOKENS, Vocabulary
from llmsim.types import Message

__all__ = [
    "BOS_TOKENS",
    "REPLY_PRIMING_TOKENS",
    "TOKENS_PER_MESSAGE",
    "TOKEN_PATTERN",
    "RegexTokenizer",
    "Tokenizer",
    "Tokens",
    "count",
    "encode",
    "slices",
]

# CJK Unified Ideographs (+ extension A, compatibility, supplementary planes), kana, hangul, and
# the CJK symbols block without U+3000 (the ideographic space stays whitespace).
_CJK = "\u3001-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f"

TOKEN_PATTERN: re.Pattern[str] = re.compile(
    rf"""
    (?i:'(?:s|t|re|ve|m|ll|d))
    | [{_CJK}]
    | \x20?[^\W\d_{_CJK}]+
    | \d{{1,3}}
    | \x20?(?:[^\s\w{_CJK}]|_)+
    | \s+(?!\S)
    | \s+
    | .
    """,
    re.VERBOSE | re.DOTALL,
)

_findall = TOKEN_PATTERN.findall
_subn = TOKEN_PATTERN.subn

#: Texts longer than twice this are tokenized in slices of about this many characters, cut where
#: every split of the text has a token boundary: no single regex call then holds the GIL for long,
#: so a huge prompt tokenized in a worker thread lets the event loop run between slices.
SLICE_CHARS = 1 << 16
# A token always ends there, and what follows tokenizes the same with or without the text before
# it: a space between a non-space and an ASCII letter (" word" starts a token), or the edge
# between an ASCII letter run and a digit run (neither kind of token crosses it).
_CUT = re.compile(r"(?<=\S) (?=[A-Za-z])|(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])")


def slices(text: str, size: int = SLICE_CHARS) -> list[str]:
    """``text`` cut into pieces of about ``size`` characters whose tokens are exactly ``text``'s."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > 2 * size:
        cut = _CUT.search(text, start + size)
        if cut is None:
            break  # no safe cut ahead (say, one huge run of punctuation): the rest in one piece
        pieces.append(text[start : cut.start()])
        start = cut.start()
    pieces.append(text[start:])
    return pieces


def encode(text: str) -> list[str]:
    """Split ``text`` into token strings; joining them gives ``text`` back."""
    if len(text) <= 2 * SLICE_CHARS:
        return _findall(text)
    out: list[str] = []
    for piece in slices(text):
        out += _findall(piece)
    return out


def count(text: str) -> int:
    """Number of tokens in ``text``, without keeping the token strings."""
    # NOTE: subn counts matches in C and builds neither match objects nor a list of strings
    # (its result is the empty string, since the matches tile the text): as fast as len(findall),
    # faster than counting finditer's matches in Python.
    if len(text) <= 2 * SLICE_CHARS:
        return _subn("", text)[1]
    return sum(_subn("", piece)[1] for piece in slices(text))


#: Output tokens: their texts (joined: the output text) and, when asked for, their ids.
Tokens = tuple[tuple[str, ...], tuple[int, ...] | None]


class Tokenizer(Protocol):
    """What the generator needs from a tokenizer (see prompt.py for the chat templates)."""

    #: "regex" or the tokenizer.json path, for logs.
    name: str

    @property
    def vocab_size(self) -> int:
        """Ids run from 0 to ``vocab_size - 1``; others are out of vocabulary."""
        ...

    def count(self, text: str) -> int:
        """Tokens in ``text`` (no special tokens)."""
        ...

    def chat_prompt(
        self,
        messages: Sequence[Message],
        *,
        add_generation_prompt: bool,
        continue_final_message: bool,
        add_special_tokens: bool,
    ) -> tuple[list[str], list[int]]:
        """A chat prompt's token strings and ids with ``/tokenize``'s options (the defaults give :meth:`chat_prompt_ids`)."""
        ...

    def text_prompt(self, text: str, *, add_special_tokens: bool) -> tuple[list[str], list[int]]:
        """A completions prompt's token strings and ids (``/tokenize``, ``echo``)."""
        ...

    def ids_of_tokens(self, tokens: Sequence[str]) -> tuple[int, ...]:
        """Ids of token strings, one each."""
        ...

    def split(self, text: str, with_ids: bool) -> Tokens:
        """``text`` as output tokens: texts that join to ``text``, and their ids if ``with_ids``."""
        ...

    def filler(self, n: int, draw: int, *, leading_space: bool, with_ids: bool) -> Tokens:
        """Exactly ``n`` tokens of deterministic filler prose (synthetic bodies, ``ignore_eos``)."""
        ...

    def chat_prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """Ids of a chat prompt: the template's tokens around each message, then the reply priming."""
        ...

    def completion_prompt_ids(self, text: str) -> list[int]:
        """Ids of a completions prompt (special tokens such as BOS added, as vLLM's default)."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of ``token_ids``; ValueError naming an id this tokenizer does not know."""
        ...

    def id_to_token(self, token_ids: Sequence[int]) -> list[str]:
        """Each id's token string (``/tokenize``'s ``token_strs``); ValueError for an unknown id."""
        ...


#: The regex tokenizer's chat template (prompt.py): a header of 3 tokens (<|start_header_id|>,
#: the role, <|end_header_id|>) and <|eot_id|> after the content make 4 per message; the
#: assistant header that primes the reply makes 3; a completions prompt gets <|begin_of_text|>.
TOKENS_PER_MESSAGE = 4
REPLY_PRIMING_TOKENS = 3
BOS_TOKENS = 1

_START, _END, _EOT, _BOS = (
    SPECIAL_TOKENS[t] for t in ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|begin_of_text|>")
)
_ASSISTANT = SPECIAL_TOKENS["assistant"]
_START_TEXT, _END_TEXT, _EOT_TEXT, _BOS_TEXT = (
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|begin_of_text|>",
)
#: Ids of the regex tokenizer run from 0 (special tokens below the text ids) to 2**31 - 1.
VOCAB_SIZE = 2**31


class RegexTokenizer:
    """The built-in tokenizer: :func:`encode`'s tokens, ids from a :class:`Vocabulary`."""

    __slots__ = ("vocabulary",)

    name = "regex"

    def __init__(self, vocabulary: Vocabulary | None = None) -> None:
        self.vocabulary = vocabulary if vocabulary is not None else _VOCABULARY

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    def count(self, text: str) -> int:
        return count(text)

    def chat_prompt(
        self,
        messages: Sequence[Message],
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        add_special_tokens: bool = False,
    ) -> tuple[list[str], list[int]]:
        # The Llama-3-shaped template (prompt.py): per message a 3-token header, the content,
        # <|eot_id|>; then the 3-token assistant header that primes the reply.
        ids_of = self.vocabulary.ids_of
        strs: list[str] = [_BOS_TEXT] if add_special_tokens else []
        ids: list[int] = [_BOS] if add_special_tokens else []
        last = len(messages) - 1
        for i, message in enumerate(messages):
            # An unknown role still costs its one header token.
            role = message.role if message.role in SPECIAL_TOKENS else "user"
            content = encode(message.content)
            strs += (_START_TEXT, role, _END_TEXT, *content)
            ids += (_START, SPECIAL_TOKENS[role], _END, *ids_of(content))
            # continue_final_message leaves the last turn open for the model to go on with.
            if not (continue_final_message and i == last):
                strs.append(_EOT_TEXT)
                ids.append(_EOT)
        if add_generation_prompt:
            strs += (_START_TEXT, "assistant", _END_TEXT)
            ids += (_START, _ASSISTANT, _END)
        return strs, ids

    def text_prompt(self, text: str, *, add_special_tokens: bool = True) -> tuple[list[str], list[int]]:
        tokens: list[str] = encode(text)
        ids = self.vocabulary.ids_of(tokens)
        if add_special_tokens:
            return [_BOS_TEXT, *tokens], [_BOS, *ids]
        return tokens, ids

    def ids_of_tokens(self, tokens: Sequence[str]) -> tuple[int, ...]:
        return tuple(self.vocabulary.ids_of(tokens))

    def split(self, text: str, with_ids: bool) -> Tokens:
        tokens = tuple(encode(text))
        return tokens, tuple(self.vocabulary.ids_of(tokens)) if with_ids else None

    def filler(self, n: int, draw: int, *, leading_space: bool, with_ids: bool) -> Tokens:
        tokens = filler_tokens(n, draw, leading_space=leading_space)
        return tokens, tuple(self.vocabulary.ids_of(tokens)) if with_ids else None

    def chat_prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        return self.chat_prompt(messages)[1]

    def completion_prompt_ids(self, text: str) -> list[int]:
        return self.text_prompt(text)[1]

    def decode(self, token_ids: Sequence[int]) -> str:
        return "".join(self.id_to_token(token_ids))

    def id_to_token(self, token_ids: Sequence[int]) -> list[str]:
        text_of = self.vocabulary.text_of
        out = []
        for i in token_ids:
            if not 0 <= i < VOCAB_SIZE:
                # vLLM's wording for an id outside the vocabulary.
                raise ValueError(f"Token id {i} is out of vocabulary")
            text = text_of(i)
            # An id this process never produced (a client's, another replica's) has no known text:
            # shown as its number, as a tokenizer shows an unused id.
            out.append(f"<|token_{i}|>" if text is None else text)
        return out


#: One vocabulary per process: ids are a pure function of the text, so sharing only shares the cache.
_VOCABULARY = Vocabulary()
