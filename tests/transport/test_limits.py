"""The connection cap's default: the open-file limit less what the server needs besides its clients."""

from __future__ import annotations

import resource

import pytest

from llmsim.transport import default_max_connections
from llmsim.transport.limits import RESERVED_DESCRIPTORS


@pytest.mark.parametrize(
    ("soft", "cap"),
    [
        (1024, 1024 - RESERVED_DESCRIPTORS),
        (20000, 20000 - RESERVED_DESCRIPTORS),
        (64, 16),
        (resource.RLIM_INFINITY, 65536),
    ],
)
def test_the_default_cap_leaves_descriptors_for_the_server(
    monkeypatch: pytest.MonkeyPatch, soft: int, cap: int
) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda which: (soft, resource.RLIM_INFINITY))
    assert default_max_connections() == cap
