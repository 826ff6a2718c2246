"""Which HTTP protocol uvicorn runs: llmsim's (the fast path) or uvicorn's own (the plain ASGI path).

The fast path rests on uvicorn's private internals (:mod:`.http_protocol` subclasses
``HttpToolsProtocol``; :mod:`.chunk_writer` reads its request-response cycle). pyproject.toml pins
uvicorn to the tested range; should the internals move anyway, or should the fast path be turned
off (``LLMSIM_FAST_PATH=0``, ``llmsim serve --no-fast-path``), uvicorn's own httptools protocol
serves: no arrival stamp at the first byte (LlmsimApp stamps on entry), no parse deferred past a
release, every chunk through ASGI ``send``. The tests run the streaming suite both ways.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping

from llmsim.engine.release_gate import ReleaseGate
from llmsim.transport.arrival_watch import ArrivalWatch

logger = logging.getLogger(__name__)

#: The environment variable that turns the fast path off ("0", "false", "no" or "off").
FAST_PATH_ENV = "LLMSIM_FAST_PATH"
#: uvicorn's own protocol, by its ``http`` setting's name.
PLAIN_PROTOCOL = "httptools"


def fast_path_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether :data:`FAST_PATH_ENV` leaves the fast path on (the default)."""
    return environ.get(FAST_PATH_ENV, "1").strip().lower() not in {"0", "false", "no", "off"}


def http_setting(
    watch: ArrivalWatch | None, gate: ReleaseGate | None, *, fast_path: bool = True
) -> type[asyncio.Protocol] | str:
    """uvicorn's ``http`` setting: llmsim's protocol (stamps helped by ``watch``, parses of new
    requests deferred past ``gate``'s releases), or :data:`PLAIN_PROTOCOL` when ``fast_path`` is
    off or this uvicorn lacks the internals it subclasses."""
    if not fast_path:
        return PLAIN_PROTOCOL
    try:
        from llmsim.transport.http_protocol import stamping_protocol
    except ImportError as exc:  # uvicorn moved HttpToolsProtocol: serve on its own protocol
        logger.warning("uvicorn's httptools protocol is not where llmsim expects it (%s): fast path off", exc)
        return PLAIN_PROTOCOL
    return stamping_protocol(watch, gate)
