"""llmsim's side channel: newline-delimited JSON over TCP.

A prefill replica listens on ``side_channel_port`` (+ its data-parallel rank) of
``side_channel_host``, the address its prefill answers name in ``kv_transfer_params``
(``remote_host``, ``remote_port``). A decode replica connects and sends one JSON object per line;
each gets one line back::

    -> {"op": "check", "engine_id": "<remote_engine_id>", "request_id": "<remote_request_id>"}
    <- {"ok": true, "num_blocks": 12}            # held: the pull may go on
    <- {"ok": false, "reason": "unknown engine"}  # another process (restarted): a failed pull
    <- {"ok": false, "reason": "not held"}        # unknown request, or freed at the timeout
    -> {"op": "release", "engine_id": "...", "request_id": "..."}
    <- {"ok": true}                              # freed now (false: was not held)
    -> {"op": "check", "engine_id": "", "request_id": "bootstrap_room:42", "wait_s": 300}

``engine_id`` "": whichever registered engine holds the request (SGLang's legs name no engine).
``wait_s``: a check that finds nothing held looks again until then (SGLang sends both legs at
once, so the decode leg's check may come before its prefill holds the blocks).

A malformed line gets ``{"ok": false, "reason": "bad request"}``. A connection carries any number
of calls, one at a time; the decode side keeps a few open per prefill replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from llmsim.engine import Engine
from llmsim.types import RemotePrefill

logger = logging.getLogger("llmsim.kv_transfer")

#: Longest line either side reads (a request id is at most a few hundred bytes).
MAX_LINE = 64 * 1024
#: A waiting check looks for its request this often, and waits at most this long.
WAIT_POLL_S = 0.002
MAX_WAIT_S = 600.0


class SideChannelServer:
    """The prefill side: answers checks and releases for the engines registered under their ids."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._engines: dict[str, Engine] = {}
        # Searched for requests that name no engine: the registered ones and the server's other ranks.
        self._unnamed: list[Engine] = []
        self._server: asyncio.Server | None = None
        # Open connections' handlers (decode replicas keep theirs open): ended on stop.
        self._handlers: set[asyncio.Task[None]] = set()

    def register(self, engine_id: str, engine: Engine) -> None:
        self._engines[engine_id] = engine
        self.register_unnamed(engine)

    def register_unnamed(self, engine: Engine) -> None:
        """Answer for ``engine`` only when a request names no engine: an SGLang prefill server has
        one bootstrap port whichever data-parallel rank served the leg."""
        if all(e is not engine for e in self._unnamed):
            self._unnamed.append(engine)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_LINE)
        logger.info("KV side channel listening on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            handlers = list(self._handlers)
            for handler in handlers:
                handler.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            with contextlib.suppress(Exception):
                await server.wait_closed()

    def answer(self, message: Any) -> dict[str, Any]:
        """One request's answer (the protocol in the module docstring), without waiting."""
        if not isinstance(message, dict):
            return {"ok": False, "reason": "bad request"}
        op, engine_id, request_id = message.get("op"), message.get("engine_id"), message.get("request_id")
        if op not in ("check", "release") or not isinstance(engine_id, str) or not isinstance(request_id, str):
            return {"ok": False, "reason": "bad request"}
        if engine_id:
            engine = self._engines.get(engine_id)
            if engine is None:
                return {"ok": False, "reason": "unknown engine"}
        else:
            # SGLang's legs name no engine: the one holding the request, if any.
            engine = next((e for e in self._unnamed if e.held_blocks(request_id) is not None), None)
            if engine is None:
                return {"ok": False, "reason": "not held"}
        if op == "release":
            return {"ok": engine.release_held(request_id)}
        blocks = engine.held_blocks(request_id)
        if blocks is None:
            return {"ok": False, "reason": "not held"}
        return {"ok": True, "num_blocks": len(blocks)}

    async def answer_waiting(self, message: Any) -> dict[str, Any]:
        """:meth:`answer`; a check with ``wait_s`` > 0 that finds nothing held looks again every
        :data:`WAIT_POLL_S` until then (SGLang's decode leg waiting for its room's prefill)."""
        answer = self.answer(message)
        wait = message.get("wait_s") if isinstance(message, dict) and message.get("op") == "check" else None
        if answer["ok"] or answer.get("reason") != "not held" or not isinstance(wait, (int, float)) or wait <= 0:
            return answer
        deadline = asyncio.get_running_loop().time() + min(float(wait), MAX_WAIT_S)
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(WAIT_POLL_S)
            answer = self.answer(message)
            if answer["ok"] or answer.get("reason") != "not held":
                break
        return answer

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            while line := await reader.readline():
                try:
                    message = json.loads(line)
                except ValueError:
                    message = None
                writer.write(json.dumps(await self.answer_waiting(message)).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            if task is not None:
                self._handlers.discard(task)
            writer.close()


class SideChannelPeer:
    """The decode side (an :class:`~llmsim.engine.KVPeer`): calls bounded in time, over connections
    kept open per prefill replica (a connect and a close per call cost the decode replica more CPU
    than the rest of a request's hand-off: bench/bench_pd_token_path.py)."""

    def __init__(self, timeout_s: float = 5.0, max_idle_per_replica: int = 8) -> None:
        self.timeout_s = timeout_s
        self.max_idle_per_replica = max_idle_per_replica
        # Open connections not in use, by (host, port); one call at a time on each.
        self._idle: dict[tuple[str, int], list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}

    async def _call(self, remote: RemotePrefill, op: str) -> dict[str, Any]:
        fields: dict[str, Any] = {"op": op, "engine_id": remote.engine_id, "request_id": remote.request_id}
        if op == "check" and remote.wait_s > 0:
            fields["wait_s"] = remote.wait_s
        message = json.dumps(fields).encode()
        key = (remote.host, remote.port)
        idle = self._idle.setdefault(key, [])
        while idle:
            reader, writer = idle.pop()
            if writer.is_closing() or reader.at_eof():
                writer.close()
                continue
            try:
                line = await self._exchange(reader, writer, message, remote.wait_s)
            except (OSError, TimeoutError, asyncio.IncompleteReadError):
                writer.close()
                continue  # the replica closed it meanwhile (restarted): another, or a new one
            return self._keep(key, reader, writer, line)
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(remote.host, remote.port, limit=MAX_LINE), self.timeout_s
        )
        try:
            line = await self._exchange(reader, writer, message, remote.wait_s)
        except BaseException:
            writer.close()
            raise
        return self._keep(key, reader, writer, line)

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, message: bytes, wait_s: float = 0.0
    ) -> bytes:
        writer.write(message + b"\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), self.timeout_s + wait_s)
        if not line:
            raise asyncio.IncompleteReadError(b"", None)
        return line

    def _keep(
        self, key: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: bytes
    ) -> dict[str, Any]:
        idle = self._idle[key]
        if len(idle) < self.max_idle_per_replica:
            idle.append((reader, writer))
        else:
            writer.close()
        answer = json.loads(line)
        return answer if isinstance(answer, dict) else {}

    async def close(self) -> None:
        """Close every kept connection."""
        for idle in self._idle.values():
            for _, writer in idle:
                writer.close()
        self._idle.clear()

    async def check(self, remote: RemotePrefill) -> bool:
        try:
            answer = await self._call(remote, "check")
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
            logger.warning(
                "KV side channel %s:%d unreachable for request %s: %s", remote.host, remote.port, remote.request_id, exc
            )
            return False
        if not answer.get("ok"):
            logger.warning(
                "prefill replica %s:%d cannot serve request %s: %s",
                remote.host,
                remote.port,
                remote.request_id,
                answer.get("reason", "no answer"),
            )
            return False
        return True

    async def release(self, remote: RemotePrefill) -> None:
        try:
            await self._call(remote, "release")
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
            # It frees them at its abort timeout anyway.
            logger.warning(
                "KV side channel %s:%d: release of %s failed: %s", remote.host, remote.port, remote.request_id, exc
            )
