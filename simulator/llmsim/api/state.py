"""Everything the routes read, set once at startup on ``app.state.llmsim``."""

from __future__ import annotations

from dataclasses import dataclass

from llmsim.api.lifecycle import Lifecycle
from llmsim.api.served import ServedModel
from llmsim.engine.clock import Clock


@dataclass(slots=True)
class ApiState:
    models: dict[str, ServedModel]
    # The engines' clock: arrival stamps and lag use the same timeline as token deadlines.
    clock: Clock
    # Loading, serving, asleep or draining (shared with LlmsimApp, which counts requests in flight).
    lifecycle: Lifecycle
