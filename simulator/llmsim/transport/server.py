"""Which HTTP protocol uvicorn runs: llmsim's (the fast path) or uvicorn's own (the plain ASGI path).

The fast path rests on uvicorn's private internals (:mod:`.http_protocol` subclasses
``HttpToolsProtocol``; :mod:`.chunk_writer` reads its request-response cycle). pyproject.toml pins
uvicorn to the tested range. With the fast path off (``LLMSIM_FAST_PATH=0``, ``llmsim serve
--no-fast-path``) uvicorn's own httptools protocol serves, with only the connection limits added
(:mod:`.connection_guard`): no arrival stamp at the first byte (LlmsimApp stamps on entry), no
parse deferred past a release, every chunk through ASGI ``send``. Should the internals move
anyway (the import fails), uvicorn's protocol serves bare, limits off, with a warning. The tests
run the streaming suites with the fast path on and off.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping

from llmsim.engine.release_gate import ReleaseGate
from llmsim.transport.arrival_watch import ArrivalWatch
from llmsim.transport.limits import ConnectionLimits

logger = logging.getLogger(__name__)

#: The environment variable that turns the fast path off ("0", "false", "no" or "off").
FAST_PATH_ENV = "LLMSIM_FAST_PATH"
#: uvicorn's own protocol, by its ``http`` setting's name.
PLAIN_PROTOCOL = "httptools"


def fast_path_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether :data:`FAST_PATH_ENV` leaves the fast path on (the default)."""
    return environ.get(FAST_PATH_ENV, "1").strip().lower() not in {"0", "false", "no", "off"}


def http_setting(
    watch: ArrivalWatch | None,
    gate: ReleaseGate | None,
    *,
    fast_path: bool = True,
    limits: ConnectionLimits | None = None,
) -> type[asyncio.Protocol] | str:
    """uvicorn's ``http`` setting: llmsim's protocol (stamps helped by ``watch``, parses of new
    requests deferred past ``gate``'s releases), or with ``fast_path`` off uvicorn's own; both
    enforcing ``limits``. :data:`PLAIN_PROTOCOL` when this uvicorn lacks the internals they extend."""
    limits = limits or ConnectionLimits()
    try:
        from llmsim.transport.connection_guard import guarded_protocol
        from llmsim.transport.http_protocol import stamping_protocol
    except ImportError as exc:  # uvicorn moved HttpToolsProtocol: serve on its own protocol
        logger.warning(
            "uvicorn's httptools protocol is not where llmsim expects it (%s): fast path and connection limits off", exc
        )
        return PLAIN_PROTOCOL
    if not fast_path:
        return guarded_protocol(limits)
    return stamping_protocol(watch, gate, limits)
