"""The ZMQ PUB side of KV-cache events, as vLLM's ``ZmqEventPublisher`` sends them.

An endpoint containing ``*`` or ``::``, or an ``ipc://``/``inproc://`` one, is bound (routers dial
in: llm-d's pod discovery dials ``tcp://<pod-ip>:5557``); any other is connected to (a central
indexer's bound SUB). Several models of one process may share an endpoint: one socket, each model
its own topic and its own sequence numbers.

NOTE: vLLM hands batches to a publisher thread through a queue; here they are sent from the
event loop, non-blocking: a PUB socket never waits for subscribers, and past the high-water mark
ZMQ drops messages (as vLLM's would, after its queue). vLLM's optional replay socket
(``replay_endpoint``) is not offered: subscribers see a gap in sequence numbers, as they do when
vLLM's replay buffer no longer holds the batch.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Callable

import zmq

from llmsim.kv_events.wire import EventFormat, encode_batch
from llmsim.types import RequestStats, StepStats

__all__ = ["KVEventStream", "ZmqPublisher", "binds", "offset_endpoint_port"]

logger = logging.getLogger(__name__)


def binds(endpoint: str) -> bool:
    """vLLM's rule: bind when the endpoint names no peer (``*``, ``::``, ipc, inproc), else connect."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def offset_endpoint_port(endpoint: str, data_parallel_rank: int) -> str:
    """vLLM's per-rank endpoint: a tcp port moved up by the rank, an ipc/inproc name suffixed ``_dp<rank>``.

    As ``ZmqEventPublisher.offset_endpoint_port``: rank 0 keeps the endpoint as given. Raises
    ValueError for an endpoint without a port to move (vLLM's "Invalid endpoint").
    """
    if data_parallel_rank == 0:
        return endpoint
    if "inproc" in endpoint or endpoint.startswith("ipc://"):
        return f"{endpoint}_dp{data_parallel_rank}"
    if "tcp" in endpoint and ":" in endpoint:
        base, _, port = endpoint.rpartition(":")
        if port.isdigit():
            moved = int(port) + data_parallel_rank
            if moved > 65_535:
                raise ValueError(f"KV event endpoint port exceeds 65535 for rank {data_parallel_rank}")
            return f"{base}:{moved}"
    raise ValueError(f"cannot give data-parallel rank {data_parallel_rank} its own endpoint: {endpoint!r} has no port")


class ZmqPublisher:
    """One PUB socket on one endpoint.

    Parameters
    ----------
    endpoint:
        ZMQ endpoint, e.g. ``tcp://*:5557`` (bound) or ``tcp://indexer:5557`` (connected).
    hwm:
        Send high-water mark (messages queued per subscriber before ZMQ drops).
    context:
        A ZMQ context (default: the process-wide one).
    """

    def __init__(
        self, endpoint: str, *, hwm: int = 100_000, context: zmq.Context[zmq.Socket[bytes]] | None = None
    ) -> None:
        self.endpoint = endpoint
        ctx = context or zmq.Context.instance()
        self._socket: zmq.Socket[bytes] = ctx.socket(zmq.PUB)
        self._socket.setsockopt(zmq.SNDHWM, hwm)
        # Never let close() wait for unsent messages: shutdown must not hang on a slow peer.
        self._socket.setsockopt(zmq.LINGER, 0)
        try:
            if binds(endpoint):
                self._socket.bind(endpoint)
            else:
                self._socket.connect(endpoint)
        except zmq.ZMQError as exc:
            self._socket.close()
            raise OSError(f"KV events: cannot {'bind' if binds(endpoint) else 'connect'} {endpoint}: {exc}") from None
        self.dropped = 0

    @property
    def last_endpoint(self) -> str:
        """The endpoint actually bound (with the port chosen for ``tcp://*:*``)."""
        value = self._socket.getsockopt(zmq.LAST_ENDPOINT)
        assert isinstance(value, bytes)
        return value.decode()

    def send(self, topic: bytes, seq: int, payload: bytes) -> None:
        try:
            self._socket.send_multipart((topic, seq.to_bytes(8, "big"), payload), flags=zmq.NOBLOCK)
        except zmq.Again:
            self.dropped += 1

    def close(self) -> None:
        self._socket.close()


class KVEventStream:
    """One model's events on a publisher: an engine observer that sends each step's events as one batch.

    Parameters
    ----------
    publisher:
        The socket (shared by the models publishing on one endpoint).
    topic:
        The model's topic; ``{model}`` and ``{pod_ip}`` (environment ``POD_IP``) are filled in.
    model:
        Served model name, for the topic.
    event_format:
        ``"map"`` (vLLM now) or ``"array"`` (vLLM up to 0.23); see :mod:`.wire`.
    wall_clock:
        Timestamp source for batches (vLLM stamps ``time.time()`` when it publishes).
    data_parallel_rank:
        The engine's rank (global), the batch's third field.
    """

    def __init__(
        self,
        publisher: ZmqPublisher,
        topic: str,
        *,
        model: str,
        event_format: EventFormat = "map",
        wall_clock: Callable[[], float] = time.time,
        data_parallel_rank: int = 0,
    ) -> None:
        self.data_parallel_rank = data_parallel_rank
        self.publisher = publisher
        self.topic = topic.replace("{model}", model).replace("{pod_ip}", os.environ.get("POD_IP", "127.0.0.1"))
        self._topic = self.topic.encode()
        self._format: EventFormat = event_format
        self._seq = itertools.count()
        self._clock = wall_clock

    def on_step(self, stats: StepStats) -> None:
        events = stats.kv_events
        if not events:
            return  # vLLM publishes a batch only for a step that produced events
        payload = encode_batch(
            events, self._clock(), event_format=self._format, data_parallel_rank=self.data_parallel_rank
        )
        self.publisher.send(self._topic, next(self._seq), payload)

    def on_first_token(self, ttft: float) -> None:
        pass

    def on_request_finished(self, stats: RequestStats) -> None:
        pass
