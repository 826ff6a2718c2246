"""One fast test per rule the engine keeps two copies of for speed (``MIRRORED_RULES`` in
:mod:`llmsim.engine.scheduler`): each compares both sides on random reachable states, so a change
to either side that the other does not follow fails here, in seconds.

States come from stepping a small scheduler through random requests (prefix sharing, LoRA,
preemptions, aborts); every pair is checked at every step of every example.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsim.engine.scheduler import Scheduler, SchedulerOutput, SchedulerParams, Sequence
from llmsim.engine.scheduler.block_hash import hash_blocks, lora_extra_keys
from llmsim.engine.scheduler.decode_run import DecodeRun, _admits_any
from llmsim.engine.scheduler.params import LoraParams
from llmsim.fleet import FleetRequest, FleetSimulation, FleetSpec, FleetWorkload, ReplicaGroup, RouterSpec
from llmsim.types import RequestId

from .builders import tiny_params

ADAPTERS = (("a", "/a"), ("b", "/b"), ("c", "/c"))


@dataclass(frozen=True)
class Arrival:
    step: int
    prompt: int
    output: int
    # Leading token ids shared with other requests of the same prefix group (None: no ids at all).
    prefix_group: int | None
    # With a prefix group: the output's ids known too ("ids"), or the block identities of prompt
    # and output given instead of ids, as a fleet replica gives them ("hashes").
    known: str
    lora: str | None
    abort_step: int | None


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[SchedulerParams, list[Arrival], int]:
    block_size = draw(st.sampled_from([1, 2, 4]))
    num_blocks = draw(st.integers(3, 24))
    lora = draw(st.booleans())
    params = tiny_params(
        num_blocks,
        block_size=block_size,
        context_length=num_blocks * block_size,
        max_batch_tokens=draw(st.integers(2, 32)),
        max_num_sequences=draw(st.integers(1, 6)),
        watermark=draw(st.sampled_from([0.0, 0.2, 0.5])),
        enable_prefix_caching=draw(st.booleans()),
        lora=LoraParams(max_loras=draw(st.integers(1, 2)), max_cpu_loras=3, adapters=ADAPTERS) if lora else None,
        step_overhead_s=draw(st.sampled_from([0.0, 0.003])),
        step_overhead_per_sequence_s=draw(st.sampled_from([0.0, 1e-4])),
    )
    # Memory-bound steps (the toy model's 10 ms of weights) or compute-bound ones (20 ms a token).
    flops = draw(st.sampled_from([params.gpu.peak_flops, 1e8]))
    params = dataclasses.replace(params, gpu=dataclasses.replace(params.gpu, peak_flops=flops))
    if draw(st.booleans()):
        # Two tensor-parallel ranks of a model twice the toy's size: each rank holds what the toy
        # does (the same blocks), and every step pays all-reduces (a fixed part and one per token).
        model = dataclasses.replace(
            params.model,
            num_parameters=2 * params.model.num_parameters,
            weight_bytes=2 * params.model.weight_bytes,
            kv_bytes_per_token=2,
            num_hidden_layers=2,
            hidden_size=64,
        )
        gpu = dataclasses.replace(params.gpu, interconnect_bandwidth=1e6, interconnect_latency_s=1e-4)
        params = dataclasses.replace(params, model=model, gpu=gpu, tensor_parallel_size=2)
    if draw(st.booleans()):
        # A mixture of experts: most of the weights are 4 routed experts, one a token, so a step's
        # weight read depends on its batch (decode runs price it per batch size).
        model = dataclasses.replace(
            params.model, num_experts=4, experts_per_token=1, expert_weight_bytes=0.75 * params.model.weight_bytes
        )
        params = dataclasses.replace(params, model=model)
    capacity = num_blocks * block_size
    arrivals = []
    # A crowd arriving in the first steps keeps a queue behind a full pool or batch.
    last_arrival = draw(st.sampled_from([2, 12]))
    for _ in range(draw(st.integers(1, 12))):
        prompt = draw(st.integers(1, capacity))
        arrivals.append(
            Arrival(
                step=draw(st.integers(0, last_arrival)),
                prompt=prompt,
                output=draw(st.integers(0, capacity - prompt)),
                prefix_group=draw(st.none() | st.integers(0, 2)),
                known=draw(st.sampled_from(["prompt", "ids", "hashes"])),
                lora=draw(st.sampled_from([None, "a", "b", "c"])) if lora else None,
                abort_step=draw(st.none() | st.integers(0, 30)),
            )
        )
    return params, arrivals, draw(st.integers(1, 32))


def _sequence(params: SchedulerParams, index: int, a: Arrival) -> Sequence:
    ids = None
    if a.prefix_group is not None:
        # The first half of the prompt is the group's, the rest the request's own.
        shared = a.prompt // 2
        ids = tuple(range(a.prefix_group * 1000, a.prefix_group * 1000 + shared))
        ids += tuple(range(100_000 + index * 1000, 100_000 + index * 1000 + a.prompt - shared))
    keys = None
    lora_id = 0
    if a.lora is not None:
        lora_id = 1 + [name for name, _ in ADAPTERS].index(a.lora)
        keys = lora_extra_keys(a.lora, dict(ADAPTERS)[a.lora])
    outputs = None
    if ids is not None and a.known != "prompt":
        outputs = tuple(range(200_000 + index * 1000, 200_000 + index * 1000 + a.output))
    if ids is not None and a.known == "hashes":
        assert outputs is not None
        hashes = hash_blocks(ids + outputs, params.block_size, keys) if params.enable_prefix_caching else []
        return Sequence(
            RequestId(str(index)), 0.0, a.prompt, a.output, lora_name=a.lora, lora_id=lora_id, block_hashes=hashes
        )
    seq = Sequence(
        RequestId(str(index)),
        0.0,
        a.prompt,
        a.output,
        prompt_token_ids=ids,
        output_token_ids=outputs,
        lora_name=a.lora,
        lora_id=lora_id,
        extra_keys=keys,
    )
    if params.enable_prefix_caching and ids is not None:
        seq.block_hashes = hash_blocks(ids, params.block_size, keys)
    return seq


def states(params: SchedulerParams, arrivals: list[Arrival], num_steps: int) -> Iterator[Scheduler[Sequence]]:
    """The scheduler between its steps (arrivals of the coming step queued), stepped to the end."""
    sched: Scheduler[Sequence] = Scheduler(params)
    if params.lora is not None:
        for name, _ in params.lora.adapters:
            sched.load_lora(name)
    seqs = [_sequence(params, i, a) for i, a in enumerate(arrivals)]
    now = 0.0
    for step in range(num_steps):
        for seq, a in zip(seqs, arrivals, strict=True):
            if a.step == step:
                sched.add_requests([seq], now)
            if a.abort_step == step and a.step <= step:
                sched.abort(seq, now)
        if not sched.has_work():
            continue
        yield sched
        out = sched.schedule(now)
        now += sched.step_duration(out)
        sched.update_from_output(out, now)


def _fields(out: SchedulerOutput[Sequence]) -> tuple[object, ...]:
    return (
        [s.request_id for s in out.scheduled],
        [s.request_id for s in out.preempted],
        out.num_prefill_tokens,
        out.num_decode_tokens,
        out.num_context_tokens,
        out.prefix_cache_queries,
        out.prefix_cache_hits,
    )


def _seq_fields(seq: Sequence) -> tuple[object, ...]:
    return (seq.num_computed_tokens, seq.num_cached_blocks, list(seq.blocks), list(seq.block_hashes))


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_schedule_running_decodes_as_take_does(scenario: tuple[SchedulerParams, list[Arrival], int]) -> None:
    """``Scheduler._schedule_running``'s inlined decode and ``Scheduler._take``'s decode case."""
    for sched in states(*scenario):
        bs = sched.kv.block_size
        for i, seq in enumerate(sched.running):
            if not (seq.num_output_tokens and seq.num_computed_tokens + 1 == seq.num_tokens):
                continue
            inlined, taken = copy.deepcopy(sched), copy.deepcopy(sched)
            # The inlined path: this sequence alone, with a budget of its one token.
            inlined.running = [inlined.running[i]]
            out_inlined: SchedulerOutput[Sequence] = SchedulerOutput(0)
            budget = inlined._schedule_running(out_inlined, 1)
            if out_inlined.preempted:
                continue  # no room for its next block: not the decode case
            assert budget == 0
            # _take, after the same allocation.
            seq_taken = taken.running[i]
            if -(-(seq_taken.num_computed_tokens + 1) // bs) > len(seq_taken.blocks):
                assert taken.kv.allocate_slots(seq_taken, 1)
            out_taken: SchedulerOutput[Sequence] = SchedulerOutput(0)
            taken._take(out_taken, seq_taken, 1)
            assert _fields(out_inlined) == _fields(out_taken)
            assert _seq_fields(inlined.running[0]) == _seq_fields(seq_taken)
            assert inlined.kv.cached_hashes() == taken.kv.cached_hashes()
            assert inlined.kv.num_free == taken.kv.num_free


@SETTINGS
@given(scenarios(), st.integers(0, 5))
def test_releasing_names_who_update_from_output_gives_a_token(
    scenario: tuple[SchedulerParams, list[Arrival], int], abort: int
) -> None:
    """``Scheduler.releasing`` (the live driver's) and the release rule of ``update_from_output``."""
    for sched in states(*scenario):
        state = copy.deepcopy(sched)
        out = state.schedule(0.0)
        if out.scheduled and abort:
            # A client gone while the step runs gets nothing at its end.
            state.abort(out.scheduled[abort % len(out.scheduled)], 0.0)
        expected = [s.request_id for s in state.releasing(out.scheduled)]
        released = state.update_from_output(out, 1.0).released
        assert [s.request_id for s in released] == expected


@SETTINGS
@given(scenarios(), st.integers(0, 40))
def test_admits_any_answers_as_schedule_waiting_decides(
    scenario: tuple[SchedulerParams, list[Arrival], int], spent: int
) -> None:
    """``decode_run._admits_any`` and ``Scheduler._schedule_waiting``'s admission test."""
    for sched in states(*scenario):
        budget = 1 + spent % sched.params.max_batch_tokens
        # Each waiting request in turn at the head of the queue: more heads that must wait (no
        # blocks, no adapter slot) with others behind them.
        for k in range(len(sched.waiting)):
            state = copy.deepcopy(sched)
            state.waiting.rotate(-k)
            asked = copy.deepcopy(state)
            out: SchedulerOutput[Sequence] = SchedulerOutput(0)
            state._schedule_waiting(out, budget, 0.0)
            assert _admits_any(asked, budget) == bool(out.scheduled)


@SETTINGS
@given(scenarios())
def test_decode_runs_price_steps_as_the_cost_model(scenario: tuple[SchedulerParams, list[Arrival], int]) -> None:
    """``CostModel.step_duration`` and its copy in ``DecodeRun.extend``, bit for bit."""
    params, arrivals, num_steps = scenario
    for sched in states(params, arrivals, num_steps + 20):
        state = copy.deepcopy(sched)
        run = DecodeRun.plan(state, 0.0, -1.0)
        if run is None:
            continue
        run.extend(64)
        cost = state.cost
        for j in range(run.num_steps):
            size = run.batch[j]
            assert run.durations[j] == cost.step_duration(size, run.context[j], size)


@SETTINGS
@given(scenarios(), st.integers(1, 64))
def test_a_finished_run_brings_its_sequences_up_to_date_as_bring_does(
    scenario: tuple[SchedulerParams, list[Arrival], int], steps: int
) -> None:
    """``DecodeRun._bring`` and its copy in ``DecodeRun.finish``."""
    params, arrivals, num_steps = scenario
    for sched in states(params, arrivals, num_steps + 20):
        state = copy.deepcopy(sched)
        run = DecodeRun.plan(state, 0.0, -1.0)
        if run is None:
            continue
        run.extend(steps)
        run.advance(run.num_steps, run.num_steps)
        run._plan = None  # the run ends here
        inlined, brought = copy.deepcopy(run), copy.deepcopy(run)
        inlined.finish()
        k = brought.num_steps
        for p in brought._active:
            brought._bring(p, k, k, brought.ends[:k])
        for a, b in zip(inlined.seqs, brought.seqs, strict=True):
            assert (a.num_computed_tokens, a.num_output_tokens, a.token_times, a.first_token_time) == (
                b.num_computed_tokens,
                b.num_output_tokens,
                b.token_times,
                b.first_token_time,
            )


@SETTINGS
@given(scenarios(), st.integers(1, 3), st.sampled_from([None, 1, 2]))
def test_the_fleet_records_an_outcome_as_sequence_to_stats_reports_it(
    scenario: tuple[SchedulerParams, list[Arrival], int], replicas: int, concurrency: int | None
) -> None:
    """``Sequence.to_stats`` and its figures computed in ``FleetSimulation._record``."""
    params, arrivals, _ = scenario
    requests = []
    for i, a in enumerate(arrivals):
        ids = _sequence(params, i, a).prompt_token_ids
        abort_at = None if a.abort_step is None else a.abort_step * 0.01
        requests.append(FleetRequest.of(a.step * 0.01, a.prompt, a.output, abort_at, ids, adapter=a.lora))
    fleet = FleetSpec((ReplicaGroup("r", "m", params, replicas),), RouterSpec("least-requests", 0.0))
    simulation = FleetSimulation(fleet, FleetWorkload(tuple(requests), concurrency), keep_token_times=True)
    result = simulation.run()
    for outcome, seq in zip(result.requests, simulation.seqs, strict=True):
        if seq is None:
            continue  # never sent: no sequence to report
        stats = seq.to_stats()
        assert (
            outcome.arrival,
            outcome.prompt_tokens,
            outcome.output_tokens,
            outcome.finish_reason,
            outcome.ttft,
            outcome.e2e,
            outcome.queue_time,
            outcome.num_preemptions,
            outcome.prefix_hit_tokens,
            list(outcome.token_times),
        ) == (
            stats.arrival,
            stats.prompt_tokens,
            stats.output_tokens,
            stats.finish_reason,
            stats.ttft,
            stats.e2e,
            stats.queue_time,
            stats.num_preemptions,
            stats.num_cached_tokens,
            stats.token_times,
        )


def test_admits_any_counts_prefix_hits_as_schedule_waiting_does() -> None:
    """The admission pair on a state random runs rarely reach: a waiting request fits only because
    its prompt's first blocks are held by a running request that shares them (hits on blocks in
    use take no free block; without the hits the whole request would not fit)."""
    params = tiny_params(14, block_size=1, context_length=14, max_num_sequences=4, enable_prefix_caching=True)
    arrivals = [
        # Holds 8 prompt blocks, its first 4 ids shared with group 0, while the next one waits.
        Arrival(step=0, prompt=8, output=2, prefix_group=0, known="ids", lora=None, abort_step=None),
        # Its first 4 prompt ids the running request's: with those hits it fits in the 6 blocks
        # left, without them it would not.
        Arrival(step=1, prompt=8, output=1, prefix_group=0, known="ids", lora=None, abort_step=None),
    ]
    fits_only_with_hits = 0
    for sched in states(params, arrivals, 4):
        if not sched.waiting:
            continue
        head = sched.waiting[0]
        hits = sched.kv.find_cached_prefix(head)
        kv = sched.kv
        fits_only_with_hits += kv.num_blocks_to_admit(head, hits) <= kv.num_free < kv.num_blocks_to_admit(head, [])
        state, asked = copy.deepcopy(sched), copy.deepcopy(sched)
        out: SchedulerOutput[Sequence] = SchedulerOutput(0)
        state._schedule_waiting(out, params.max_batch_tokens, 0.0)
        assert _admits_any(asked, params.max_batch_tokens) == bool(out.scheduled)
    assert fits_only_with_hits, "the example no longer reaches the state it is for"


@SETTINGS
@given(scenarios(), st.booleans(), st.integers(0, 5))
def test_releasing_pipelined_names_who_the_pipelined_update_gives_a_token(
    scenario: tuple[SchedulerParams, list[Arrival], int], async_scheduling: bool, abort: int
) -> None:
    """``Scheduler.releasing_pipelined`` (the live pipeline loop's) and the release rule of the
    pipelined ``update_from_output``, on the batch queue's states: batches in flight, in-flight
    placeholders, preemptions of sequences with batches in flight (their stale tokens)."""
    params, arrivals, num_steps = scenario
    # Two stages of a model twice the size: each stage's GPUs hold what the scenario's do (the same blocks).
    model = dataclasses.replace(
        params.model,
        num_parameters=2 * params.model.num_parameters,
        weight_bytes=2 * params.model.weight_bytes,
        kv_bytes_per_token=2 * params.model.kv_bytes_per_token,
        num_hidden_layers=2,
        hidden_size=64,
    )
    gpu = dataclasses.replace(params.gpu, interconnect_bandwidth=1e6, interconnect_latency_s=1e-4)
    params = dataclasses.replace(
        params, model=model, gpu=gpu, pipeline_parallel_size=2, async_scheduling=async_scheduling
    )
    sched: Scheduler[Sequence] = Scheduler(params)
    if params.lora is not None:
        for name, _ in params.lora.adapters:
            sched.load_lora(name)
    seqs = [_sequence(params, i, a) for i, a in enumerate(arrivals)]
    depth = 3 if async_scheduling else 2
    in_flight: list[SchedulerOutput[Sequence]] = []
    for step in range(4 * num_steps):
        for seq, a in zip(seqs, arrivals, strict=True):
            if a.step == step:
                sched.add_requests([seq], float(step))
            if a.abort_step == step and a.step <= step:
                sched.abort(seq, float(step))
        while sched.has_work() and len(in_flight) < depth:
            in_flight.append(sched.schedule(float(step)))
        if not in_flight:
            continue
        out = in_flight.pop(0)
        if out.sampled and abort:
            # A client gone while the batch runs gets nothing at its end.
            sched.abort(out.sampled[abort % len(out.sampled)], float(step))
        expected = [s.request_id for s in sched.releasing_pipelined(out)]
        released = sched.update_from_output(out, step + 0.5).released
        assert [s.request_id for s in released] == expected
        sched.kv.audit([*sched.running, *(s for s in sched.waiting if s.blocks)])
    for seq in seqs:
        # Nothing is released twice or past the plan.
        assert seq.num_output_tokens <= seq.max_output_tokens
        assert len(seq.token_times) == seq.num_output_tokens
