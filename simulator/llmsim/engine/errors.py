"""Errors engines raise to the API (which maps them to HTTP statuses)."""

from __future__ import annotations


class EngineError(Exception):
    """Base of the errors an engine raises to the API."""


class EngineOverloaded(EngineError):
    """The engine's waiting queue is full: refuse the request (HTTP 503), as vLLM does past its queue limit."""

    def __init__(self, num_waiting: int, limit: int) -> None:
        self.num_waiting = num_waiting
        self.limit = limit
        super().__init__(f"server overloaded: {num_waiting} requests waiting (limit {limit}); retry later")


class EngineStopped(EngineError):
    """The engine no longer serves: stopped for shutdown, or its step loop failed."""


class RequestFailed(EngineError):
    """The engine ended a request with finish reason ``error`` (a KV pull that failed under vLLM's
    ``kv_load_failure_policy: fail``): vLLM's API answers 500 "Internal server error"."""


class RequestAborted(EngineError):
    """The engine ended a request before its last token (shutdown, sleep, abort): its stream raises this.

    The API ends the response with finish reason ``abort``, as vLLM does for a request its engine aborts.
    """
