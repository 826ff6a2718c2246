"""The virtual-time prediction of a workload: the same requests through the scheduler's pure core.

An open loop is one call to :func:`~llmsim.engine.scheduler.simulate`. A chain's later turns
arrive when earlier ones end, which the simulation itself decides, so chains are solved as a
fixed point: place every turn whose predecessor's end is known, simulate, place again from the
new ends, until nothing moves. It converges because the core is causal and deterministic: the
timeline before any time ``t`` depends only on arrivals before ``t``, so each pass fixes at least
the earliest request that was still misplaced, and most passes fix many.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmsim.benchmark.records import Outcome, RequestRecord
from llmsim.benchmark.workload import Turn, Workload
from llmsim.engine.scheduler import SchedulerParams, SimulationResult, WorkloadItem, simulate
from llmsim.types import FinishReason

#: Client round trip assumed between a response's end and the next turn's arrival at the server
#: (loopback: a few tenths of a millisecond to a millisecond). It only matters for *which* step a
#: turn joins, and any value shorter than a step gives the same answer on a busy GPU.
TURNAROUND_S = 0.001

#: Passes before the fixed point is declared not found (a closed loop needs about one per turn).
MAX_PASSES = 10_000


@dataclass(slots=True)
class Prediction:
    """Predicted records (one per request the workload sends) and the run's simulated totals."""

    records: list[RequestRecord]
    num_preemptions: int
    num_steps: int
    passes: int


def _records(
    placed: Sequence[tuple[int, int, Turn, float]], result: SimulationResult, workload: Workload
) -> list[RequestRecord]:
    out = []
    for (c, j, turn, arrival), r in zip(placed, result.requests, strict=True):
        aborted = r.finish_reason is FinishReason.ABORT
        out.append(
            RequestRecord(
                chain=c,
                turn=j,
                scheduled=arrival,
                sent=arrival,
                expected_prompt_tokens=turn.prompt_tokens,
                expected_output_tokens=turn.output_tokens,
                background=workload.chains[c].background,
                token_times=list(r.token_times),
                end=arrival + r.e2e,
                output_tokens=r.output_tokens,
                prompt_tokens=turn.prompt_tokens,
                outcome=Outcome.ABORTED if aborted else Outcome.OK,
                status=200,
            )
        )
    return out


def predict(params: SchedulerParams, workload: Workload, *, turnaround: float = TURNAROUND_S) -> Prediction:
    """Simulate ``workload`` on one replica with ``params``.

    Parameters
    ----------
    params:
        The model's scheduler numbers, as ``llmsim serve`` builds them from models.yml.
    workload:
        What the live run sends; a turn arrives ``think_time + turnaround`` after its predecessor ended.
    turnaround:
        The client's round trip between a response's end and the next request's arrival.
    """
    ends: dict[tuple[int, int], float] = {}
    for passes in range(1, MAX_PASSES + 1):
        placed: list[tuple[int, int, Turn, float]] = []
        pending = False
        for c, chain in enumerate(workload.chains):
            at = chain.start
            j = 0
            while at < workload.send_until:
                turn = chain.turn(j)
                if turn is None:
                    break
                placed.append((c, j, turn, at))
                end = ends.get((c, j))
                if end is None:
                    # Its successor (if any) waits for this pass's answer.
                    pending = pending or chain.turn(j + 1) is not None
                    break
                at = end + chain.think_time + turnaround
                j += 1
        items = [
            WorkloadItem(
                at, turn.prompt_tokens, turn.output_tokens, None if turn.abort_after is None else at + turn.abort_after
            )
            for _, _, turn, at in placed
        ]
        result = simulate(params, items)
        new_ends = {(c, j): at + r.e2e for (c, j, _, at), r in zip(placed, result.requests, strict=True)}
        if new_ends == ends or (not pending and passes == 1):
            summary = result.summary()
            return Prediction(_records(placed, result, workload), summary.num_preemptions, summary.num_steps, passes)
        ends = new_ends
    raise RuntimeError(f"the closed-loop prediction did not settle in {MAX_PASSES} passes")
