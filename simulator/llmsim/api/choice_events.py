"""The events of a request's ``n`` choices as one stream, in release order."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence

from llmsim.engine import TokenStream
from llmsim.types import TokenEvent

_END = object()


async def merged_events(streams: Sequence[TokenStream]) -> AsyncGenerator[tuple[int, TokenEvent], None]:
    """Events of every choice as ``(position in streams, event)``, in release order.

    Closing this iterator closes every stream, so the engine frees what they held.
    """
    if len(streams) == 1:
        # Almost every request: no task, no queue.
        (only,) = streams
        try:
            async for event in only:
                yield 0, event
        finally:
            await only.aclose()
        return
    queue: asyncio.Queue[tuple[int, TokenEvent] | object] = asyncio.Queue()

    async def pump(pos: int, stream: TokenStream) -> None:
        try:
            async for event in stream:
                queue.put_nowait((pos, event))
        finally:
            await stream.aclose()
            queue.put_nowait(_END)

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
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
        for stream in streams:  # a pump cancelled before it started never closed its stream
            await stream.aclose()
