"""Which protocol uvicorn runs: llmsim's fast path, or uvicorn's own when it is off or unavailable."""

from __future__ import annotations

import builtins
import time
from typing import Any

import pytest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from llmsim.engine.release_gate import ReleaseGate
from llmsim.transport import FAST_PATH_ENV, ArrivalWatch, ConnectionLimits, fast_path_enabled, http_setting
from llmsim.transport.connection_guard import GuardedHttpToolsProtocol
from llmsim.transport.http_protocol import StampingHttpToolsProtocol


def test_the_fast_path_is_on_unless_the_environment_turns_it_off() -> None:
    assert fast_path_enabled({})
    assert fast_path_enabled({FAST_PATH_ENV: "1"})
    for off in ("0", "false", "No", " off "):
        assert not fast_path_enabled({FAST_PATH_ENV: off})


def test_the_fast_path_is_llmsims_protocol_over_uvicorns() -> None:
    gate = ReleaseGate(time.monotonic)
    protocol = http_setting(ArrivalWatch(), gate)
    assert isinstance(protocol, type)
    assert issubclass(protocol, HttpToolsProtocol)
    assert protocol is not HttpToolsProtocol


def test_with_the_fast_path_off_uvicorn_runs_its_own_protocol_with_the_limits_only() -> None:
    limits = ConnectionLimits(max_header_bytes=2048)
    protocol = http_setting(ArrivalWatch(), ReleaseGate(time.monotonic), fast_path=False, limits=limits)
    assert isinstance(protocol, type)
    assert issubclass(protocol, GuardedHttpToolsProtocol)
    assert not issubclass(protocol, StampingHttpToolsProtocol)
    assert protocol.limits is limits


def test_a_uvicorn_without_the_internals_falls_back_to_its_own_protocol(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_import = builtins.__import__

    def moved(name: str, *args: Any, **kwargs: Any) -> Any:
        if name in {"llmsim.transport.http_protocol", "llmsim.transport.connection_guard"}:
            raise ImportError("cannot import name 'HttpToolsProtocol'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", moved)
    with caplog.at_level("WARNING", logger="llmsim.transport.server"):
        assert http_setting(None, None) == "httptools"
    assert "fast path and connection limits off" in caplog.text


@pytest.mark.parametrize("kwargs", [{"max_header_bytes": 100}, {"request_timeout_s": 0}, {"max_connections": 0}])
def test_limits_out_of_range_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        ConnectionLimits(**kwargs)
