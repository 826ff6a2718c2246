"""Running the verdict's workload from a synchronous test."""

from __future__ import annotations

import asyncio

from llmsim.benchmark.verdict import ClientRecord, ReplicaRecord
from llmsim.benchmark.verdict_run import VerdictRun, verdict_run


def run_verdict(run: VerdictRun) -> tuple[list[ReplicaRecord], list[ClientRecord]]:
    """``verdict_run`` on an event loop of its own, closed after.

    Not ``asyncio.run``: it replaces the thread's current loop (the one looptime's plugin asked the
    policy for before this sync test) and drops it unclosed, which pytest reports at the session's end.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(verdict_run(run))
    finally:
        loop.close()
