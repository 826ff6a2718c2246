"""The ``llmsim calibrate`` example of README.md runs as written, on the data file it names."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from llmsim.cli import main
from llmsim.config import load_models_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "calibration" / "h100-llama-3.1-8b.csv"


def readme_command() -> list[str]:
    """The README's calibrate command that names a shipped example file."""
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("llmsim calibrate ") and "docs/examples/calibration/" in line:
            return shlex.split(line)[1:]
    raise AssertionError("README.md has no `llmsim calibrate` example on docs/examples/calibration/")


def test_the_example_data_states_its_source() -> None:
    head = EXAMPLE.read_text().splitlines()[:3]
    assert "tests/calibration/data/h100-llama-3.1-8b-vllm-0.21.csv" in head[0]
    assert any("Source:" in line for line in EXAMPLE.read_text().splitlines()[:6])


def test_the_readme_calibrate_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = readme_command()
    out = tmp_path / "calibrated.yml"
    args[args.index("--out") + 1] = str(out)
    monkeypatch.chdir(ROOT)
    assert main(args) == 0
    assert "RMS relative error" in capsys.readouterr().out
    model = load_models_config(out).models[0]
    assert (model.name, model.hardware) == ("llama-3.1-8b", "h100-80gb")
