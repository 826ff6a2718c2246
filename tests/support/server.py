"""Start the real server (``llmsim serve``: uvicorn, uvloop, httptools) on a free loopback port."""

from __future__ import annotations

import os
import resource
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx

#: The server's environment for each way a token can leave (docs/transport.md): llmsim's fast path,
#: and the plain ASGI path it falls back to (uvicorn's own protocol, every chunk through ``send``).
#: Streaming suites run on both (a parametrized fixture), so the fallback never rots.
TRANSPORTS: dict[str, dict[str, str]] = {"fast": {}, "plain": {"LLMSIM_FAST_PATH": "0"}}


def _limit_open_files(soft: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s: a test never leaves a server behind."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    #: "https" when the server was started with a TLS certificate.
    scheme: str = "http"

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def running_server(
    tmp_path: Path,
    *,
    config: str | None = None,
    responses: str | None = None,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    startup_timeout: float = 30.0,
    ready_path: str = "/health",
    open_files: int | None = None,
    trust: ssl.SSLContext | None = None,
    port: int | None = None,
) -> Iterator[ServerProcess]:
    """Write the given YAML texts to files, start ``llmsim serve`` and wait for ``ready_path`` to answer 200.

    ``open_files``: the server's soft open-file limit (``ulimit -n``), when not inherited.
    ``trust``: the server speaks TLS (``extra_args`` give its certificate); probe it trusting this.
    ``port``: the port to serve on (default: a free one).
    """
    args = [sys.executable, "-m", "llmsim.cli", "serve", "--host", "127.0.0.1"]
    if config is not None:
        path = tmp_path / "models.yml"
        path.write_text(config)
        args += ["--config", str(path)]
    if responses is not None:
        path = tmp_path / "responses.yml"
        path.write_text(responses)
        args += ["--responses", str(path)]
    port = port or free_port()
    args += ["--port", str(port), "--log-level", "warning", *extra_args]
    log_path = tmp_path / f"server-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            preexec_fn=None if open_files is None else partial(_limit_open_files, open_files),
        )
    server = ServerProcess(proc, port, log_path, "http" if trust is None else "https")
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llmsim serve exited with {proc.returncode}:\n{server.log()}")
            try:
                if httpx.get(server.base_url + ready_path, timeout=1.0, verify=trust or True).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llmsim serve not healthy after {startup_timeout}s:\n{server.log()}")
            time.sleep(0.05)
        yield server
    finally:
        stop_process(proc)
