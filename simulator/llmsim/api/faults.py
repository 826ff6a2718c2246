"""Fault injection: which request fails, and how, decided from (seed, request id or request number).

One :class:`FaultInjector` per served model holds its ``faults:`` settings (models.yml, or the
last ``PUT /admin/faults``). A request draws two numbers in [0, 1) from a hash of the seed and a
key: the client's ``X-Request-Id`` when it sends one (the same id gets the same fault in every
run, whatever the concurrency), else the model's request number since the settings were last set.
The first number walks the rates in :data:`~llmsim.config.schema.FAULT_KINDS` order (at most one
fault per request); the second picks the token a stall or a drop happens at.

Errors are answered before anything is queued, as llm-d's inference simulator does; ``stall`` and
``slow`` become a :class:`~llmsim.types.Pacing` of the plans (the engine applies it);
``abort_mid_stream`` drops the connection (:mod:`llmsim.transport.dropped_connection`); ``crash`` ends the process.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NoReturn

from llmsim.api.errors import RETRY_AFTER_S, APIError, echoed
from llmsim.config.schema import FAULT_KINDS, FaultState
from llmsim.types import GenerationPlan, Pacing

logger = logging.getLogger("llmsim.faults")

#: Request header forcing one fault kind (or ``none``) on one request, obeyed only with ``header_override``.
FAULT_HEADER = "x-llmsim-fault"
#: Exit status of the ``crash`` fault (EX_SOFTWARE): a crash, not a clean exit.
CRASH_EXIT_STATUS = 70

Crash = Callable[[str], NoReturn]


@dataclass(frozen=True, slots=True)
class Fault:
    """The fault one request got, with the settings of the moment it was drawn."""

    kind: str
    # Second draw in [0, 1): which token a stall or a drop happens at.
    where: float
    stall_s: float
    slow_factor: float

    def token(self, num_tokens: int) -> int:
        """Index in [0, num_tokens) picked by ``where`` (0 for an empty answer)."""
        return min(math.floor(self.where * num_tokens), max(num_tokens - 1, 0))

    def pace(self, plans: Sequence[GenerationPlan]) -> list[GenerationPlan]:
        """The plans with this fault's pacing (``stall``, ``slow``); unchanged for the other kinds."""
        if self.kind == "slow":
            pacing = Pacing(slowdown=self.slow_factor)
        elif self.kind == "stall":
            pacing = Pacing(pause_at=self.token(plans[0].num_output_tokens if plans else 0), pause_s=self.stall_s)
        else:
            return list(plans)
        return [replace(plan, pacing=pacing) for plan in plans]

    def drop_after(self, plans: Sequence[GenerationPlan]) -> int | None:
        """``abort_mid_stream``: tokens sent before the drop (fewer than the answer has), else None."""
        if self.kind != "abort_mid_stream":
            return None
        return self.token(sum(p.num_output_tokens for p in plans))

    def log_where(self, plans: Sequence[GenerationPlan], request_id: str) -> None:
        """Where a stall or a drop lands in this request's answer, once its length is known."""
        if self.kind == "stall":
            pacing = plans[0].pacing if plans else None
            at = pacing.pause_at if pacing is not None else 0
            logger.info("fault stall: %g s before token %d: request_id=%s", self.stall_s, at, request_id)
        elif self.kind == "abort_mid_stream":
            logger.info(
                "fault abort_mid_stream: drop after %s tokens: request_id=%s", self.drop_after(plans), request_id
            )


def _draws(seed: int, key: str) -> tuple[float, float]:
    """Two independent uniforms in [0, 1) from (seed, key): stable across runs and platforms."""
    digest = hashlib.blake2b(f"{seed}\x00{key}".encode(), digest_size=16).digest()
    return int.from_bytes(digest[:8], "big") / 2**64, int.from_bytes(digest[8:], "big") / 2**64


