"""Runs of decode steps, jumped over without visiting each sequence at each step (virtual time's fast-forward).

On a busy replica most steps change nothing but lengths: every running sequence decodes one
token, nobody is admitted, preempted or aborted. Stepping such a run costs one pass over the batch
per step; the run below costs a few float operations per step, plus the
work that really happens: one block allocation per sequence every ``block_size`` steps, the
output blocks it caches, and its finish. A run starting at ``t`` exists when
(:meth:`DecodeRun.plan` checks it, and the scheduler's own rules say why each is needed):

- every running sequence is decoding (prefill done) and all of them fit the token budget;
- nothing waiting could be admitted now, and so in no step of the run: free blocks only fall,
  the running adapters stay the same, and a cached prefix only shrinks (evictions), unless a
  running sequence caches an output block the head might hit, which ends the run before it;
- every running LoRA adapter is loaded (no step of the run loads one).

It ends before the first step in which something else would happen: an arrival joins (with
async scheduling's cutoff), a client leaves during the step, the blocks to allocate exceed the
free ones (frees inside the run are not counted, so that step is stepped and may preempt); and,
if anyone waits, after the first step in which a sequence finishes (freed blocks may let the head
in) or before one in which a sequence caches an output block. With an empty waiting queue,
finishes do not end a run: the batch shrinks and the run goes on to the last sequence's end.

NOTE: the timeline is bit-identical to stepping, not merely close. Each step's duration comes
from :meth:`Scheduler.step_duration` on that step's batch shape (``B`` decode tokens, context
``sum(computed) + B x (j + 1)``), and the times are summed one step at a time, in the stepping
loop's order. A closed-form sum over a run would be faster still but round differently, and an
arrival compared with a step start could then join a different step.

The caller owns time: it applies the run's operations up to any instant (:meth:`sync`), cuts it
short when an arrival comes (:meth:`cut_for_arrival`) or turns the step in flight into an ordinary
:class:`SchedulerOutput` when a client leaves (:meth:`stop`), so a fleet can look at a replica
between its events.

A run cut for an arrival need not end there: :meth:`absorb` makes the step that admits it (the
scheduler's own admission, beside the batch's decodes) a step of the run, and the admitted
requests decode with the batch from the next step on, as positions that joined late (their
counters offset so that the run's per-step formulas hold). Without it every request routed to a
busy replica cost a pass over its batch four times (the run's end, a stepped step and its
release, a new run's preparation): at 20 req/s on one replica (batch ~50) absorbing halves the
work, on a 16-replica fleet at batch ~16 it saves ~6 %.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable
from typing import Generic, TypeVar

from llmsim.engine.scheduler.scheduler import ItlGaps, Scheduler, SchedulerOutput
from llmsim.engine.scheduler.sequence import Sequence, SequenceStatus
from llmsim.types import StepStats

S = TypeVar("S", bound=Sequence)

_RUNNING = SequenceStatus.RUNNING
_FINISHED = SequenceStatus.FINISHED

#: Called with a step's index in the run once its end is applied.
StepHook = Callable[[int], None]

#: Steps planned when a run starts; each extension plans as many again as are planned already.
#: A fleet's replica is often cut short by the next request routed to it: planning in chunks
#: keeps the work spent on steps that never happen to a fraction.
FIRST_CHUNK = 16


class _Plan:
    """Where a run's planning stopped: what the next steps are planned from.

    A plain class, not a dataclass: compiled, a dataclass's generated ``__init__`` runs
    interpreted (~6,000 instructions a run against a few hundred).
    """

    __slots__ = (
        "allocated",
        "allocs_at",
        "batch",
        "computed",
        "free",
        "horizon",
        "next_abort",
        "next_arrival",
        "next_finish",
        "previous",
        "stores_at",
        "t",
        "waiting",
    )

    def __init__(
        self,
        *,
        horizon: int,
        waiting: bool,
        next_arrival: float,
        next_abort: float,
        free: int,
        allocs_at: list[int],
        stores_at: list[int],
        batch: int,
        computed: int,
        t: float,
        previous: float,
        next_finish: int = 0,
    ) -> None:
        # Steps the run may reach at most (the last finish, or the first one if someone waits).
        self.horizon = horizon
        self.waiting = waiting
        self.next_arrival = next_arrival
        self.next_abort = next_abort
        # Free blocks at the start, and blocks the planned steps allocate (frees not counted).
        self.free = free
        self.allocated = 0
        self.allocs_at = allocs_at
        self.stores_at = stores_at
        self.batch = batch
        self.computed = computed
        # Start of the next step to plan, and of the step before it.
        self.t = t
        self.previous = previous
        # Index in the run's finish steps of the first one not planned yet.
        self.next_finish = next_finish


def _after(values: list[float], x: float, lo: int, hi: int) -> int:
    """``bisect.bisect_right(values, x, lo, hi)``, over floats. Compiled, this compares unboxed
    floats in place; the module's generic call compares boxed ones (~2,000 instructions a sync)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if x < values[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _before(values: list[float], x: float, lo: int, hi: int) -> int:
    """``bisect.bisect_left(values, x, lo, hi)``, over floats (see :func:`_after`)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _known_tokens(seq: Sequence, block_size: int) -> int:
    """Leading tokens whose content the prefix cache can identify (so whose full blocks it may store)."""
    prompt = seq.prompt_token_ids
    if prompt is not None:
        outputs = seq.output_token_ids
        return max(len(prompt) + (len(outputs) if outputs is not None else 0), len(seq.block_hashes) * block_size)
    return len(seq.block_hashes) * block_size


def _admits_any(sched: Scheduler[S], budget: int) -> bool:
    """Whether ``Scheduler._schedule_waiting`` would admit someone now (its loop, without the changes).

    NOTE: ``_schedule_waiting``'s admission test, repeated: a mirrored rule, see the package docstring.
    """
    waiting = sched.waiting
    running = sched.running
    if not waiting or budget <= 0 or len(running) >= sched.params.max_num_sequences:
        return False
    kv = sched.kv
    lora = sched.params.lora
    max_loras = lora.max_loras if lora is not None else 0
    loras = {s.lora_name for s in running if s.lora_name is not None} if max_loras else set()
    reserve = sched.watermark_blocks if running else 0
    for seq in waiting:
        name = seq.lora_name
        if name is not None and len(loras) >= max_loras and name not in loras:
            continue  # skipped for the step, as _schedule_waiting does
        hits = kv.find_cached_prefix(seq)
        return kv.num_blocks_to_admit(seq, hits) + reserve <= kv.num_free
    return False


class DecodeRun(Generic[S]):
    """``K`` decode steps of a fixed batch (shrinking only as sequences finish), from ``starts[0]``.

    Build with :meth:`plan`. Operations are applied in the stepping loop's order: the start of
    step 0 (at construction), then end 0, start 1, end 1, ... up to what the caller asks for.
    """

    __slots__ = (
        "_absorbed_first_tokens",
        "_absorbed_prefill",
        "_absorbed_step",
        "_acting",
        "_active",
        "_alloc_seqs",
        "_allocs",
        "_c0",
        "_finish_steps",
        "_finishing",
        "_first_index",
        "_from",
        "_known",
        "_last",
        "_lora_steps",
        "_next_finish",
        "_o0",
        "_only_allocating",
        "_plan",
        "_plan_start",
        "_stores",
        "batch",
        "context",
        "durations",
        "ends",
        "finished",
        "num_ends",
        "num_starts",
        "num_steps",
        "peak_used",
        "sched",
        "seqs",
        "starts",
    )

    def __init__(self, sched: Scheduler[S], seqs: list[S]) -> None:
        self.sched = sched
        # The batch at the start, in running order; positions index every per-sequence list.
        self.seqs = seqs
        self._c0 = [s.num_computed_tokens for s in seqs]
        # Positions whose last step has not ended, in batch order (the running ones).
        self._active = dict.fromkeys(range(len(seqs)))
        self._o0 = [s.num_output_tokens for s in seqs]
        # Run step in which each sequence releases its last planned token.
        self._last = [s.max_output_tokens - s.num_output_tokens - 1 for s in seqs]
        self._known: list[int] = []
        self._first_index = sched.num_steps
        # Per step: start and end times, duration, batch size, context tokens read.
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.durations: list[float] = []
        self.batch: list[int] = []
        self.context: list[int] = []
        # Most blocks in use during any started step (after its allocations).
        self.peak_used = sched.kv.num_used
        # Positions finishing at the end of each step (running order), and those steps in order.
        self._finishing: dict[int, list[int]] = {}
        self._finish_steps: list[int] = []
        self._next_finish = 0
        # Steps whose running adapters differ from the step before (LoRA's LRU is touched then).
        self._lora_steps: set[int] = set()
        # By step mod block_size: positions that allocate a block, or may cache one, in such a step.
        self._allocs: list[list[int]] = []
        self._stores: list[list[int]] = []
        self._acting: list[bool] = []
        self._alloc_seqs: list[list[S]] = []
        self._only_allocating: list[list[S]] = []
        self.num_steps = 0
        self.num_starts = 0
        self.num_ends = 0
        # Sequences that finished in applied steps, for the caller to collect.
        self.finished: list[S] = []
        # Where planning stopped, while more steps may follow (None: the run ends at num_steps).
        self._plan: _Plan | None = None
        # The step planning started from (0, or the step after the last absorbed one).
        self._plan_start = 0
        # Sequences admitted into the run (see absorb): position -> the step of their prefill.
        self._from: dict[int, int] = {}
        # The last step that admitted some (-1: none), how many first tokens it releases and its
        # prefill tokens. Only the last can be unended (absorb comes after every step's end).
        self._absorbed_step = -1
        self._absorbed_first_tokens = 0
        self._absorbed_prefill = 0

    # -- planning -------------------------------------------------------------------------

    @classmethod
    def plan(
        cls,
        sched: Scheduler[S],
        start: float,
        previous_start: float,
        *,
        next_arrival: float = math.inf,
        next_abort: float = math.inf,
        min_steps: int = 2,
    ) -> DecodeRun[S] | None:
        """The run of decode steps starting at ``start``, with its first step started; None if there
        is none of at least ``min_steps`` steps.

        Parameters
        ----------
        sched:
            The scheduler, between steps: arrivals up to ``start``'s cutoff admitted to its queue.
        start, previous_start:
            When the run's first step starts, and when the step before it started (async
            scheduling's cutoff).
        next_arrival:
            The earliest arrival not yet queued: the run ends before the step it would join.
        next_abort:
            The earliest client departure: the run ends before the step it falls in.
        """
        running = sched.running
        params = sched.params
        batch = len(running)
        if batch == 0 or batch > params.max_batch_tokens:
            return None
        # Newest first: a sequence admitted in the last steps is the one still in prefill.
        for seq in reversed(running):
            # Decoding: the prompt (and any recompute) done, one released token to compute.
            if not seq.num_output_tokens or seq.num_computed_tokens + 1 != seq.num_tokens:
                return None
        # A step that loads an adapter costs more than the roofline: stepped, not jumped.
        loaded = sched.loaded_loras
        if params.lora is not None and any(s.lora_name is not None and s.lora_name not in loaded for s in running):
            return None
        waiting = bool(sched.waiting)
        if waiting and _admits_any(sched, params.max_batch_tokens - batch):
            return None
        run: DecodeRun[S] = cls(sched, list(running))
        run._prepare(start, previous_start, waiting, next_arrival, next_abort)
        run.extend(max(min_steps, FIRST_CHUNK))
        if run.num_steps < min_steps:
            return None
        run.advance(1, 0)
        return run

    def _prepare(
        self, start: float, previous_start: float, waiting: bool, next_arrival: float, next_abort: float
    ) -> None:
        """Who allocates, caches and finishes in which step; the state :meth:`extend` plans from."""
        sched = self.sched
        kv = sched.kv
        bs = kv.block_size
        seqs = self.seqs
        c0 = self._c0
        last = self._last
        # Per residue of the step index mod block_size: who allocates (and who may cache an
        # output block) in such a step, in batch order.
        allocs: list[list[int]] = [[] for _ in range(bs)]
        stores: list[list[int]] = [[] for _ in range(bs)]
        known = [0] * len(seqs)
        finishing = self._finishing
        # Once per sequence per run.
        for p, c in enumerate(c0):
            allocs[-c % bs].append(p)
            finishing.setdefault(last[p], []).append(p)
        if kv.enable_caching:
            for p, seq in enumerate(seqs):
                if seq.hashable:
                    known[p] = k = _known_tokens(seq, bs)
                    if k > c0[p]:
                        # Step j fills token c + j + 1: a full block to cache if its content is known.
                        stores[(-c0[p] - 1) % bs].append(p)
        self._known = known
        self._allocs = allocs
        self._stores = stores
        self._acting = [bool(a or x) for a, x in zip(allocs, stores, strict=True)]
        self._alloc_seqs = [[seqs[p] for p in a] for a in allocs]
        self._only_allocating = [[] if x else a for a, x in zip(self._alloc_seqs, stores, strict=True)]
        self._finish_steps = sorted(finishing)
        if sched.params.lora is not None:
            self._lora_steps.add(0)
        # With a queue, the first finish may let its head in: stop after that step.
        horizon = (self._finish_steps[0] if waiting else self._finish_steps[-1]) + 1
        self._plan = _Plan(
            horizon=horizon,
            waiting=waiting,
            next_arrival=next_arrival,
            next_abort=next_abort,
            free=kv.num_free,
            allocs_at=[len(a) for a in allocs],
            stores_at=[len(x) for x in stores],
            batch=len(seqs),
            computed=sum(c0),
            t=start,
            previous=previous_start,
        )

    def extend(self, count: int) -> None:
        """Plan up to ``count`` more steps (fewer if the run must end sooner)."""
        plan = self._plan
        if plan is None:
            return
        sched = self.sched
        bs = sched.kv.block_size
        seqs = self.seqs
        c0 = self._c0
        last = self._last
        known = self._known
        stores = self._stores
        async_scheduling = sched.params.async_scheduling
        # Scheduler.step_duration of a decode step of ``batch`` sequences (no prefill, no adapter
        # load: CostModel.step_duration with batch tokens and sequences), inlined, operation for
        # operation: it is the run's inner loop.
        cost = sched.cost
        seconds_per_token = cost.seconds_per_token
        weight_time = cost.weight_time
        kv_seconds_per_token = cost.kv_seconds_per_token
        overhead = cost.overhead
        overhead_per_sequence = cost.overhead_per_sequence
        all_reduce_seconds_per_token = cost.all_reduce_seconds_per_token
        allocs_at = plan.allocs_at
        stores_at = plan.stores_at
        waiting = plan.waiting
        next_arrival = plan.next_arrival
        next_abort = plan.next_abort
        free = plan.free
        allocated = plan.allocated
        batch = plan.batch
        computed = plan.computed
        t = plan.t
        previous = plan.previous
        starts = self.starts
        ends = self.ends
        durations = self.durations
        sizes = self.batch
        contexts = self.context
        finishing = self._finishing
        finish_steps = self._finish_steps
        num_finish_steps = len(finish_steps)
        j = self.num_steps
        stop = min(plan.horizon, j + count)
        # The next step in which someone finishes (the sorted list, not a lookup per step).
        f = plan.next_finish
        next_finish = finish_steps[f] if f < num_finish_steps else -1
        over = False
        # The same products as below, made again only when the batch shrinks.
        compute = seconds_per_token * batch
        weights = weight_time(batch)
        per_sequence = overhead_per_sequence * batch
        all_reduce = all_reduce_seconds_per_token * batch
        # Once per step of the run: a handful of integer and float operations.
        while j < stop:
            # The scheduler is busy at every step of a run (someone is still running).
            if j and (previous if async_scheduling else t) >= next_arrival:
                over = True
                break
            r = j % bs
            if allocated + allocs_at[r] > free:
                over = True
                break
            if waiting and stores_at[r] and any(last[p] >= j and c0[p] + j + 1 <= known[p] for p in stores[r]):
                over = True
                break
            context = computed + batch * (j + 1)
            memory = weights + kv_seconds_per_token * context
            duration = (compute if compute > memory else memory) + overhead + per_sequence + all_reduce
            end = t + duration
            if end > next_abort:
                over = True
                break
            allocated += allocs_at[r]
            # Direct calls (no bound-method locals): compiled, each is a PyList_Append, where a
            # local bound method is a generic call (~110 instructions more per append).
            starts.append(t)
            ends.append(end)
            durations.append(duration)
            sizes.append(batch)
            contexts.append(context)
            if j == next_finish:
                done = finishing[j]
                for p in done:
                    batch -= 1
                    computed -= c0[p]
                    allocs_at[-c0[p] % bs] -= 1
                    if known[p] > c0[p]:
                        stores_at[(-c0[p] - 1) % bs] -= 1
                compute = seconds_per_token * batch
                weights = weight_time(batch)
                per_sequence = overhead_per_sequence * batch
                all_reduce = all_reduce_seconds_per_token * batch
                if self._lora_steps and any(seqs[p].lora_name is not None for p in done):
                    self._lora_steps.add(j + 1)
                f += 1
                next_finish = finish_steps[f] if f < num_finish_steps else -1
            previous = t
            t = end
            j += 1
        self.num_steps = j
        if over or j >= plan.horizon:
            self._plan = None
            return
        plan.allocated = allocated
        plan.next_finish = f
        plan.batch = batch
        plan.computed = computed
        plan.t = t
        plan.previous = previous

    # -- applying it ----------------------------------------------------------------------

    @property
    def end(self) -> float:
        """When the run's last step ends."""
        return self.ends[self.num_steps - 1]

    @property
    def last_start(self) -> float:
        return self.starts[self.num_steps - 1]

    @property
    def done(self) -> bool:
        """Every step planned, started and ended: nothing is left of the run."""
        return self._plan is None and self.num_ends == self.num_steps

    def on_end_of_plan(self) -> None:
        """The caller reached the end of the steps planned so far: plan more, twice as many."""
        if self._plan is not None and self.num_ends == self.num_steps:
            self.extend(max(FIRST_CHUNK, self.num_steps - self._plan_start))

    def next_event(self) -> float:
        """When the caller must next look: the end of the next step in which someone finishes, or the run's end."""
        steps = self._finish_steps
        k = self._next_finish
        while k < len(steps) and steps[k] < self.num_ends:
            k += 1
        self._next_finish = k
        if k < len(steps) and steps[k] < self.num_steps:
            return self.ends[steps[k]]
        return self.end

    def sync(self, now: float, *, starts_at_now: bool, on_end: StepHook | None = None) -> None:
        """Apply every step end at or before ``now`` and every step start before it (at it too if
        ``starts_at_now``: a scrape at ``now`` settled later sees the step that started then)."""
        n = self.num_steps
        k = self.num_starts
        # Most calls (a router looking at every replica) find nothing due.
        if (k >= n or self.starts[k] > now or (self.starts[k] == now and not starts_at_now)) and (
            self.num_ends >= n or self.ends[self.num_ends] > now
        ):
            return
        starts = _after(self.starts, now, k, n) if starts_at_now else _before(self.starts, now, k, n)
        self.advance(max(starts, k), _after(self.ends, now, self.num_ends, n), on_end)

    def run_to_end(self, on_end: StepHook | None = None) -> None:
        """Plan and apply every step, then bring the sequences still running to the run's end."""
        while True:
            self.advance(self.num_steps, self.num_steps, on_end)
            if self._plan is None:
                break
            self.on_end_of_plan()
        self.finish()

    def advance(self, num_starts: int, num_ends: int, on_end: StepHook | None = None) -> None:
        """Apply starts up to ``num_starts`` and ends up to ``num_ends``, interleaved as in time."""
        kv = self.sched.kv
        gaps = self.sched.itl_gaps
        ends = self.ends
        batch = self.batch
        bs = kv.block_size
        # Per residue of the step index: whether a start in such a step allocates or caches, and
        # the sequences that only allocate (no cache store) in it (a finish takes its own out).
        acting = self._acting
        only_allocating = self._only_allocating
        lora_steps = self._lora_steps
        absorbed_step = self._absorbed_step
        first = started = self.num_starts
        ended = self.num_ends
        # The next step in which someone finishes (the sorted list, not a lookup per step).
        finish_steps = self._finish_steps
        num_finish_steps = len(finish_steps)
        f = self._next_finish
        while f < num_finish_steps and finish_steps[f] < ended:
            f += 1
        next_finish = finish_steps[f] if f < num_finish_steps else -1
        # Once per step of the run: a start (allocations every block_size steps per sequence)
        # and an end (nothing, unless someone finishes). The counters are kept in locals and
        # stored before anything that may read them (a start that acts, a finish, the hook).
        while True:
            if started == ended:
                j = started
                if j >= num_starts:
                    break
                started = j + 1
                r = j % bs
                # (Emptiness first: compiled, each membership test boxes j.)
                if acting[r] or (lora_steps and j in lora_steps):
                    self.num_starts = started
                    allocating = only_allocating[r]
                    if allocating and not lora_steps:
                        # _start's common case, without the call: a few blocks popped in one slice.
                        allocated = kv.append_blocks(allocating)
                        assert allocated, "a run never allocates more than the free blocks"
                        if kv.num_used > self.peak_used:
                            self.peak_used = kv.num_used
                    # Blocks in use only grow at a start that allocates.
                    elif self._start(j) and kv.num_used > self.peak_used:
                        self.peak_used = kv.num_used
            else:
                j = ended
                if j >= num_ends:
                    break
                if gaps is not None:
                    if j:
                        # Every sequence of the step released its previous token at the end of the one
                        # before, but those whose prefill it was (absorbed): their first token has no gap.
                        gap = ends[j] - ends[j - 1]
                        count = batch[j]
                        if j == absorbed_step:
                            count -= self._absorbed_first_tokens
                        gaps.add(gap, count)
                    else:
                        self._count_gaps(gaps)
                ended = j + 1
                if j == next_finish:
                    self.num_starts = started
                    self._end(j)
                    f += 1
                    next_finish = finish_steps[f] if f < num_finish_steps else -1
                if on_end is not None:
                    self.num_starts = started
                    self.num_ends = ended
                    on_end(j)
        self.num_starts = started
        self.num_ends = ended
        self._next_finish = f
        self.sched.num_steps += started - first

    def _count_gaps(self, gaps: ItlGaps) -> None:
        """The inter-token gaps of step 0's releases (before a finish extends any token times):
        each sequence's own previous release, usually the end of the step before the run."""
        end = self.ends[0]
        previous = [seq.token_times[-1] for seq in self.seqs]
        if previous.count(previous[0]) == len(previous):
            # All released at the end of the step before (the usual case): one gap.
            gaps.add(end - previous[0], len(previous))
            return
        for before in previous:
            gaps.add(end - before, 1)

    def _start(self, j: int) -> bool:
        """Step ``j`` is scheduled: its block allocations and cache stores, in batch order. False if
        it has none (most steps)."""
        sched = self.sched
        if j in self._lora_steps:
            # The same touches _make_output makes for this batch (the LRU order of adapters).
            active = [self.seqs[p] for p in self._active]  # those whose last step is j or later
            for name in {s.lora_name for s in active if s.lora_name is not None}:
                assert name in sched.loaded_loras, "a run's adapters are all loaded"
                sched.load_lora(name)  # most recently used, as _make_output's touch
        kv = sched.kv
        r = j % kv.block_size
        allocs = self._allocs[r]
        stores = self._stores[r]
        if not allocs and not stores:
            return False
        seqs = self.seqs
        c0 = self._c0
        last = self._last
        if not stores:
            # Each sequence once every block_size steps: a few per step, popped in one slice.
            # (Their computed tokens are brought up to date when the run ends or stops.) The list
            # holds the running ones only: a finish takes its own out.
            allocated = kv.append_blocks(self._alloc_seqs[r])
            assert allocated, "a run never allocates more than the free blocks"
            return True
        # Allocations and cache stores interleaved in batch order, as _schedule_running makes them.
        known = self._known
        allocating = set(allocs)
        for p in sorted(allocating.union(stores)):
            if last[p] < j:
                continue
            seq = seqs[p]
            if p in allocating:
                seq.num_computed_tokens = c0[p] + j
                allocated = kv.allocate_slots(seq, 1)
                assert allocated, "a run never allocates more than the free blocks"
            if c0[p] + j + 1 <= known[p] and (c0[p] + j + 1) % kv.block_size == 0:
                kv.cache_blocks(seq, c0[p] + j + 1)
        return True

    def _end(self, j: int) -> None:
        """Step ``j`` ends: everyone releases a token; those at their last free their blocks."""
        done = self._finishing.get(j)
        if done is None:
            return
        sched = self.sched
        end = self.ends[j]
        bs = sched.kv.block_size
        active = self._active
        # The first step's sequences share one copy of their token times (absorbed ones slice their own).
        times = self.ends[: j + 1] if any(p not in self._from for p in done) else []
        for p in done:
            seq = self.seqs[p]
            self._bring(p, j + 1, j + 1, times)
            sched.finish_blocks(seq, end)
            del active[p]
            # It allocates no more: out of its residue's lists (parallel, in batch order).
            r = -self._c0[p] % bs
            k = self._allocs[r].index(p)
            del self._allocs[r][k]
            del self._alloc_seqs[r][k]
            seq.status = _FINISHED
            seq.finished_time = end
            self.finished.append(seq)
        # One pass, as update_from_output does.
        sched.running = [s for s in sched.running if s.status is _RUNNING]

    def _bring(self, p: int, computed_steps: int, released_steps: int, times: list[float]) -> None:
        """Set sequence ``p``'s counters as of ``computed_steps`` scheduled and ``released_steps`` ended
        steps (``times``: the ends of those, shared by the sequences of the run's first step)."""
        seq = self.seqs[p]
        seq.num_computed_tokens = self._c0[p] + computed_steps
        seq.num_output_tokens = self._o0[p] + released_steps
        joined = self._from.get(p)
        if joined is None:
            seq.token_times.extend(times)
        elif released_steps > joined:
            # Admitted at step ``joined`` (absorb): its tokens are the ends from that step on.
            seq.token_times.extend(self.ends[joined:released_steps])
            seq.first_token_time = self.ends[joined]

    def step_stats(self, j: int) -> StepStats:
        """Step ``j``'s record, as :meth:`Scheduler.step_stats` makes it, once its end is applied (a
        decode step: a replica whose steps are watched never has a run absorb)."""
        sched = self.sched
        kv = sched.kv
        batch = self.batch[j]
        return StepStats(
            index=self._first_index + j,
            start=self.starts[j],
            duration=self.durations[j],
            batch_size=batch,
            num_prefill_tokens=0,
            num_decode_tokens=batch,
            num_running=len(sched.running),
            num_waiting=len(sched.waiting),
            kv_used_blocks=kv.num_used,
            kv_total_blocks=kv.num_usable_blocks,
            num_preemptions=0,
            kv_events=kv.take_events(),
        )

    def finish(self) -> None:
        """After the last step's end: the sequences still running hold the run's tokens."""
        assert self.done, "the run has steps left"
        k = self.num_steps
        times = self.ends[:k]
        c0 = self._c0
        o0 = self._o0
        joined = self._from
        # Once per sequence per run: those whose last step is after the run's. _bring, inlined
        # for the sequences that were in the run from its start (NOTE: a mirrored rule, see the
        # package docstring): at moderate load runs are short and this loop is a tenth of them.
        for p in self._active:
            if p in joined:
                self._bring(p, k, k, times)
                continue
            seq = self.seqs[p]
            seq.num_computed_tokens = c0[p] + k
            seq.num_output_tokens = o0[p] + k
            seq.token_times.extend(times)
        self.sched.kv.check()

    @property
    def goes_on(self) -> bool:
        """Whether some sequence of the run has tokens left after its last planned step (once they end)."""
        return bool(self._active)

    # -- taking requests in ---------------------------------------------------------------

    def absorb(self, now: float, next_arrival: float = math.inf) -> bool:
        """Go on past the last planned step with the step that admits the waiting queue (their
        prefill beside the batch's decodes), then decode what it admitted with the batch; False, with
        nothing changed, when that step is not one a run can hold (the caller then finishes the run
        and steps).

        Called at the end of the planned steps (``now``: the last one's end, after :meth:`sync`),
        with the requests that reached the scheduler by the step's cutoff queued. The step is what
        ``Scheduler.schedule`` makes: the batch's decode allocations in batch order, then
        ``_schedule_waiting`` itself (prefix hits, blocks, watermark, sequence limit). A run holds it
        when nothing is preempted (the decodes' blocks are free), every queued request is new (no
        output yet, no adapter, no output block to cache) and all of their prompts fit the token
        budget together, so each one admitted computes its whole prompt now and decodes from the
        next step. Those left waiting (short of blocks or of sequence slots) make the run one with
        a queue, which ends after its first finish as :meth:`plan`'s does.
        """
        sched = self.sched
        params = sched.params
        kv = sched.kv
        bs = kv.block_size
        j = self.num_steps
        assert self.done, "absorb at the end of the planned steps"
        assert self.num_starts == j > 0, "absorb after a step of the run"
        waiting = sched.waiting
        if not waiting or params.lora is not None or any(self._stores):
            return False
        c0 = self._c0
        active = list(self._active)
        batch = len(active)
        budget = params.max_batch_tokens - batch
        need = 0
        for seq in waiting:
            if (
                seq.num_output_tokens
                or seq.num_preemptions
                or seq.max_output_tokens < 1
                or seq.lora_name is not None
                or seq.prompt_token_ids is not None
                or len(seq.block_hashes) * bs > seq.num_prompt_tokens
            ):
                return False
            need += seq.num_tokens
        # Who crosses a block boundary in step j (the lists hold the running only).
        allocating = self._alloc_seqs[j % bs]
        if not batch or need > budget or len(allocating) > kv.num_free:
            return False
        # Step j starts at now: the batch's decodes take their blocks, then the queue is admitted.
        if allocating:
            kv.append_blocks(allocating)
        out: SchedulerOutput[S] = SchedulerOutput(sched.num_steps)
        sched.num_steps += 1
        sched._schedule_waiting(out, budget, now)
        admitted = out.scheduled
        assert not out.num_decode_tokens, "only new requests are admitted"
        context = sum(c0[p] for p in active) + batch * (j + 1) + out.num_context_tokens
        size = batch + len(admitted)
        duration = sched.cost.step_duration(batch + out.num_prefill_tokens, context, size)
        # Steps planned past a cut are dropped: step j is this one.
        for planned in (self.starts, self.ends, self.durations, self.batch, self.context):
            del planned[j:]
        self.starts.append(now)
        self.ends.append(now + duration)
        self.durations.append(duration)
        self.batch.append(size)
        self.context.append(context)
        seqs = self.seqs
        for seq in admitted:
            assert seq.num_computed_tokens == seq.num_prompt_tokens, "a whole prompt in one step"
            p = len(seqs)
            seqs.append(seq)
            # As if it had decoded from step 0: computed c + i + 1 after step i's start, outputs
            # o + i after its end, from step j + 1 on (step j computes its prompt, releases token 1).
            c = seq.num_prompt_tokens - j - 1
            c0.append(c)
            self._o0.append(-j)
            final = j + seq.max_output_tokens - 1
            self._last.append(final)
            self._known.append(c)  # no block to cache past its prompt
            self._from[p] = j
            self._active[p] = None
            if final not in self._finishing:
                insort(self._finish_steps, final)
            self._finishing.setdefault(final, []).append(p)
            r = -c % bs
            self._allocs[r].append(p)
            self._alloc_seqs[r].append(seq)  # _only_allocating[r] too: the same list, no stores
            self._acting[r] = True
        if admitted:
            self._absorbed_step = j
            self._absorbed_first_tokens = len(admitted)
            self._absorbed_prefill = out.num_prefill_tokens
        self.num_steps = self.num_starts = j + 1
        if kv.num_used > self.peak_used:
            self.peak_used = kv.num_used
        kv.check()
        self._plan_from(j + 1, now, next_arrival)
        return True

    def _plan_from(self, j: int, previous: float, next_arrival: float) -> None:
        """Plan steps from ``j`` (after a step :meth:`absorb` made), as :meth:`plan` would at its start."""
        sched = self.sched
        params = sched.params
        bs = sched.kv.block_size
        c0 = self._c0
        remaining = [p for p in self._active if self._last[p] >= j]
        waiting = bool(sched.waiting)
        if not remaining or (
            waiting and (j - 1 in self._finishing or _admits_any(sched, params.max_batch_tokens - len(remaining)))
        ):
            # A finish at step j - 1's end may let the head in; or it could be admitted at once.
            return
        finish_steps = self._finish_steps
        first_later = bisect_left(finish_steps, j)
        allocs_at = [0] * bs
        computed = 0
        for p in remaining:
            allocs_at[-c0[p] % bs] += 1
            computed += c0[p]
        self._plan = _Plan(
            horizon=(finish_steps[first_later] if waiting else finish_steps[-1]) + 1,
            waiting=waiting,
            next_arrival=next_arrival,
            next_abort=math.inf,
            free=sched.kv.num_free,
            allocs_at=allocs_at,
            stores_at=[0] * bs,
            batch=len(remaining),
            computed=computed,
            t=self.ends[j - 1],
            previous=previous,
            next_finish=first_later,
        )
        self._plan_start = j
        self.extend(FIRST_CHUNK)

    # -- cutting it short ------------------------------------------------------------------

    def cut_for_arrival(self, arrival: float, started_at_now: bool = False) -> None:
        """A request arriving at ``arrival`` (now) joins the first step whose cutoff reaches it: end the
        run before that step (``started_at_now``: a step starting at ``arrival`` has started already)."""
        n = self.num_steps
        if self.sched.params.async_scheduling:
            # Step j sees what arrived by the start of step j - 1 (whether or not step j - 1 has started).
            joins = _before(self.starts, arrival, 0, n) + 1
        elif started_at_now:
            joins = _after(self.starts, arrival, 0, n)
        else:
            joins = _before(self.starts, arrival, 0, n)
        joins = max(joins, 1)
        if joins <= n:
            assert joins >= self.num_starts, "an arrival cannot join a step that has started"
            self.num_steps = joins
            self._plan = None
        elif self._plan is not None:
            # Beyond the steps planned so far: plan no further than the step it joins.
            self._plan.horizon = min(self._plan.horizon, joins)

    def stop(self) -> SchedulerOutput[S] | None:
        """End the run at the last started step: it becomes an ordinary step in flight (returned), or,
        if it has ended too, the run is over (None). Call after :meth:`sync` to the present."""
        j = self.num_starts - 1
        self._plan = None
        if self.num_ends > j:
            self.num_steps = j + 1
            self.finish()
            return None
        self.num_steps = j + 1
        out: SchedulerOutput[S] = SchedulerOutput(self._first_index + j)
        times = self.ends[:j]
        for p in self._active:
            self._bring(p, j + 1, j, times)
            out.scheduled.append(self.seqs[p])
        absorbed = j == self._absorbed_step
        out.num_decode_tokens = self.batch[j] - (self._absorbed_first_tokens if absorbed else 0)
        out.num_prefill_tokens = self._absorbed_prefill if absorbed else 0
        out.num_context_tokens = self.context[j]
        out.kv_used_blocks = self.sched.kv.num_used
        return out
