"""Request bodies: prompts of exact token counts, as token ids (completions) or as chat text.

Token ids (``/v1/completions`` with ``prompt: [ids]``) are exact on any server: vLLM and llmsim
take ids as given. Chat text is made of common English words that a BPE or llmsim's tokenizer
keeps as one token each (``" river"``); the chat template adds tokens per message, which
:func:`calibrate_chat` measures once per message layout with a probe, and every response's
``usage.prompt_tokens`` is checked against the target (``LoadStats.prompt_mismatches``).

A segment's tokens come from its key: three leading ids from a hash of the key, then a stretch of
a fixed pseudo-random cycle. Equal keys give equal tokens, different keys differ from their first
token, so a prefix cache finds exactly the prefixes the workload shares.
"""

from __future__ import annotations

import enum
import hashlib
import json
import random
from collections.abc import Mapping
from functools import cache

from llmsim.benchmark.workload import Role, Segment, Turn

# Ids below 1,000 are special tokens in common vocabularies; all ids stay under 29,000 (< any 32k vocab).
_ID_BASE = 1000
_ID_SPAN = 28000
_CYCLE_LEN = 1 << 16

# Lowercase English words that GPT-2-style, Llama and llmsim tokenizers keep as one token after a space.
_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her it an were are which this be or has had not "
    "first one their its new after who they have two been other when there all into time may more most only over "
    "city some world would where later up such used many can state about out known then made team three while "
    "well part area each four before being river through against north second game house group system south life "
    "film local public number high east west very music work long place family station these small large name "
    "light water garden morning evening road bridge market village letter story model answer question window "
    "mountain valley forest ocean island harbor engine signal pattern reason simple quiet bright gentle careful "
    "common final open clear green yellow silver golden ancient modern little great young old warm cold early "
    "late soft hard quick slow still often never always almost perhaps together along across behind beyond within "
    "without toward among above below near far here"
)
_WORDS = tuple(_WORD_TEXT.split())


class Api(enum.StrEnum):
    COMPLETIONS = "completions"
    CHAT = "chat"

    @property
    def path(self) -> str:
        return "/v1/completions" if self is Api.COMPLETIONS else "/v1/chat/completions"


@cache
def _cycle() -> tuple[int, ...]:
    rng = random.Random(20240611)
    return tuple(_ID_BASE + rng.randrange(_ID_SPAN) for _ in range(_CYCLE_LEN))


def _hash(key: tuple[int, ...]) -> int:
    return int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "big")


def segment_ids(segment: Segment) -> list[int]:
    """The token ids of a segment (deterministic in its key and length)."""
    n = segment.tokens
    h = _hash(segment.key)
    head = [_ID_BASE + (h >> (20 * i)) % _ID_SPAN for i in range(3)]
    if n <= 3:
        return head[:n]
    cycle = _cycle()
    start = (h >> 47) % _CYCLE_LEN
    rest = n - 3
    ids = list(cycle[start : start + rest])
    while len(ids) < rest:  # wraps around the cycle
        ids.extend(cycle[: rest - len(ids)])
    return head + ids


def segment_text(segment: Segment, tokens: int | None = None) -> str:
    """The segment as ``tokens`` words (default: its length)."""
    n = segment.tokens if tokens is None else tokens
    ids = segment_ids(Segment(segment.role, segment.key, n))
    return " ".join(_WORDS[i % len(_WORDS)] for i in ids)


def layout(turn: Turn) -> tuple[Role, ...]:
    """The roles of a turn's messages: what the chat template's overhead depends on."""
    return tuple(s.role for s in turn.prompt)


class BodyBuilder:
    """JSON bodies of streamed requests for one model and API.

    Parameters
    ----------
    model:
        The ``model`` field sent.
    api:
        Completions with token ids (exact) or chat with text.
    chat_overhead:
        Chat: template tokens per message layout (from :func:`calibrate_chat`); taken off the
        last message so that usage.prompt_tokens equals the turn's length.
    """

    __slots__ = ("_api", "_overhead", "model")

    def __init__(self, model: str, api: Api, chat_overhead: Mapping[tuple[Role, ...], int] | None = None) -> None:
        self.model = model
        self._api = api
        _cycle()  # built here, not during the run's first send
        self._overhead = dict(chat_overhead or {})

    def body(self, turn: Turn) -> bytes:
        payload: dict[str, object] = {
            "model": self.model,
            "max_tokens": turn.output_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.0,
        }
        if self._api is Api.COMPLETIONS:
            ids: list[int] = []
            for segment in turn.prompt:
                ids += segment_ids(segment)
            payload["prompt"] = ids
        else:
            payload["messages"] = self.messages(turn)
        return json.dumps(payload, separators=(",", ":")).encode()

    def messages(self, turn: Turn) -> list[dict[str, str]]:
        """Chat messages whose template-counted length is the turn's prompt length."""
        overhead = self._overhead.get(layout(turn), 0)
        *head, last = turn.prompt
        words = last.tokens - overhead
        if words < 1:
            raise ValueError(
                f"the last message needs {last.tokens} tokens but the chat template alone costs {overhead}: "
                "raise --prompt-tokens"
            )
        out = [{"role": s.role.value, "content": segment_text(s)} for s in head]
        out.append({"role": last.role.value, "content": segment_text(last, words)})
        return out


def probe_turn(roles: tuple[Role, ...], words: int = 8) -> Turn:
    """A turn of the given layout with ``words`` words per message, to measure the template's overhead."""
    return Turn(tuple(Segment(role, (-2, i), words) for i, role in enumerate(roles)), 1)
