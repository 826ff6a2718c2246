"""What the API needs to serve one model: its generator, its engine, and where lags go."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmsim.engine import Engine
from llmsim.llm.generator import Generator


def _drop(lags: Sequence[float]) -> None:
    pass


@dataclass(slots=True)
class ServedModel:
    name: str
    generator: Generator
    engine: Engine
    context_length: int
    # Unix time of startup, reported as ``created`` in /v1/models.
    created: int
    # Extra fields for /v1/models (engine name, KV blocks, ...).
    info: dict[str, Any] = field(default_factory=dict)
    # Receives the release lags of one request's tokens, in one call per request.
    observe_lags: Callable[[Sequence[float]], None] = _drop
