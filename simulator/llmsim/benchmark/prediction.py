"""The virtual-time prediction of a workload: the same requests through the scheduler's pure core, on one
replica (:func:`predict`) or on a fleet behind its router (:func:`predict_fleet`).

An open loop is one call to :func:`~llmsim.fleet.simulate` (or to the fleet's planner). A chain's later turns
arrive when earlier ones end, which the simulation itself decides, so chains are solved as a
fixed point: place every turn whose predecessor's end is known, simulate, place again from the
new ends, until nothing moves. It converges because the core is causal and deterministic: the
timeline before any time ``t`` depends only on arrivals before ``t``, so each pass fixes at least
the earliest request that was still misplaced, and most passes fix many.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmsim.benchmark.prompts import segment_ids
from llmsim.benchmark.records import Outcome, RequestRecord
from llmsim.benchmark.workload import Turn, Workload
from llmsim.engine.scheduler import SchedulerParams

# The fleet's pure core only (its package also holds the file readers, which need the config).
from llmsim.fleet.planner import plan_fleet
from llmsim.fleet.prompt import Prompt
from llmsim.fleet.prompt import Segment as FleetSegment
from llmsim.fleet.simulation import simulate
from llmsim.fleet.spec import FleetSpec
from llmsim.fleet.workload import FleetRequest, FleetWorkload
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


@dataclass(frozen=True, slots=True)
class _Simulated:
    """One request of a pass, as either core reports it."""

    token_times: list[float]
    e2e: float
    output_tokens: int
    aborted: bool
    cached_tokens: int


#: A turn placed at its arrival: (chain, turn index, turn, arrival).
_Placed = tuple[int, int, Turn, float]
#: Simulates the placed turns of a pass: one result per turn, the preemptions and the steps.
_Pass = Callable[[list[_Placed]], tuple[list[_Simulated], int, int]]


def _records(placed: Sequence[_Placed], results: Sequence[_Simulated], workload: Workload) -> list[RequestRecord]:
    out = []
    for (c, j, turn, arrival), r in zip(placed, results, strict=True):
        out.append(
            RequestRecord(
                chain=c,
                turn=j,
                scheduled=arrival,
                sent=arrival,
                expected_prompt_tokens=turn.prompt_tokens,
                expected_output_tokens=turn.output_tokens,
                background=workload.chains[c].background,
                token_times=r.token_times,
                end=arrival + r.e2e,
                output_tokens=r.output_tokens,
                prompt_tokens=turn.prompt_tokens,
                cached_tokens=r.cached_tokens,
                outcome=Outcome.ABORTED if r.aborted else Outcome.OK,
                status=200,
            )
        )
    return out


def prompt_ids(turn: Turn) -> tuple[int, ...]:
    """The token ids the client sends for ``turn`` (completions API): what the server's prefix cache sees."""
    ids: list[int] = []
    for segment in turn.prompt:
        ids += segment_ids(segment)
    return tuple(ids)


def _abort_at(turn: Turn, at: float) -> float | None:
    return None if turn.abort_after is None else at + turn.abort_after


def predict(params: SchedulerParams, workload: Workload, *, turnaround: float = TURNAROUND_S) -> Prediction:
    """Simulate ``workload`` on one replica with ``params``.

    Prompts carry the token ids the client sends (completions API), so requests that share a
    prefix share prefix-cache blocks as they do on the server; with chat text the server's ids
    differ (its template adds tokens), the shared stretches do not.

    Parameters
    ----------
    params:
        The model's scheduler numbers, as ``llmsim serve`` builds them from models.yml.
    workload:
        What the live run sends; a turn arrives ``think_time + turnaround`` after its predecessor ended.
    turnaround:
        The client's round trip between a response's end and the next request's arrival.
    """

    def one_replica(placed: list[_Placed]) -> tuple[list[_Simulated], int, int]:
        items = [
            FleetRequest.of(at, turn.prompt_tokens, turn.output_tokens, _abort_at(turn, at), prompt_ids(turn))
            for _, _, turn, at in placed
        ]
        result = simulate(params, items)
        simulated = [
            _Simulated(
                list(r.token_times), r.e2e, r.output_tokens, r.finish_reason is FinishReason.ABORT, r.prefix_hit_tokens
            )
            for r in result.requests
        ]
        return simulated, result.replicas[0].num_preemptions, result.replicas[0].num_steps

    return _settle(workload, turnaround, one_replica)


def predict_fleet(fleet: FleetSpec, workload: Workload, *, turnaround: float = TURNAROUND_S) -> Prediction:
    """Simulate ``workload`` on ``fleet`` (replicas behind its router), through :func:`llmsim.fleet.plan_fleet`.

    Segments become the fleet's prompt segments under the key the client derives their ids from,
    so the replicas' prefix caches see what the servers' see (completions API).
    """

    def fleet_pass(placed: list[_Placed]) -> tuple[list[_Simulated], int, int]:
        requests = tuple(
            FleetRequest(
                Prompt(tuple(FleetSegment(f"bench:{s.key!r}", s.tokens) for s in turn.prompt)),
                turn.output_tokens,
                at,
                None,
                _abort_at(turn, at),
            )
            for _, _, turn, at in placed
        )
        plan = plan_fleet(fleet, FleetWorkload(requests), keep_token_times=True)
        simulated = [
            _Simulated(
                list(o.token_times), o.e2e, o.output_tokens, o.finish_reason is FinishReason.ABORT, o.prefix_hit_tokens
            )
            for o in plan.result.requests
        ]
        steps = sum(r.num_steps for r in plan.result.replicas)
        return simulated, plan.summary.num_preemptions, steps

    return _settle(workload, turnaround, fleet_pass)


def _settle(workload: Workload, turnaround: float, simulate_pass: _Pass) -> Prediction:
    """Place every turn whose predecessor's end is known, simulate, and repeat until nothing moves."""
    ends: dict[tuple[int, int], float] = {}
    for passes in range(1, MAX_PASSES + 1):
        placed: list[_Placed] = []
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
        results, preemptions, steps = simulate_pass(placed)
        new_ends = {(c, j): at + r.e2e for (c, j, _, at), r in zip(placed, results, strict=True)}
        if new_ends == ends or (not pending and passes == 1):
            return Prediction(_records(placed, results, workload), preemptions, steps, passes)
        ends = new_ends
    raise RuntimeError(f"the closed-loop prediction did not settle in {MAX_PASSES} passes")
