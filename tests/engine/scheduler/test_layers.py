"""The package's three tiers import downward only, only the driver touches asyncio, and the exports resolve."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import llmsim.engine.scheduler as package

PACKAGE_DIR = Path(package.__file__).parent
PREFIX = "llmsim.engine.scheduler."

RESOURCES = {"params", "sequence", "kv_cache", "cost_model", "workload", "summary"}
DECISIONS = {"policy"}
TIME = {"driver", "virtual"}
# What each tier may import from the package.
ALLOWED = {
    **{m: RESOURCES for m in RESOURCES},
    **{m: RESOURCES for m in DECISIONS},
    **{m: RESOURCES | DECISIONS for m in TIME},
}


def imports(module: str) -> set[str]:
    tree = ast.parse((PACKAGE_DIR / f"{module}.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_every_module_is_assigned_a_tier() -> None:
    modules = {p.stem for p in PACKAGE_DIR.glob("*.py")} - {"__init__"}
    assert modules == RESOURCES | DECISIONS | TIME


@pytest.mark.parametrize("module", sorted(RESOURCES | DECISIONS | TIME))
def test_dependencies_point_down(module: str) -> None:
    used = {name.removeprefix(PREFIX) for name in imports(module) if name.startswith(PREFIX)}
    assert used <= ALLOWED[module] - {module}


@pytest.mark.parametrize("module", sorted(RESOURCES | DECISIONS | TIME))
def test_only_the_driver_touches_asyncio_or_time(module: str) -> None:
    used = imports(module)
    roots = {name.split(".")[0] for name in used}
    touches_time = bool({"asyncio", "time"} & roots) or "llmsim.engine.clock" in used
    assert touches_time == (module == "driver")


def test_exports_resolve_and_are_sorted() -> None:
    assert package.__all__ == sorted(package.__all__)
    for name in package.__all__:
        assert getattr(package, name) is not None
