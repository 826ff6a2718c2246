"""Pull one plan's tokens out of an engine, as the API does for a one-choice request."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from llmsim.engine import Engine
from llmsim.types import GenerationPlan, RequestId, TokenEvent


async def run(
    engine: Engine, plan: GenerationPlan, arrival: float, request_id: RequestId
) -> AsyncGenerator[TokenEvent]:
    """Submit ``plan`` and yield its events; closing the generator closes (aborts) the stream."""
    (stream,) = await engine.submit([plan], arrival, [request_id])
    try:
        async for event in stream:
            yield event
    finally:
        await stream.aclose()
