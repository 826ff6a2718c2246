"""Every file ``make generate`` writes is what the code gives now (regenerated in memory, compared)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hack_generate", ROOT / "hack" / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATE = load_generator()
STEPS: list[Callable[[], dict[Path, str]]] = [GENERATE.schema_files, GENERATE.operator_files]


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.__name__)
def test_generated_files_are_up_to_date(step: Callable[[], dict[Path, str]]) -> None:
    files = step()
    assert files
    for path, text in files.items():
        where = path.relative_to(ROOT)
        assert path.exists(), f"{where} is missing: run `make generate`"
        assert path.read_text() == text, f"{where} is stale: run `make generate`"


def test_check_mode_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["generate.py", "--check"])
    assert GENERATE.main() == 0
