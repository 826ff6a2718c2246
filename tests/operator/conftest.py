"""Shared fixtures of the operator tests."""

from __future__ import annotations

import sys
from collections.abc import Generator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

try:
    import llmsim_operator  # noqa: F401
except ImportError:  # an editable install made before operator/llmsim_operator had modules
    sys.path.insert(0, str(ROOT / "operator"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the operator's log to a failed integration test."""
    report: pytest.TestReport = yield
    funcargs = getattr(item, "funcargs", {})
    if report.when == "call" and report.failed and "operator" in funcargs:
        report.sections.append(("operator log (tail)", funcargs["operator"].log_tail()))
    return report
