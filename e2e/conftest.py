"""End-to-end tests against a real cluster (kind via e2e/kind-up.sh, or any KUBECONFIG).

They run only when asked: ``E2E=1 pytest e2e``. Asked for but without a reachable cluster, they fail.
"""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: needs a real cluster with the operator installed (E2E=1)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("E2E") == "1":
        return
    skip = pytest.mark.skip(reason="end-to-end tests run with E2E=1 (see e2e/kind-up.sh)")
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)
