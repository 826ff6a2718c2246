"""One version: llmsim.__version__, and every place that repeats or carries it agrees with it.

The operator may not import llmsim, so it keeps a copy (``llmsim_operator.conventions.RELEASE_VERSION``,
also its default image tags); the chart and CHANGELOG.md repeat it; the package metadata reads it
(setuptools' dynamic version) and the images get it as the ``VERSION`` build argument.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from setuptools.config.pyprojecttoml import read_configuration  # type: ignore[import-untyped]

import llmsim_operator
from llmsim import __version__
from llmsim.cli import main as llmsim_main
from llmsim_operator import conventions
from llmsim_operator.cli import main as operator_main

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "llmsim-operator"
DOCKERFILES = [ROOT / "Dockerfile", ROOT / "Dockerfile.operator"]


def test_the_package_version_is_llmsims() -> None:
    project = read_configuration(ROOT / "pyproject.toml", expand=True)["project"]
    assert "version" in project["dynamic"]
    assert project["version"] == __version__


def test_version_flags_print_it(capsys: pytest.CaptureFixture[str]) -> None:
    for main, name in ((llmsim_main, "llmsim"), (operator_main, "llmsim-operator")):
        with pytest.raises(SystemExit) as exit_info:
            main(["--version"])
        assert exit_info.value.code == 0
        assert capsys.readouterr().out == f"{name} {__version__}\n"


def test_the_operators_copy_and_default_images() -> None:
    assert llmsim_operator.__version__ == conventions.RELEASE_VERSION == __version__
    assert conventions.DEFAULT_SIMULATOR_IMAGE.endswith(f":{__version__}")
    assert conventions.DEFAULT_OPERATOR_IMAGE.endswith(f":{__version__}")


def test_the_chart() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["appVersion"] == __version__
    assert values["simulatorImage"] == conventions.DEFAULT_SIMULATOR_IMAGE


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_image_labels_the_build_arg(dockerfile: Path) -> None:
    final_stage = dockerfile.read_text().rsplit("\nFROM ", 1)[1]
    assert re.search(r"^ARG VERSION\b", final_stage, re.MULTILINE)
    assert 'org.opencontainers.image.version="${VERSION}"' in final_stage


def test_image_builds_pass_the_version() -> None:
    for command in (["hack/version.sh"], ["make", "-s", "version"]):
        out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
        assert out.strip() == __version__, command
    makefile = (ROOT / "Makefile").read_text()
    kind_up = (ROOT / "e2e" / "kind-up.sh").read_text()
    for dockerfile in DOCKERFILES:
        assert (
            f"--build-arg VERSION=$(VERSION) -t {'llmsim' if dockerfile.name == 'Dockerfile' else 'llmsim-operator'}:$(VERSION) -f {dockerfile.name}"
            in makefile
        )
        assert re.search(rf'docker build --build-arg VERSION="\$VERSION" .* -f {re.escape(dockerfile.name)} ', kind_up)


def test_the_changelog_starts_at_this_version() -> None:
    first = re.search(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert first is not None
    assert first.group(1) == __version__
