"""The floor of a step's release: one chunk sent to each of N loopback connections, back to back.

A step releases one token to every stream of its batch at the same deadline, and one process
writes them one after another: a token's lag is at least the time the sends before it in the
pass took. This measures that time with nothing else in the way: N TCP connections on loopback
(``TCP_NODELAY``, as uvicorn sets it), read by a plain epoll reader pinned to the client's core;
every ``--interval`` seconds (llmsim's simulated step) a pass sends one chunk of llmsim's size
(floor_server.py's) to each connection with ``socket.send``, the order rotated by one each pass
as llmsim's is, and notes when each send started, from the pass's start. Those offsets are the
lag a server would show if it woke exactly at the deadline and did nothing per token but the
send; their p50 and p99 are printed as JSON, with the mean cost of one send.

What a send costs here is the kernel's: the TCP stack runs the receiving side of loopback in the
sender's own system call (≈ 5–15 µs on this VM, varying with the hour). bench_live_timing.py runs
this in the same rounds as llmsim and the bare uvicorn floor, pinned to the server's core.

    taskset -c 0 python bench/send_floor.py --connections 128 --interval 0.0108 --seconds 4
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.floor_server import CHUNK

#: One chunk of llmsim's chunked body, framed as uvicorn frames it (ChunkWriter.frame).
FRAMED = b"%x\r\n%b\r\n" % (len(CHUNK), CHUNK)


def read_all(port: int, connections: int) -> int:
    """The reader: opens the connections, then reads whatever arrives until the sender closes them; the bytes read."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    poller = select.epoll()
    for s in socks:
        s.setblocking(False)
        poller.register(s.fileno(), select.EPOLLIN)
    open_fds = {s.fileno() for s in socks}
    received = 0
    while open_fds:
        for fd, _ in poller.poll():
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not data:
                poller.unregister(fd)
                open_fds.discard(fd)
            received += len(data)
    return received


def send_passes(connections: int, interval: float, seconds: float, client_core: str) -> dict[str, float]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(connections)
    port = listener.getsockname()[1]
    reader = subprocess.Popen(
        ["taskset", "-c", client_core, sys.executable, __file__, "--read", str(port), f"--connections={connections}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    conns = []
    for _ in range(connections):
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setblocking(False)
        conns.append(conn)
    listener.close()
    offsets: list[float] = []
    passes: list[float] = []
    clock = time.perf_counter
    begin = clock()
    blocked = 0
    try:
        for rotation in range(max(1, round(seconds / interval))):
            delay = begin + (rotation + 1) * interval - clock()
            if delay > 0:
                time.sleep(delay)
            first = rotation % connections
            start = clock()
            for conn in conns[first:] + conns[:first]:
                offsets.append(clock() - start)
                try:
                    conn.send(FRAMED)
                except BlockingIOError:
                    blocked += 1  # the reader fell a socket buffer behind: reported, not the case measured
            passes.append(clock() - start)
    finally:
        for conn in conns:
            conn.close()
        received, _ = reader.communicate(timeout=30)
    offsets.sort()
    return {
        "connections": connections,
        "passes": len(passes),
        "send_us": statistics.fmean(passes) / connections * 1e6,
        "lag_p50_ms": offsets[len(offsets) // 2] * 1e3,
        "lag_p99_ms": offsets[int(len(offsets) * 0.99)] * 1e3,
        "sends_refused": blocked,
        "bytes_sent": (len(offsets) - blocked) * len(FRAMED),
        "bytes_received": int(received),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--interval", type=float, default=0.008, help="seconds between passes (the simulated step)")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--client-core", default="1")
    p.add_argument("--read", type=int, help=argparse.SUPPRESS)  # internal: be the reader of this port
    args = p.parse_args()
    if args.read is not None:
        print(read_all(args.read, args.connections))
        return
    print(json.dumps(send_passes(args.connections, args.interval, args.seconds, args.client_core)))


if __name__ == "__main__":
    main()
