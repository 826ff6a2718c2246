"""``llmsim serve`` in a child process on a free loopback port, for experiments (the client reaches it over HTTP only)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class ServerProcess:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1.0) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def serve(config: Path, log_path: Path, *, startup_timeout: float = 30.0) -> Iterator[ServerProcess]:
    """Start ``llmsim serve --config config``, wait for /health, stop it (SIGTERM, then SIGKILL) on exit."""
    port = free_port()
    args = [sys.executable, "-m", "llmsim.cli", "serve", "--config", str(config)]
    args += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    server = ServerProcess(proc, port, log_path)
    try:
        deadline = time.monotonic() + startup_timeout
        while not _healthy(server.url):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"llmsim serve exited with {proc.returncode}: {log_path.read_text(errors='replace')}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"llmsim serve not healthy after {startup_timeout} s (log: {log_path})")
            time.sleep(0.05)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
