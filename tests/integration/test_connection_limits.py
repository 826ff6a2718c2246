"""What one connection may hold of a real server: header bytes, time to send its request, a descriptor.

Each on both transports (the fast path and the plain one), with a short request timeout (0.5 s):
the tests check that the close happens, never how fast.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server import TRANSPORTS, ServerProcess, running_server

pytestmark = pytest.mark.integration

MAX_HEADER_BYTES = 16 * 1024
MAX_CONNECTIONS = 8
FLAGS = [
    "--max-header-bytes",
    str(MAX_HEADER_BYTES),
    "--request-timeout",
    "0.5",
    "--max-connections",
    str(MAX_CONNECTIONS),
]
# Longer than any close the tests wait for may take on a loaded machine: a bound that keeps a
# broken server from hanging the suite, not a latency goal.
PATIENCE_S = 20.0


@pytest.fixture(scope="module", params=sorted(TRANSPORTS))
def server(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("limits"), extra_args=FLAGS, env=TRANSPORTS[request.param]) as s:
        yield s


def connect(server: ServerProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE_S)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout here fails the test)."""
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk


def test_headers_over_the_limit_get_431_and_a_close(server: ServerProcess) -> None:
    with connect(server) as sock:
        head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEADER_BYTES + 1) + b"\r\n\r\n"
        # Closed while we may still be sending: what the limit is for.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head)
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 ")


def test_a_header_that_never_ends_is_cut_off_at_the_limit(server: ServerProcess) -> None:
    # The 256 MiB header of the report, sent a slice at a time: the server closes long before the end.
    sent = 0
    cut_off = False
    with connect(server) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ")
        while sent < 256 * 2**20:
            try:
                sock.sendall(b"a" * 65536)
            except (BrokenPipeError, ConnectionResetError):
                cut_off = True
                break
            sent += 65536
    assert cut_off


def test_headers_within_the_limit_are_served(server: ServerProcess) -> None:
    r = httpx.get(server.base_url + "/health", headers={"x-big": "a" * (MAX_HEADER_BYTES // 2)}, timeout=PATIENCE_S)
    assert r.status_code == 200


def test_a_slowloris_is_closed_after_the_request_timeout(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        deadline = time.monotonic() + PATIENCE_S
        closed = False
        sock.settimeout(0.1)
        while time.monotonic() < deadline:
            try:
                sock.sendall(b"X-Slow: 1\r\n")  # one header line at a time, never the blank line
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                closed = True
                break
            assert data.startswith(b"HTTP/1.1 408 ") or data == b""
            closed = True
            break
    assert closed


def test_a_connection_that_sends_nothing_is_closed_without_a_word(server: ServerProcess) -> None:
    # As an idle keep-alive connection is: no answer to a request that never came.
    with connect(server) as sock:
        assert read_until_closed(sock) == b""


def test_a_body_that_never_arrives_ends_the_connection(server: ServerProcess) -> None:
    with connect(server) as sock:
        head = (
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 1000\r\n\r\n"
        )
        sock.sendall(head + b'{"model": "instant-model", ')  # and no more
        answer = read_until_closed(sock)
    assert not answer.startswith(b"HTTP/1.1 200 ")


def test_a_connection_over_the_cap_gets_503_and_the_others_are_served(server: ServerProcess) -> None:
    held: list[socket.socket] = []
    try:
        # Connections the server has answered once (counted, kept alive for uvicorn's 5 s),
        # opened until one is refused: the cap less whatever the other tests left open.
        refused = b""
        for _ in range(MAX_CONNECTIONS + 1):
            sock = connect(server)
            held.append(sock)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = sock.recv(65536)
            if not answer.startswith(b"HTTP/1.1 200 "):
                refused = answer + read_until_closed(sock)
                break
        assert refused.startswith(b"HTTP/1.1 503 ")
        assert len(held) <= MAX_CONNECTIONS + 1
        # A connection already open is still served.
        held[0].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert held[0].recv(65536).startswith(b"HTTP/1.1 200 ")
    finally:
        for sock in held:
            sock.close()
    # Once they are gone, new connections are served again.
    deadline = time.monotonic() + PATIENCE_S
    while httpx.get(server.base_url + "/health", timeout=PATIENCE_S).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_idle_connections_past_the_descriptor_limit_are_refused_then_closed(tmp_path: Path) -> None:
    """The report's case: more idle connections than ``ulimit -n`` allows. Those past the cap (the
    limit less what the server keeps for itself) get 503 at once, the rest are closed at the
    request timeout, and /health answers again."""
    soft = 256
    idle: list[socket.socket] = []
    with running_server(tmp_path, extra_args=["--request-timeout", "0.5"], open_files=soft) as srv:
        try:
            for _ in range(soft + 44):
                idle.append(connect(srv))
            answers = [read_until_closed(sock)[:13] for sock in idle]
        finally:
            for sock in idle:
                sock.close()
        # Past the cap a clear refusal; the others closed once idle for the timeout.
        assert set(answers) == {b"HTTP/1.1 503 ", b""}
        assert httpx.get(srv.base_url + "/health", timeout=PATIENCE_S).status_code == 200
