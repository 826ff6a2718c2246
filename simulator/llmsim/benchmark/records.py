"""One request as the client saw it (or as the virtual-time core predicts it): the unit every figure is built from."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field


class Outcome(enum.StrEnum):
    OK = "ok"
    # The client hung up on purpose (a trace's ``abort_at``); not an error.
    ABORTED = "aborted"
    ERROR = "error"


@dataclass(slots=True)
class RequestRecord:
    """Timings of one request, in seconds from the start of the run; never raises, failures are recorded.

    Measured and predicted requests share this type, so one function computes every figure for both.
    """

    # Which chain (an open-loop arrival, a closed-loop worker, a conversation) and which of its turns.
    chain: int
    turn: int
    # When the workload meant to send it, and when it was sent (later if the client was late or a
    # concurrency limit held it back: the difference is the coordinated omission).
    scheduled: float
    sent: float
    expected_prompt_tokens: int
    expected_output_tokens: int
    # Gate and keeper requests of an experiment: sent, predicted, never counted.
    background: bool = False
    # Arrival at the client of every chunk that carried output text.
    token_times: list[float] = field(default_factory=list)
    # When the response ended ([DONE], an error, or the client's hang-up).
    end: float = math.nan
    # usage.completion_tokens when the server reports it, else the number of text chunks.
    output_tokens: int = 0
    # usage.prompt_tokens as reported (None: no usage in the response).
    prompt_tokens: int | None = None
    outcome: Outcome = Outcome.ERROR
    # HTTP status (None: no response at all).
    status: int | None = None
    # What went wrong, as a short kind: "http 503 server_overloaded", "connect", "timeout", ...
    error: str | None = None

    @property
    def first_token(self) -> float | None:
        return self.token_times[0] if self.token_times else None
