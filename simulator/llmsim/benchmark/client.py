"""The load generator: sends a workload's chains to an OpenAI-compatible endpoint over aiohttp.

Each request is timed at its scheduled send, its actual send, every text chunk and its end; an
open loop sends on schedule whether or not earlier requests have finished (unless
``max_concurrency`` holds a request back, which then shows as send delay: the coordinated
omission a closed-loop client hides). Nothing raises per request: failures become records.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from llmsim.benchmark.monitor import ClientHealth, LoopMonitor
from llmsim.benchmark.prompts import Api, BodyBuilder, layout, probe_turn
from llmsim.benchmark.records import Outcome, RequestRecord
from llmsim.benchmark.sse import StreamParser
from llmsim.benchmark.workload import Chain, Role, Turn, Workload

# A chain's body is built this long before its scheduled send, so building is not send delay.
_PREPARE_AHEAD_S = 0.02
# The run's time 0 is this far after run() starts: the first sends are not late by setup.
_LEAD_S = 0.05
# The last stretch before a send is waited out by yielding, not by a timer.
_SPIN_S = 0.001


async def sleep_until(deadline: float) -> None:
    """Wait until ``deadline`` (time.monotonic), to within a loop iteration.

    NOTE: uvloop's timers count whole milliseconds of a cached loop time: one fires up to ~1.3 ms
    early or ~1 ms late, which would put a bias of about half a millisecond into every latency
    measured from the schedule. So the timer only takes the wait to within 1 ms and the rest is
    spent yielding to the loop (other requests' I/O still runs): at most 1 ms of CPU per send.
    (The server's MonotonicClock solves the opposite problem: a token must never be early.)
    """
    # A wait for a time, not for a condition another task sets: no Event to wait on.
    while (delay := deadline - time.monotonic()) > _SPIN_S:  # noqa: ASYNC110
        await asyncio.sleep(delay - _SPIN_S)
    while time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0)


def base_url(url: str) -> str:
    """``http://host:port`` from a URL given with or without ``/v1``."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how to send.

    Parameters
    ----------
    url:
        The endpoint's base URL (``http://host:port``, with or without ``/v1``): a replica, a
        fleet's Service or a gateway.
    model:
        The ``model`` field of every request.
    api:
        Completions with token-id prompts (exact lengths) or chat with text prompts.
    api_key:
        Sent as ``Authorization: Bearer``, for gateways that want one.
    timeout:
        Seconds a request may take from its send to its end before it counts as a timeout.
    max_concurrency:
        Most requests in flight at once (None: no limit, a true open loop).
    """

    url: str
    model: str
    api: Api = Api.COMPLETIONS
    api_key: str | None = None
    timeout: float = 600.0
    max_concurrency: int | None = None

    @property
    def endpoint(self) -> str:
        return base_url(self.url) + self.api.path

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers


@dataclass(slots=True)
class ClientRun:
    """The records of one run (in completion order) and the client's own health during it."""

    records: list[RequestRecord]
    health: ClientHealth


def session(limit: int = 0) -> aiohttp.ClientSession:
    """A session for load: unlimited connections, no total timeout (each request has its own)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit), timeout=aiohttp.ClientTimeout(total=None))


async def calibrate_chat(
    http: aiohttp.ClientSession, target: Target, layouts: Iterable[tuple[Role, ...]]
) -> dict[tuple[Role, ...], int]:
    """Tokens the server's chat template adds to each message layout: usage.prompt_tokens minus the words sent.

    One non-streamed probe (one output token) per layout, before the run.
    """
    builder = BodyBuilder(target.model, Api.CHAT)
    overhead: dict[tuple[Role, ...], int] = {}
    for roles in set(layouts):
        probe = probe_turn(roles)
        body = {"model": target.model, "messages": builder.messages(probe), "max_tokens": 1}
        async with http.post(base_url(target.url) + Api.CHAT.path, json=body, headers=target.headers()) as resp:
            data: Any = await resp.json(content_type=None)
            if resp.status != 200 or not isinstance(data, dict):
                raise RuntimeError(f"chat probe answered {resp.status}: {str(data)[:300]}")
        prompt_tokens = data.get("usage", {}).get("prompt_tokens")
        if not isinstance(prompt_tokens, int):
            raise RuntimeError("chat probe: the server reports no usage.prompt_tokens; use --api completions")
        overhead[roles] = prompt_tokens - probe.prompt_tokens
    return overhead


def chat_layouts(workload: Workload, sample: int = 64) -> set[tuple[Role, ...]]:
    """Message layouts of the workload's turns (the first turns of a sample of chains, and their later turns)."""
    found: set[tuple[Role, ...]] = set()
    for chain in workload.chains[:sample]:
        j = 0
        while (turn := chain.turn(j)) is not None and j < 64:
            found.add(layout(turn))
            j += 1
    return found


def _error_kind(status: int, body: bytes) -> str:
    # OpenAI's error shape: {"error": {"message", "type", "param", "code"}}.
    try:
        error = json.loads(body).get("error", {})
        kind = error.get("type") or error.get("code")
    except (ValueError, AttributeError):
        kind = None
    return f"http {status} {kind}" if kind else f"http {status}"


class LoadClient:
    """Runs workloads against one target.

    Parameters
    ----------
    target:
        Where to send.
    http:
        An open aiohttp session (see :func:`session`).
    bodies:
        Builds each request's JSON.
    on_record:
        Called with every finished record (a progress bar).
    """

    def __init__(
        self,
        target: Target,
        http: aiohttp.ClientSession,
        bodies: BodyBuilder,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        self._target = target
        self._http = http
        self._bodies = bodies
        self._on_record = on_record
        self._t0 = 0.0
        self._slots: asyncio.Semaphore | None = None
        self._records: list[RequestRecord] = []

    async def run(
        self, workload: Workload, marks: Sequence[tuple[float, Callable[[], Awaitable[None]]]] = ()
    ) -> ClientRun:
        """Send every chain of ``workload`` and wait for all of them to end.

        ``marks``: ``(t, callback)`` pairs run at time ``t`` of the run (e.g. resetting the
        server's summary at the end of the warm-up).
        """
        self._records = []
        limit = self._target.max_concurrency
        self._slots = asyncio.Semaphore(limit) if limit else None
        monitor = LoopMonitor()
        monitor.start()
        self._t0 = t0 = time.monotonic() + _LEAD_S
        order = sorted(range(len(workload.chains)), key=lambda c: (workload.chains[c].start, c))
        tasks: set[asyncio.Task[None]] = set()
        loop = asyncio.get_running_loop()
        for at, callback in marks:
            mark = loop.create_task(self._at(t0 + at, callback))
            tasks.add(mark)
            mark.add_done_callback(tasks.discard)
        for c in order:
            chain = workload.chains[c]
            if chain.start >= workload.send_until:
                break
            # NOTE: one task per chain, started just before its first send: a long open loop does not
            # hold tens of thousands of sleeping tasks.
            await sleep_until(t0 + chain.start - _PREPARE_AHEAD_S)
            task = loop.create_task(self._chain(c, chain, workload.send_until))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        while tasks:
            await asyncio.gather(*list(tasks))
        return ClientRun(self._records, await monitor.stop())

    async def _at(self, when: float, callback: Callable[[], Awaitable[None]]) -> None:
        await sleep_until(when)
        await callback()

    async def _chain(self, index: int, chain: Chain, send_until: float) -> None:
        scheduled = chain.start
        j = 0
        while scheduled < send_until:
            turn = chain.turn(j)
            if turn is None:
                return
            body = self._bodies.body(turn)
            await sleep_until(self._t0 + scheduled)
            record = RequestRecord(
                chain=index,
                turn=j,
                scheduled=scheduled,
                sent=math.nan,
                expected_prompt_tokens=turn.prompt_tokens,
                expected_output_tokens=turn.output_tokens,
                background=chain.background,
            )
            await self._send(record, turn, body)
            self._records.append(record)
            if self._on_record is not None:
                self._on_record(record)
            scheduled = record.end + chain.think_time
            j += 1

    async def _send(self, record: RequestRecord, turn: Turn, body: bytes) -> None:
        slots = self._slots
        if slots is not None:
            await slots.acquire()
        try:
            await self._exchange(record, turn, body)
        finally:
            if slots is not None:
                slots.release()

    async def _exchange(self, record: RequestRecord, turn: Turn, body: bytes) -> None:
        now = time.monotonic
        t0 = self._t0
        record.sent = now() - t0
        timeout = self._target.timeout
        hang_up = math.inf if turn.abort_after is None else record.scheduled + turn.abort_after - record.sent
        budget = min(timeout, hang_up)
        parser = StreamParser()
        times = record.token_times
        try:
            async with asyncio.timeout(None if math.isinf(budget) else max(0.0, budget)):
                async with self._http.post(self._target.endpoint, data=body, headers=self._target.headers()) as resp:
                    record.status = resp.status
                    if resp.status != 200:
                        text = await resp.read()
                        record.end = now() - t0
                        record.error = _error_kind(resp.status, text)
                        return
                    async for data in resp.content.iter_any():
                        t = now() - t0
                        n = parser.feed(data)
                        if n:
                            times.extend([t] * n)
                    record.end = now() - t0
        except TimeoutError:
            record.end = now() - t0
            if hang_up <= timeout:
                record.outcome = Outcome.ABORTED
            else:
                record.error = "timeout"
            record.output_tokens = len(times)
            return
        except aiohttp.ClientConnectorError:
            record.end = now() - t0
            record.error = "connect"
            return
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError):
            record.end = now() - t0
            record.error = "disconnected"
            record.output_tokens = len(times)
            return
        except aiohttp.ClientError as exc:
            record.end = now() - t0
            record.error = type(exc).__name__
            return
        record.prompt_tokens = parser.prompt_tokens()
        completion = parser.completion_tokens()
        record.output_tokens = completion if completion is not None else len(times)
        if parser.error is not None:
            error = parser.error
            record.error = f"stream error {error.get('type') or error.get('code') or ''}".rstrip()
        elif not parser.done:
            record.error = "incomplete stream"
        else:
            record.outcome = Outcome.OK
