"""uvicorn's server, with the simulator's drain at the start of its shutdown."""

from __future__ import annotations

import asyncio
import socket
from types import FrameType

import uvicorn

from llmsim.api.lifecycle import Lifecycle


class DrainingServer(uvicorn.Server):
    """uvicorn, whose shutdown (SIGTERM, SIGINT) drains the simulator first.

    Stop accepting (listeners closed, idle keep-alive connections closed, the others closed after
    their response), give running requests ``grace`` seconds, abort the rest (each stream ends with
    a final chunk, finish reason ``abort``), then uvicorn's own shutdown: wait for the last writes,
    stop the engines.
    """

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle, grace: float) -> None:
        super().__init__(config)
        self._lifecycle = lifecycle
        self._grace = grace
        # The other servers of this process (one per data-parallel rank): they stop together.
        self.siblings: list[DrainingServer] = []

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # NOTE: each server installs its handler in turn and only the last one's runs; it stops
        # them all (each re-raises what it caught as it exits, as uvicorn does).
        super().handle_exit(sig, frame)
        for sibling in self.siblings:
            sibling.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # NOTE: what uvicorn's shutdown starts with; doing it again there is harmless.
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        await self._lifecycle.drain(self._grace)
        await super().shutdown(sockets)


def run_servers(servers: list[DrainingServer]) -> None:
    """Serve every server on one event loop (one per data-parallel rank's port); a signal stops them all."""
    if len(servers) == 1:
        servers[0].run()
        return
    for server in servers:
        server.siblings = [s for s in servers if s is not server]

    async def serve_all() -> None:
        await asyncio.gather(*(server.serve() for server in servers))

    # uvicorn's own run(), for several servers: its loop factory (uvloop), then asyncio.run.
    runner = asyncio.Runner(loop_factory=servers[0].config.get_loop_factory())
    with runner:
        runner.run(serve_all())
