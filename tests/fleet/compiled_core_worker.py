"""Runs simulations for a test in another interpreter: the one whose ``llmsim`` is the compiled core.

Started as ``python -m tests.fleet.compiled_core_worker`` with ``PYTHONPATH`` naming the compiled
copy first. Reads one pickled case per message from stdin, answers with the pickled
:func:`plain` form of its result, both ways of running it (stepping, jumping). A message is a
4-byte big-endian length and the pickle.
"""

from __future__ import annotations

import dataclasses
import enum
import pickle
import struct
import sys
from collections.abc import Mapping
from typing import IO, Any, cast

from llmsim.engine.scheduler import SchedulerParams
from llmsim.fleet import FleetRequest, FleetSpec, FleetWorkload, simulate
from llmsim.fleet.simulation import FleetSimulation

#: ("fleet", FleetSpec, FleetWorkload) or ("simulate", SchedulerParams, list[FleetRequest]).
Case = tuple[str, Any, Any]


def plain(value: object) -> object:
    """``value`` in builtin types only, so that two interpreters' results compare with ``==``.

    Floats stay floats (equal only to the bit); records become tuples of their fields.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, *(plain(getattr(value, f.name)) for f in dataclasses.fields(value)))
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return sorted((plain(k), plain(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    assert value is None or isinstance(value, int | float | str | bytes), type(value)
    return value


def run(case: Case) -> list[object]:
    kind, config, workload = case
    out: list[object] = []
    for fast_forward in (False, True):
        if kind == "fleet":
            assert isinstance(config, FleetSpec)
            assert isinstance(workload, FleetWorkload)
            result: object = FleetSimulation(config, workload, keep_token_times=True, fast_forward=fast_forward).run()
        else:
            assert isinstance(config, SchedulerParams)
            assert all(isinstance(i, FleetRequest) for i in workload)
            result = simulate(config, workload, fast_forward=fast_forward)
        out.append(plain(result))
    return out


def send(stream: IO[bytes], value: object) -> None:
    data = pickle.dumps(value)
    stream.write(struct.pack(">I", len(data)) + data)
    stream.flush()


def receive(stream: IO[bytes]) -> object:
    head = stream.read(4)
    if len(head) < 4:
        raise EOFError
    (size,) = struct.unpack(">I", head)
    return pickle.loads(stream.read(size))


def main() -> None:
    while True:
        try:
            case = receive(sys.stdin.buffer)
        except EOFError:
            return
        send(sys.stdout.buffer, run(cast(Case, case)))


if __name__ == "__main__":
    main()
