"""Suite-wide test setup."""

from __future__ import annotations

import asyncio

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # looptime's pytest hook asks the policy for the current loop on every test, sync ones included;
    # before any loop was ever set, asyncio's default policy then *creates* one, which nobody closes
    # (a ResourceWarning, an error under filterwarnings=error). Marking the loop as explicitly unset
    # makes that call raise instead, which looptime handles.
    asyncio.set_event_loop(None)
