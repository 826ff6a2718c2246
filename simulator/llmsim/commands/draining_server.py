"""uvicorn's server, with the simulator's drain at the start of its shutdown."""

from __future__ import annotations

import socket

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

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # NOTE: what uvicorn's shutdown starts with; doing it again there is harmless.
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        await self._lifecycle.drain(self._grace)
        await super().shutdown(sockets)
