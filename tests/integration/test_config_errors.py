"""A broken config file stops ``llmsim serve`` and ``llmsim check`` with one line, before any port is bound.

The real command runs as a subprocess, as an operator's pod or a CI job runs it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.server import free_port

pytestmark = pytest.mark.integration

# 0xE9 is "é" in Latin-1; in UTF-8 it opens a two-byte sequence, which "," (0x2C) cannot continue.
MODELS_PREFIX = b"models:\n  - {name: caf"
MODELS_LATIN1 = MODELS_PREFIX + b"\xe9, engine: instant}\n"
RESPONSES_PREFIX = b"default:\n  content: caf"
RESPONSES_LATIN1 = RESPONSES_PREFIX + b"\xe9, bonjour\n"


def expected_line(path: Path, prefix: bytes) -> str:
    # Worked out from the bytes above: the bad byte is the first after the prefix, on the prefix's
    # last line, one column after that line's text.
    offset = len(prefix)
    line = prefix.count(b"\n") + 1
    column = len(prefix.rsplit(b"\n", 1)[-1]) + 1
    return (
        f"llmsim: config error: {path}: not UTF-8 text: invalid continuation byte at byte {offset} "
        f"(line {line}, column {column})"
    )


def test_the_worked_example_is_what_it_says() -> None:
    # Guards the expected line above: the offsets are those of Python's own decoder.
    with pytest.raises(UnicodeDecodeError) as exc:
        MODELS_LATIN1.decode("utf-8")
    assert (exc.value.start, exc.value.reason) == (22, "invalid continuation byte")
    assert expected_line(Path("m.yml"), MODELS_PREFIX).endswith("at byte 22 (line 2, column 15)")


def connects(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


FILES = [
    pytest.param("--config", "models.yml", MODELS_LATIN1, MODELS_PREFIX, id="models.yml"),
    pytest.param("--responses", "responses.yml", RESPONSES_LATIN1, RESPONSES_PREFIX, id="responses.yml"),
]


@pytest.mark.parametrize(("flag", "name", "data", "prefix"), FILES)
def test_serve_refuses_a_file_that_is_not_utf8_before_binding(
    tmp_path: Path, flag: str, name: str, data: bytes, prefix: bytes
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    port = free_port()
    args = [sys.executable, "-m", "llmsim.cli", "serve", flag, str(path), "--port", str(port), "--log-level", "info"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Probe the port for as long as the process lives: it must never accept a connection.
        accepted = False
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            accepted = accepted or connects(port)
            time.sleep(0.02)
        stdout, stderr = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, stderr
    assert not accepted
    assert "Uvicorn running" not in stdout + stderr
    assert stderr.splitlines() == [expected_line(path, prefix)]
    assert stdout == ""


@pytest.mark.parametrize(("flag", "name", "data", "prefix"), FILES)
def test_check_refuses_a_file_that_is_not_utf8(
    tmp_path: Path, flag: str, name: str, data: bytes, prefix: bytes
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    proc = subprocess.run(
        [sys.executable, "-m", "llmsim.cli", "check", flag, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [expected_line(path, prefix)]
    assert proc.stdout == ""
