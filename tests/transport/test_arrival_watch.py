"""ArrivalWatch over real sockets, and llmsim serve's protocol stamping a request that came in while
the event loop was held at the poll that saw it (a real uvicorn server, a real client socket)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from llmsim.transport.arrival_watch import ARRIVAL_KEY, ArrivalWatch
from llmsim.transport.http_protocol import stamping_protocol

pytestmark = pytest.mark.skipif(not hasattr(__import__("select"), "epoll"), reason="epoll is Linux's")


@contextlib.contextmanager
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_bytes_on_a_watched_connection_are_noted_at_the_first_poll_after_them() -> None:
    watch = ArrivalWatch()
    owner = object()
    with pair() as (server, client):
        watch.watch(server.fileno(), owner)
        watch.poll()  # nothing yet
        before = time.monotonic()
        client.sendall(b"GET / HTTP/1.1\r\n")
        watch.poll()
        after = time.monotonic()
        time.sleep(0.002)
        watch.poll()  # still unread: the first poll's time stays
        seen = watch.taken(server.fileno(), owner)
        assert seen is not None
        assert before <= seen <= after


def test_nothing_is_noted_without_bytes_or_without_a_poll() -> None:
    watch = ArrivalWatch()
    owner = object()
    with pair() as (server, client):
        watch.watch(server.fileno(), owner)
        watch.poll()
        assert watch.taken(server.fileno(), owner) is None
        watch.watch(server.fileno(), owner)
        client.sendall(b"x")
        assert watch.taken(server.fileno(), owner) is None  # came in, but no poll ran


def test_a_connection_taken_is_not_watched_until_it_is_idle_again() -> None:
    watch = ArrivalWatch()
    owner = object()
    with pair() as (server, client):
        fd = server.fileno()
        watch.watch(fd, owner)
        assert watch.taken(fd, owner) is None
        client.sendall(b"x")  # bytes of a request in progress (its body), not an arrival
        watch.poll()
        assert watch.taken(fd, owner) is None
        server.recv(16)
        watch.watch(fd, owner)  # its response is complete: idle again
        client.sendall(b"y")
        watch.poll()
        assert watch.taken(fd, owner) is not None


def test_only_the_connection_that_registered_a_socket_takes_its_note() -> None:
    # A closed connection's fd number is reused by the next socket: the old connection's late
    # calls must neither take nor drop the new one's note.
    watch = ArrivalWatch()
    old, new = object(), object()
    with pair() as (server, client):
        fd = server.fileno()
        watch.watch(fd, new)
        client.sendall(b"x")
        watch.poll()
        assert watch.taken(fd, old) is None
        assert watch.taken(fd, new) is not None


def test_a_socket_closed_while_watched_is_forgotten_quietly() -> None:
    watch = ArrivalWatch()
    owner = object()
    server, client = socket.socketpair()
    fd = server.fileno()
    watch.watch(fd, owner)
    client.sendall(b"x")
    server.close()  # the kernel drops it from the epoll set
    watch.poll()
    assert watch.taken(fd, owner) is None
    client.close()


# -- through uvicorn --------------------------------------------------------------------------


class StampApp:
    """An ASGI app answering 200 and keeping each request's arrival stamp."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.stamps.append(scope[ARRIVAL_KEY])
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


REQUEST = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"
HOLD_S = 0.05


def read_response(sock: socket.socket) -> None:
    data = b""
    while not data.endswith(b"ok"):
        chunk = sock.recv(4096)
        assert chunk, "the server closed the connection"
        data += chunk


def send_and_read(sock: socket.socket) -> None:
    sock.sendall(REQUEST)
    read_response(sock)


@pytest.mark.parametrize("polled", [True, False])
async def test_a_request_that_came_in_while_the_loop_was_held_is_stamped_at_the_poll_that_saw_it(
    polled: bool,
) -> None:
    watch = ArrivalWatch()
    app = StampApp()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, loop="asyncio", http=stamping_protocol(watch), log_level="warning"
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    try:
        # A first request makes the connection a kept-alive, idle one.
        await asyncio.to_thread(send_and_read, client)
        sent = threading.Event()
        times: dict[str, float] = {}

        def send() -> None:
            times["send"] = time.monotonic()
            client.sendall(REQUEST)
            sent.set()

        def hold_the_loop() -> None:
            # What a step loop's pass does to the event loop: nothing is read while it runs.
            threading.Thread(target=send).start()
            assert sent.wait(5)
            time.sleep(HOLD_S / 2)
            if polled:
                watch.poll()
            times["polled"] = time.monotonic()
            time.sleep(HOLD_S / 2)
            times["released"] = time.monotonic()

        asyncio.get_running_loop().call_soon(hold_the_loop)
        await asyncio.to_thread(read_response, client)
        stamp = app.stamps[-1]
        if polled:
            # At the poll, half a hold before the loop could read the request.
            assert times["send"] <= stamp <= times["polled"]
        else:
            assert stamp >= times["released"]
    finally:
        client.close()
        server.should_exit = True
        await serving
