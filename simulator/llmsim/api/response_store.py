"""The Responses API's stored conversations, for ``previous_response_id``: in this process, bounded."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

#: Responses kept; the least recently used one goes first past this.
MAX_STORED_RESPONSES = 1024


class ResponseStore:
    """Each stored response's whole conversation (its input messages, then its answer), by response id."""

    def __init__(self, capacity: int = MAX_STORED_RESPONSES) -> None:
        self._capacity = capacity
        self._conversations: OrderedDict[str, tuple[dict[str, Any], ...]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, response_id: str, conversation: Sequence[dict[str, Any]]) -> None:
        with self._lock:
            self._conversations[response_id] = tuple(conversation)
            self._conversations.move_to_end(response_id)
            while len(self._conversations) > self._capacity:
                self._conversations.popitem(last=False)

    def get(self, response_id: str) -> tuple[dict[str, Any], ...] | None:
        with self._lock:
            conversation = self._conversations.get(response_id)
            if conversation is not None:
                self._conversations.move_to_end(response_id)
            return conversation

    def __len__(self) -> int:
        return len(self._conversations)
