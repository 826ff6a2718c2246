"""Where the server is in its life (loading, serving, asleep, draining) and its generation requests in flight.

- **Loading** (``startup_seconds``): vLLM binds its port only once the weights are loaded; llmsim
  binds at once and answers ``/health`` 503 (and completions 503 with ``Retry-After``) until the
  simulated load is done, so Kubernetes and gateways see a replica become ready late.
- **Asleep** (``POST /sleep``): as vLLM's sleep mode, new requests are accepted and wait until
  ``/wake_up``; in-flight ones are aborted (``mode=abort``, the default) or finish (``mode=wait``).
- **Draining** (SIGTERM): ``/health`` 503, new requests 503; running ones get ``grace`` seconds to
  finish, then the engines abort them (each ends with finish reason ``abort``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Iterable

from llmsim.api.errors import APIError

logger = logging.getLogger("llmsim")

#: What a sleep of level >= 1 puts to sleep (vLLM's SLEEP_TAGS); level 0 only pauses scheduling.
SLEEP_TAGS = ("weights", "kv_cache")
_SCHEDULING = "scheduling"
#: vLLM's sleep modes for in-flight requests; "keep" (freeze them in place) is not simulated.
SLEEP_MODES = ("abort", "wait")


class Lifecycle:
    """The server's state, read by the routes on every generation request (one attribute when serving).

    Parameters
    ----------
    now:
        The engines' clock.
    startup_seconds:
        Simulated model load, counted from construction (process start).
    abort:
        Aborts every request in flight in every engine; returns how many.
    """

    def __init__(self, now: Callable[[], float], startup_seconds: float = 0.0, abort: Callable[[], int] = int) -> None:
        self._now = now
        self._abort = abort
        self.startup_seconds = startup_seconds
        self.ready_at = now() + startup_seconds
        self.loaded = startup_seconds <= 0
        self.draining = False
        # Tags still asleep (empty: awake).
        self.sleeping: set[str] = set()
        self.sleep_level: int | None = None
        # Loaded, awake and not draining: the only thing a generation request checks.
        self.serving = self.loaded
        # Set while awake or draining: what a request accepted during sleep waits for.
        self._awake = asyncio.Event()
        self._awake.set()
        # Generation requests in the app, and those of them waiting for /wake_up.
        self.in_flight = 0
        self._queued = 0
        self._watching = False
        self._quiet = asyncio.Event()

    # -- startup --------------------------------------------------------------------------

    def start(self) -> None:
        """At server startup: the load ends ``startup_seconds`` after construction."""
        if self.loaded:
            return
        delay = max(0.0, self.ready_at - self._now())
        logger.info("simulated model load: ready in %.1f s (/health answers 503 until then)", delay)
        asyncio.get_running_loop().call_later(delay, self._load_done)

    def _load_done(self) -> None:
        self.loaded = True
        self._update()
        logger.info("simulated model load done: ready")

    @property
    def healthy(self) -> bool:
        """What ``/health`` says: loaded and not shutting down."""
        return self.loaded and not self.draining

    # -- requests -------------------------------------------------------------------------

    def started(self) -> None:
        self.in_flight += 1

    def finished(self) -> None:
        self.in_flight -= 1
        if self._watching and self.in_flight <= self._queued:
            self._quiet.set()

    async def admit(self) -> bool:
        """Let a generation request through (True): 503 while loading or draining, wait while asleep."""
        while not self.serving:
            if self.draining:
                raise APIError(503, "The server is shutting down.")
            if not self.loaded:
                remaining = max(1, math.ceil(self.ready_at - self._now()))
                raise APIError(
                    503,
                    "The model is still loading: the server is not ready yet.",
                    headers={"Retry-After": str(remaining)},
                )
            # Asleep: queued until /wake_up, as vLLM does.
            self._queued += 1
            if self._watching and self.in_flight <= self._queued:
                self._quiet.set()
            try:
                await self._awake.wait()
            finally:
                self._queued -= 1
        return True

    # -- sleep mode -----------------------------------------------------------------------

    async def sleep(self, level: int, mode: str) -> None:
        """vLLM's ``/sleep``: level 0 pauses scheduling, 1 and 2 also put weights and KV cache to sleep."""
        if level not in (0, 1, 2):
            raise APIError(400, f"level must be 0, 1 or 2, got {level}.", param="level")
        if mode not in SLEEP_MODES:
            raise APIError(
                400, f"mode must be one of {', '.join(SLEEP_MODES)} (llmsim does not simulate 'keep').", param="mode"
            )
        self.sleeping |= {_SCHEDULING} if level == 0 else set(SLEEP_TAGS)
        self.sleep_level = level
        self._update()
        if mode == "abort":
            n = self._abort()
            logger.info("asleep (level %d): aborted %d requests in flight", level, n)
        else:
            await self._until_quiet(None)
            logger.info("asleep (level %d) after the requests in flight finished", level)

    def wake_up(self, tags: Iterable[str] | None) -> bool:
        """vLLM's ``/wake_up``: wake the given tags (all when None); True once fully awake."""
        if tags is None:
            self.sleeping.clear()
        else:
            wanted = set(tags)
            unknown = wanted - {*SLEEP_TAGS, _SCHEDULING}
            if unknown:
                known = ", ".join((*SLEEP_TAGS, _SCHEDULING))
                raise APIError(400, f"unknown tags {', '.join(sorted(unknown))} (known: {known}).", param="tags")
            self.sleeping -= wanted
        if not self.sleeping:
            self.sleep_level = None
        self._update()
        return not self.sleeping

    # -- shutdown -------------------------------------------------------------------------

    async def drain(self, grace: float) -> None:
        """SIGTERM: refuse new requests, give running ones ``grace`` seconds, then abort the rest."""
        self.draining = True
        self._update()
        left = await self._until_quiet(grace)
        if left:
            logger.warning("shutdown: %d requests still running after %g s: aborting them", left, grace)
            self._abort()
            # Aborted streams write their last chunk and end at once; the server waits for that.
        else:
            logger.info("shutdown: no request running")

    # -- internals ------------------------------------------------------------------------

    def _update(self) -> None:
        self.serving = self.loaded and not self.draining and not self.sleeping
        if self.serving or self.draining:
            self._awake.set()  # queued requests go on (or learn of the shutdown)
        else:
            self._awake.clear()

    async def _until_quiet(self, limit_s: float | None) -> int:
        """Wait until no generation request runs (those queued for /wake_up aside); return how many still do."""
        self._watching = True
        self._quiet.clear()
        try:
            if self.in_flight > self._queued:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._quiet.wait(), limit_s)
        finally:
            self._watching = False
        return max(0, self.in_flight - self._queued)
