"""Client-side reading of an OpenAI stream: whole network reads split into server-sent events.

NOTE: reads are split here rather than iterated line by line in aiohttp: the line iterator cost the
client about as much CPU per token as the server spends, which made the client the bottleneck at a
few hundred streams. Only the rare chunks (usage, errors) are parsed as JSON; a token chunk is
recognised by its bytes. Every event of one read gets the read's time: they did arrive together.
"""

from __future__ import annotations

import json
from typing import Any

_DATA = b"data:"
_DONE = b"[DONE]"
# A chunk carries output text when its content / text string is not empty.
_TEXT_KEYS = (b'"content":"', b'"text":"')


def _carries_text(event: bytes) -> bool:
    for key in _TEXT_KEYS:
        at = event.find(key)
        if at >= 0 and event[at + len(key) : at + len(key) + 1] != b'"':
            return True
    return False


class StreamParser:
    """Feed it the bytes of a streamed completion; it counts text chunks and keeps usage and errors."""

    __slots__ = ("_rest", "done", "error", "usage")

    def __init__(self) -> None:
        self._rest = b""
        # The stream's [DONE] was seen.
        self.done = False
        # The last usage object seen (include_usage's final chunk, or continuous usage).
        self.usage: dict[str, Any] | None = None
        # An error event's error object.
        self.error: dict[str, Any] | None = None

    def feed(self, data: bytes) -> int:
        """Consume one read; return how many chunks in it carried output text."""
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        events = (self._rest + data).split(b"\n\n")
        self._rest = events.pop()
        texts = 0
        for event in events:
            payload = self._payload(event)
            if payload is None:
                continue
            if payload == _DONE:
                self.done = True
            elif payload.startswith(b'{"error"'):
                self._parse_error(payload)
            elif b'"usage":{' in payload or b'"choices":[]' in payload:
                chunk = json.loads(payload)
                if isinstance(chunk.get("usage"), dict):
                    self.usage = chunk["usage"]
                texts += _carries_text(payload)
            elif _carries_text(payload):
                texts += 1
        return texts

    @staticmethod
    def _payload(event: bytes) -> bytes | None:
        # Almost always one "data: ..." line; comments (":" keep-alives) and other fields are skipped.
        if event.startswith(_DATA):
            return event[5:].lstrip(b" ")
        lines = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(_DATA)]
        return b"\n".join(lines) if lines else None

    def _parse_error(self, payload: bytes) -> None:
        try:
            body = json.loads(payload)
        except ValueError:
            self.error = {"message": payload[:200].decode(errors="replace")}
            return
        error = body.get("error")
        self.error = error if isinstance(error, dict) else {"message": str(error)}

    def prompt_tokens(self) -> int | None:
        value = (self.usage or {}).get("prompt_tokens")
        return value if isinstance(value, int) else None

    def completion_tokens(self) -> int | None:
        value = (self.usage or {}).get("completion_tokens")
        return value if isinstance(value, int) else None
