"""Pulling tokens out of an engine: choices merged, closed on disconnect."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Sequence
from typing import TypeVar

from starlette.requests import Request

from llmsim.engine import Engine
from llmsim.types import GenerationPlan, RequestId, TokenEvent

T = TypeVar("T")

_END = object()


async def merged_events(
    engine: Engine, plans: Sequence[GenerationPlan], arrival: float, request_ids: Sequence[RequestId]
) -> AsyncGenerator[tuple[int, TokenEvent], None]:
    """Events of every choice as ``(position in plans, event)``, in release order.

    Closing this iterator closes every engine iterator, so the engine frees what they held.
    (A stream of one choice reads the engine iterator directly: see routes._respond.)
    """
    if len(plans) == 1:
        # No task, no queue.
        it = engine.run(plans[0], arrival, request_ids[0])
        try:
            async for event in it:
                yield 0, event
        finally:
            await it.aclose()
        return

    queue: asyncio.Queue[tuple[int, TokenEvent] | object] = asyncio.Queue()

    async def pump(pos: int) -> None:
        it = engine.run(plans[pos], arrival, request_ids[pos])
        try:
            async for event in it:
                queue.put_nowait((pos, event))
        finally:
            await it.aclose()
            queue.put_nowait(_END)

    tasks = [asyncio.create_task(pump(i)) for i in range(len(plans))]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is _END:
                remaining -= 1
                continue
            assert isinstance(item, tuple)
            yield item
        for task in tasks:
            task.result()  # surface an engine error
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def until_disconnect(awaitable: Awaitable[T], request: Request) -> T | None:
    """Await ``awaitable`` unless the client disconnects first (then cancel it, return None).

    For non-streaming responses, where Starlette does not watch the connection: a client that
    gives up must still end the request server-side, so the engine frees its KV cache.
    """
    work = asyncio.ensure_future(awaitable)

    async def disconnected() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watch = asyncio.create_task(disconnected())
    try:
        await asyncio.wait((work, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
    if work.done():
        return work.result()
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await work
    return None
