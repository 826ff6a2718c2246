"""The planner core compiled by mypyc (setup.py's LLMSIM_COMPILE) gives pure Python's results, to the bit.

``hack/compile-core.sh`` builds a compiled copy of the simulator (cached by a hash of its sources);
a worker process imports ``llmsim`` from it and runs the cases hypothesis draws here, stepping and
jumping, while this process runs the same cases in pure Python.
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsim.engine.scheduler import SchedulerParams
from llmsim.fleet import FleetRequest, FleetSpec, FleetWorkload
from tests.engine.scheduler.test_decode_run import scenarios
from tests.fleet.compiled_core_worker import Case, receive, run, send
from tests.fleet.test_fast_forward import busy_fleets, fleets

# A mypyc build of the core takes minutes on two cores: make test-slow (CI runs it).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def compiled_modules() -> list[str]:
    """Module names of setup.py's ``COMPILED_MODULES`` (read, not imported: setup.py runs setup())."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMPILED_MODULES" for t in node.targets
        ):
            paths = ast.literal_eval(node.value)
            return [p.removesuffix(".py").replace("/", ".") for p in paths]
    raise AssertionError("setup.py has no COMPILED_MODULES")


@pytest.fixture(scope="module")
def compiled_tree() -> Path:
    done = subprocess.run(
        [str(ROOT / "hack" / "compile-core.sh"), str(ROOT / "build" / "compiled")],
        env={"PYTHON": sys.executable, "PATH": "/usr/local/bin:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


def with_compiled(tree: Path) -> dict[str, str]:
    return {"PYTHONPATH": f"{tree}:{ROOT}", "PATH": "/usr/bin:/bin"}


def test_the_copy_imports_the_compiled_modules_and_the_rest_as_source(compiled_tree: Path) -> None:
    modules = compiled_modules()
    assert "llmsim.fleet.simulation" in modules
    probe = "import importlib, sys\nfor name in sys.argv[1:]: print(importlib.import_module(name).__file__)"
    done = subprocess.run(
        [sys.executable, "-c", probe, *modules, "llmsim.fleet.spec"],
        env=with_compiled(compiled_tree),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    *compiled, source = done.stdout.split()
    assert all(f.startswith(str(compiled_tree)) and f.endswith(".so") for f in compiled), compiled
    assert source == str(compiled_tree / "llmsim" / "fleet" / "spec.py")


def test_llmsim_plan_says_it_ran_on_the_compiled_core(compiled_tree: Path) -> None:
    # Two replicas of the embedded llama-3.1-8b, a few seconds of Poisson arrivals.
    plan = ["plan", "--model", "llama-3.1-8b", "--replicas", "2", "--rate", "4", "--duration", "3"]
    done = subprocess.run(
        [sys.executable, "-m", "llmsim.cli", *plan, "--prompt-tokens", "64", "--output-tokens", "16"],
        env=with_compiled(compiled_tree),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("x real time (compiled core)"), done.stdout


@pytest.fixture(scope="module")
def worker(compiled_tree: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fleet.compiled_core_worker"],
        cwd=ROOT,
        env=with_compiled(compiled_tree),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    yield proc
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.close()
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0


def compiled_run(worker: subprocess.Popen[bytes], case: Case) -> Any:
    assert worker.stdin is not None
    assert worker.stdout is not None
    send(worker.stdin, case)
    return receive(worker.stdout)


def assert_same(worker: subprocess.Popen[bytes], case: Case) -> None:
    pure = run(case)
    assert pure[0] == pure[1], "stepping and jumping differ in pure Python"
    assert compiled_run(worker, case) == pure


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(fleets(), busy_fleets()))
def test_fleets_run_by_the_compiled_core_are_the_pure_cores(
    worker: subprocess.Popen[bytes], case: tuple[FleetSpec, FleetWorkload]
) -> None:
    assert_same(worker, ("fleet", *case))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_one_replica_simulated_by_the_compiled_core_is_the_pure_cores(
    worker: subprocess.Popen[bytes], case: tuple[SchedulerParams, list[FleetRequest]]
) -> None:
    assert_same(worker, ("simulate", *case))


def pipelined(params: SchedulerParams, async_scheduling: bool) -> SchedulerParams:
    """``params`` as two pipeline stages of a model twice the size: each stage's GPU holds what the
    scenario's GPU does (the same blocks), and batches overlap in vLLM's batch queue."""
    model = dataclasses.replace(
        params.model,
        num_parameters=2 * params.model.num_parameters,
        weight_bytes=2 * params.model.weight_bytes,
        kv_bytes_per_token=2 * params.model.kv_bytes_per_token,
        num_hidden_layers=2,
        hidden_size=64,
    )
    gpu = dataclasses.replace(params.gpu, interconnect_bandwidth=1e6, interconnect_latency_s=1e-4)
    return dataclasses.replace(
        params, model=model, gpu=gpu, pipeline_parallel_size=2, async_scheduling=async_scheduling
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.booleans())
def test_a_pipeline_simulated_by_the_compiled_core_is_the_pure_cores(
    worker: subprocess.Popen[bytes], case: tuple[SchedulerParams, list[FleetRequest]], async_scheduling: bool
) -> None:
    params, workload = case
    assert_same(worker, ("simulate", pipelined(params, async_scheduling), workload))
