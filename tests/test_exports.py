"""Each package's public surface is exactly its ``__all__`` (httpx guards its exports the same way)."""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest

PACKAGES = [
    "llmsim.llm",
    "llmsim.engine",
    "llmsim.engine.scheduler",
    "llmsim.config",
    "llmsim.metrics",
    "llmsim.api",
    "llmsim.benchmark",
    "llmsim.fleet",
    "llmsim.calibration",
    "llmsim.kv_events",
    "llmsim.transport",
    "llmsim_operator",
    "llmsim_capacity",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_public_names_are_exactly_all(name: str) -> None:
    package = importlib.import_module(name)
    exported = package.__all__
    assert len(set(exported)) == len(exported)
    for attr in exported:
        assert hasattr(package, attr), attr
    submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    public = {
        n
        for n, v in vars(package).items()
        # __version__ is the one dunder a package may export.
        if (not n.startswith("_") or n == "__version__") and not isinstance(v, types.ModuleType) and n != "annotations"
    }
    assert public - submodules == set(exported)
