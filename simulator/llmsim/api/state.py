"""Everything the routes read, set once at startup on ``app.state.llmsim``."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmsim.api.lifecycle import Lifecycle
from llmsim.api.response_store import ResponseStore
from llmsim.api.served import ServedModel
from llmsim.engine.clock import Clock
from llmsim.engine.release_gate import ReleaseGate

#: Default cap on a request body. vLLM has none; 4 MiB holds a 128k-token prompt several times over,
#: and validating a body that size holds the event loop for a few milliseconds only.
DEFAULT_MAX_REQUEST_BYTES = 4 * 2**20
#: Default cap on a request's output tokens, all prompts and choices together (api/output_limit.py).
#: vLLM has none (it bounds each choice by the context only). 256 Ki tokens: eight choices of a
#: 32k-context model filled to the brim; its plans take ~40 MB and the server answers /health
#: meanwhile (bench/bench_health_under_load.py).
DEFAULT_MAX_REQUEST_OUTPUT_TOKENS = 2**18


@dataclass(slots=True)
class ApiState:
    models: dict[str, ServedModel]
    # The engines' clock: arrival stamps and lag use the same timeline as token deadlines.
    clock: Clock
    # Loading, serving, asleep or draining (shared with LlmsimApp, which counts requests in flight).
    lifecycle: Lifecycle
    # Larger request bodies are refused with 413 before they are parsed.
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    # More output tokens in one request (prompts × n × max_tokens) are refused with 400 before planning.
    max_request_output_tokens: int = DEFAULT_MAX_REQUEST_OUTPUT_TOKENS
    # The scheduler engines' pending token releases, which request work gives way to (None: no such engine).
    release_gate: ReleaseGate | None = None
    # LoRA adapter name -> the served model it runs on (requests name adapters in "model").
    lora_adapters: dict[str, str] = field(default_factory=dict)
    # Alias -> the served model's name (vLLM's --served-model-name after the first).
    aliases: dict[str, str] = field(default_factory=dict)
    # The Responses API's stored conversations (previous_response_id).
    stored_responses: ResponseStore = field(default_factory=ResponseStore)
