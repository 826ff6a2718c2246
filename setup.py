"""Build hook for the one thing pyproject.toml cannot say: an optionally compiled planner core.

With ``LLMSIM_COMPILE=1`` the modules ``llmsim plan`` spends its time in are compiled to C
extensions with mypyc (as black and mypy ship themselves): the same source, type-checked strict
already, about 2.5x faster in virtual time with results identical to the bit (checked by
``tests/fleet/test_compiled_core.py`` and ``bench/bench_plan.py --baseline``). Without it
(the default: editable installs, the images, the test suite's own tree) everything is pure
Python. Compiling needs a C compiler, the Python headers and mypy in the build environment::

    LLMSIM_COMPILE=1 pip install --no-build-isolation .    # mypy and setuptools installed first
    make compiled                                           # a compiled copy in build/compiled
"""

from __future__ import annotations

import os

from setuptools import setup

#: The virtual-time core: the scheduler, its decode runs and KV pool, and the fleet's loop.
#: Modules only; what they import stays interpreted and is called through Python's protocols.
COMPILED_MODULES = (
    "llmsim/engine/scheduler/block_hash.py",
    "llmsim/engine/scheduler/cost_model.py",
    "llmsim/engine/scheduler/decode_run.py",
    "llmsim/engine/scheduler/kv_cache.py",
    "llmsim/engine/scheduler/scheduler.py",
    "llmsim/engine/scheduler/sequence.py",
    "llmsim/fleet/fleet_result.py",
    "llmsim/fleet/fleet_summary.py",
    "llmsim/fleet/replica.py",
    "llmsim/fleet/replica_view.py",
    "llmsim/fleet/router.py",
    "llmsim/fleet/simulation.py",
)


def _ext_modules() -> list[object]:
    if os.environ.get("LLMSIM_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    return list(mypycify([f"simulator/{path}" for path in COMPILED_MODULES], opt_level="3", group_name="llmsim"))


setup(ext_modules=_ext_modules())