def exit_process(message: str) -> NoReturn:
    """The ``crash`` fault: log one clear line and end the process at once, as a crashing server does."""
    logger.critical("%s: exiting with status %d", message, CRASH_EXIT_STATUS)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(CRASH_EXIT_STATUS)


class FaultInjector:
    """One model's fault settings and request counter.

    Parameters
    ----------
    model:
        The served model name (in error messages and log lines).
    settings:
        The model's ``faults`` entry.
    count:
        Called with the kind of every injected fault (``llmsim_faults_injected_total``).
    crash:
        Ends the process (``crash``); tests pass a stand-in.
    """

    def __init__(
        self, model: str, settings: FaultState, count: Callable[[str], None], crash: Crash = exit_process
    ) -> None:
        self.model = model
        self._count = count
        self._crash = crash
        self.settings = settings
        self.enabled = False
        self._edges: tuple[tuple[str, float], ...] = ()
        self._requests = 0
        self.configure(settings)

    def configure(self, settings: FaultState) -> None:
        """New settings (from ``PUT /admin/faults``): the request count starts again, so a run is reproducible."""
        self.settings = settings
        self.enabled = settings.enabled
        self._requests = 0
        edge = 0.0
        edges = []
        for kind in FAULT_KINDS:
            rate = getattr(settings.rates, kind)
            if rate > 0:
                edge += rate
                edges.append((kind, edge))
        self._edges = tuple(edges)

    def draw(self, forced: str | None, request_id: str | None) -> Fault | None:
        """This request's fault, or None. ``forced``: the ``x-llmsim-fault`` header; ``request_id``: the client's.

        Raises APIError (400) for a forced kind that does not exist.
        """
        settings = self.settings
        n = self._requests
        self._requests = n + 1
        u, where = _draws(settings.seed, f"id:{request_id}" if request_id is not None else f"n:{n}")
        kind: str | None = None
        if forced is not None and settings.header_override:
            forced = forced.strip().lower()
            if forced not in FAULT_KINDS and forced != "none":
                raise APIError(
                    400,
                    f"Invalid {FAULT_HEADER} header value {echoed(forced)!r}: expected one of none, {', '.join(FAULT_KINDS)}.",
                    param=FAULT_HEADER,
                )
            kind = None if forced == "none" else forced
        else:
            for candidate, edge in self._edges:
                if u < edge:
                    kind = candidate
                    break
        if kind is None:
            return None
        return Fault(kind, where, settings.stall_ms / 1000, settings.slow_factor)

    def inject(self, fault: Fault, request_id: str) -> None:
        """Count and log ``fault``; answer it now if it is an error (raises APIError) or a crash."""
        self._count(fault.kind)
        logger.info("fault %s injected: model=%s request_id=%s", fault.kind, self.model, request_id)
        if fault.kind == "crash":
            self._crash(f"crash fault injected: model={self.model} request_id={request_id}")
        error = _ERRORS.get(fault.kind)
        if error is not None:
            raise error(self.model)


# The errors, answered before anything is queued. Texts: vLLM's where vLLM has one, else llm-d's
# inference simulator's (rate_limit, bad_request), which gateway tests already match on.
_ERRORS: dict[str, Callable[[str], APIError]] = {
    "rate_limit": lambda model: APIError(
        429,
        f"Rate limit reached for {model} in organization org-xxx on requests per min (RPM): "
        "Limit 3, Used 3, Requested 1.",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    ),
    # vLLM's EngineDeadError text (500 InternalServerError).
    "server_error": lambda model: APIError(500, "The server had an error while processing your request."),
    # vLLM's QueueOverflowError text (503), with Retry-After as llmsim's own 503s.
    "unavailable": lambda model: APIError(
        503,
        "The engine is currently busy and cannot accept new requests. "
        "Please try again later or on a different instance.",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    ),
    "bad_request": lambda model: APIError(400, "Invalid request: missing required parameter 'model'.", param="model"),
}
