"""`make release` (hack/release.sh): its fast, offline artifacts, checked for what they claim to be.

The release script runs for real into a temporary directory with the parts that take a second
(``install.yaml`` and the Helm chart), then each artifact is read back by an independent reader:
PyYAML for the install manifest, tarfile and Helm's own engine for the chart archive, hashlib for
SHA256SUMS. The sdist and both wheels take minutes (the mypyc build): their test is marked slow
(make test-slow) and reads them with tarfile and zipfile. The images run in the release workflow
only (docs/releasing.md). The refusals (another version, a dirty tree, a used directory) run against the same
script.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from llmsim import __version__

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "hack" / "release.sh"
CHART = "llmsim-operator"
OPERATOR_IMAGE = f"ghcr.io/llmsim/llmsim-operator:{__version__}"
SIMULATOR_IMAGE = f"ghcr.io/llmsim/llmsim:{__version__}"


def release(
    version: str, dist: Path, parts: str, root: Path = ROOT, dirty_ok: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "RELEASE_PARTS": parts}
    env.pop("RELEASE_ALLOW_DIRTY", None)
    if dirty_ok:
        # The suite runs in work trees with changes in progress; the refusal has its own test.
        env["RELEASE_ALLOW_DIRTY"] = "1"
    return subprocess.run(
        [str(root / "hack" / "release.sh"), version, str(dist)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def sha256sums(dist: Path) -> dict[str, str]:
    """SHA256SUMS as name -> digest (sha256sum's text format, which `sha256sum -c` reads)."""
    listed = {}
    for line in (dist / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ", 1)
        listed[name] = digest
    return listed


def digests(dist: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in dist.iterdir() if p.name != "SHA256SUMS"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("release") / "dist"
    done = release(__version__, out, "install chart")
    assert done.returncode == 0, done.stderr
    return out


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_dist_holds_the_manifest_the_chart_and_the_checksums(dist: Path) -> None:
    assert sorted(p.name for p in dist.iterdir()) == ["SHA256SUMS", "install.yaml", f"{CHART}-{__version__}.tgz"]


def test_install_yaml_has_the_crd_and_the_operator_at_the_release_tag(dist: Path) -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in documents(dist / "install.yaml")}
    crd = objects[("CustomResourceDefinition", "llmsimulators.llmsim.io")]
    assert crd["spec"]["names"]["kind"] == "LLMSimulator"
    assert crd == yaml.safe_load((ROOT / "crds" / "llmsim.io_llmsimulators.yaml").read_text())
    (container,) = objects[("Deployment", "llmsim-operator")]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == OPERATOR_IMAGE
    args = container["args"]
    assert args[args.index("--simulator-image") + 1] == SIMULATOR_IMAGE
    assert objects[("Namespace", "llmsim-system")]


def chart_files(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_the_chart_archive_is_the_chart_at_the_release_version(dist: Path) -> None:
    archive = dist / f"{CHART}-{__version__}.tgz"
    files = chart_files(archive)
    # Helm's layout: everything under one directory named after the chart.
    assert {name.split("/", 1)[0] for name in files} == {CHART}
    metadata = yaml.safe_load(files[f"{CHART}/Chart.yaml"])
    assert metadata["version"] == metadata["appVersion"] == __version__
    assert (
        files[f"{CHART}/crds/llmsim.io_llmsimulators.yaml"]
        == (ROOT / "crds" / "llmsim.io_llmsimulators.yaml").read_bytes()
    )
    # And Helm, loading the archive as `helm install` would, runs the release's images by default.
    rendered = helm.Chart.load_archive(archive.read_bytes()).render({}, name=CHART, namespace="llmsim-system")
    (deployment,) = [
        doc
        for path, text in rendered.items()
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(io.StringIO(text))
        if doc and doc["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == OPERATOR_IMAGE
    assert f"--simulator-image={SIMULATOR_IMAGE}" in container["args"]


def test_sha256sums_lists_every_other_file_with_its_digest(dist: Path) -> None:
    assert sha256sums(dist) == digests(dist)


def test_a_version_other_than_the_codes_is_refused(tmp_path: Path) -> None:
    major, minor, patch = (int(part) for part in __version__.split(".")[:3])
    done = release(f"{major}.{minor}.{patch + 1}", tmp_path / "dist", "install chart")
    assert done.returncode == 1
    assert f"the code says {__version__}" in done.stderr
    assert not (tmp_path / "dist").exists()


def test_a_used_dist_directory_and_an_unknown_part_are_refused(tmp_path: Path) -> None:
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "old.whl").write_text("")
    done = release(__version__, tmp_path / "dist", "install")
    assert done.returncode == 1
    assert "is not empty" in done.stderr
    done = release(__version__, tmp_path / "other", "install docs")
    assert done.returncode == 1
    assert "unknown part docs" in done.stderr


def test_uncommitted_changes_are_refused_and_a_clean_tree_passes(tmp_path: Path) -> None:
    # A repository of the files the checks read, committed, then changed.
    repo = tmp_path / "repo"
    for name in ("hack/release.sh", "hack/version.sh", "simulator/llmsim/__init__.py"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, repo / name)

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, timeout=30)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "release")
    clean = release(__version__, tmp_path / "clean", "", root=repo, dirty_ok=False)
    assert clean.returncode == 0, clean.stderr
    assert (tmp_path / "clean" / "SHA256SUMS").read_text() == ""
    (repo / "simulator" / "llmsim" / "__init__.py").write_text('__version__ = "0.0.0"\n', encoding="utf-8")
    (repo / "stray.txt").write_text("")
    refused = release("0.0.0", tmp_path / "dirty", "", root=repo, dirty_ok=False)
    assert refused.returncode == 1
    assert "uncommitted changes" in refused.stderr
    assert " M simulator/llmsim/__init__.py" in refused.stderr
    assert "?? stray.txt" in refused.stderr


def wheel_text(wheel: zipfile.ZipFile, name: str) -> str:
    return wheel.read(f"llmsim-{__version__}.dist-info/{name}").decode()


@pytest.mark.slow
def test_the_sdist_the_wheel_and_the_compiled_wheel(tmp_path: Path) -> None:
    # Minutes: python -m build, then mypyc over the planner core (make test-slow).
    dist = tmp_path / "dist"
    done = release(__version__, dist, "wheels compiled", timeout=1800)
    assert done.returncode == 0, done.stderr
    sdist, pure = dist / f"llmsim-{__version__}.tar.gz", dist / f"llmsim-{__version__}-py3-none-any.whl"
    (compiled,) = dist.glob(f"llmsim-{__version__}-cp*.whl")
    assert sorted(p.name for p in dist.iterdir()) == sorted(["SHA256SUMS", sdist.name, pure.name, compiled.name])
    assert sha256sums(dist) == digests(dist)
    with tarfile.open(sdist) as tar:
        members = set(tar.getnames())
    for name in (
        "setup.py",
        "pyproject.toml",
        "README.md",
        "simulator/llmsim/__init__.py",
        "operator/llmsim_operator/cli.py",
    ):
        assert f"llmsim-{__version__}/{name}" in members
    # setup.py's list of the modules mypyc compiles (not imported: importing it runs setup()).
    modules = re.findall(r'"(llmsim/[\w/]+)\.py"', (ROOT / "setup.py").read_text())
    assert modules
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    with zipfile.ZipFile(pure) as wheel:
        assert f"Version: {__version__}\n" in wheel_text(wheel, "METADATA")
        assert "Root-Is-Purelib: true" in wheel_text(wheel, "WHEEL")
        pure_files = set(wheel.namelist())
        assert not [name for name in pure_files if name.endswith(".so")]
    with zipfile.ZipFile(compiled) as wheel:
        assert f"Version: {__version__}\n" in wheel_text(wheel, "METADATA")
        tag = re.search(r"^Tag: (\S+)$", wheel_text(wheel, "WHEEL"), re.MULTILINE)
        assert tag is not None
        assert tag.group(1).startswith(f"cp{sys.version_info.major}{sys.version_info.minor}-")
        compiled_files = set(wheel.namelist())
    # Every module of the list as an extension, beside its source; everything else as in the pure wheel.
    assert {f"{module}{suffix}" for module in modules} <= compiled_files
    assert {name for name in pure_files if ".dist-info/" not in name} <= compiled_files
    assert "llmsim/data/models.yml" in pure_files
