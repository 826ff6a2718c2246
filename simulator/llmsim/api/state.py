"""Everything the routes read, set once at startup on ``app.state.llmsim``."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmsim.api.served import ServedModel
from llmsim.engine.clock import Clock


@dataclass(slots=True)
class ApiState:
    models: dict[str, ServedModel]
    # The engines' clock: arrival stamps and lag use the same timeline as token deadlines.
    clock: Clock
    # LoRA adapter name -> the served model it runs on (requests name adapters in "model").
    lora_adapters: dict[str, str] = field(default_factory=dict)
