"""``llmsim bench`` fails fast, with one line, against a wrong URL or model, and fails when nothing succeeded."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmsim.cli import main
from llmsim.commands.bench import DESCRIPTION
from llmsim.commands.bench import __doc__ as BENCH_MODULE_DOC
from tests.support.server import free_port, running_server

CONFIG = """
version: 1
models:
  - {name: sim, engine: instant}
  - {name: broken, engine: instant, faults: {seed: 1, rates: {rate_limit: 1.0}}}
"""

# Long enough that a bench which did not stop early would be noticed; the checks end it at once.
LOAD = ["--rate", "5", "--duration", "30", "--prompt-tokens", "16", "--output-tokens", "4", "--no-progress"]


def bench(url: str, model: str, *extra: str) -> int:
    return main(["bench", "--url", url, "--model", model, *LOAD, *extra])


def test_a_closed_port_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert bench(url, "sim") == 1
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"llmsim bench: cannot reach {url}")
    assert "==" not in captured.out  # no table of dashes


@pytest.mark.integration
def test_a_model_the_server_does_not_serve_is_named_with_the_served_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_server(tmp_path, config=CONFIG) as server:
        assert bench(server.base_url + "/v1", "llama-3.1-8b") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"llmsim bench: model 'llama-3.1-8b' is not served at {server.base_url} (served: sim, broken)"]


@pytest.mark.integration
def test_a_run_where_every_request_failed_exits_1_with_the_first_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    load = ["--rate", "10", "--requests", "3", "--prompt-tokens", "16", "--output-tokens", "4", "--no-progress"]
    with running_server(tmp_path, config=CONFIG) as server:
        assert main(["bench", "--url", server.base_url, "--model", "broken", *load]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert main(["bench", "--url", server.base_url, "--model", "sim", *load]) == 0
    assert len(err) == 1
    assert err[0].startswith("llmsim bench: rate 10: every request failed (3 of 3); the first: http 429")


def test_help_is_for_users_not_the_modules_docstring(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert BENCH_MODULE_DOC is not None
    assert BENCH_MODULE_DOC.strip().splitlines()[-1].strip() not in out
    assert "llmsim.fleet" not in out
    assert "runtime.scheduler_params" not in out
    assert " ".join(DESCRIPTION.split()[:6]) in " ".join(out.split())
