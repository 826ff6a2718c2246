"""Start the real server (``llmsim serve``: uvicorn, uvloop, httptools) on a free loopback port."""

from __future__ import annotations

import os
import resource
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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
    scheme = "http" if trust is None else "https"
    probe = f"{scheme}://127.0.0.1:{port}{ready_path}"
    with running_process(
        args,
        log_path,
        probe,
        name="llmsim serve",
        timeout=startup_timeout,
        env={**os.environ, **(env or {})},
        preexec_fn=None if open_files is None else partial(_limit_open_files, open_files),
        verify=trust or True,
        poll_s=0.05,
    ) as proc:
        yield ServerProcess(proc, port, log_path, scheme)


@contextmanager
def running_process(
    argv: Sequence[str],
    log_path: Path,
    probe: str,
    *,
    name: str,
    timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    verify: ssl.SSLContext | bool = True,
    poll_s: float = 0.1,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` (output to ``log_path``), wait until ``probe`` answers 200, stop it after the block.

    One way for every binary a test puts in front of or beside llmsim (the server itself, routers,
    Envoy, LiteLLM): its exit or a timeout raises with its log, and it never outlives the test.
    """
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=None if env is None else dict(env), preexec_fn=preexec_fn
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}")
            try:
                if httpx.get(probe, timeout=1.0, verify=verify).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not healthy after {timeout}s:\n{log_path.read_text(errors='replace')}")
            time.sleep(poll_s)
        yield proc
    finally:
        stop_process(proc)
