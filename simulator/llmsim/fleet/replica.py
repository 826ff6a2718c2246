"""One replica of a fleet: a :class:`Scheduler` stepped by the fleet's event loop, and what a gateway
last scraped of it.

The replica follows the live driver's rules exactly (a request joins the first step starting at
or after its arrival, an idle replica restarts at the next arrival, an abort frees blocks at once),
so a one-replica fleet (``simulate()``) gives the live engine's timeline token for token
(``tests/engine/scheduler/test_driver.py``). With pipeline parallelism it runs vLLM's batch queue
(:class:`~llmsim.engine.scheduler.pipeline.Pipeline`): its event is the oldest batch's end, after
which it schedules the next, batch by batch (no decode runs). Otherwise it jumps over runs of
decode steps (:class:`~llmsim.engine.scheduler.decode_run.DecodeRun`); the fleet
then hears from it only when a request finishes or the run ends, and a request routed to it, or
a client leaving it, cuts the run short where the stepping loop would have seen them.

What the router sees is not the live state but the last scrape: an endpoint picker polls each
pod's ``/metrics`` on its own ticker (every 50 ms in the Gateway API Inference Extension), so its
numbers are up to one interval old. The scrape at time ``s`` reads the values a live llmsim
replica's ``/metrics`` would show then (``vllm:num_requests_running``,
``vllm:num_requests_waiting`` including requests not yet admitted, ``vllm:kv_cache_usage_perc``):
the state after every event before ``s``, and after those at ``s`` that the fleet loop has
handled when the scrape is read. Scrapes cost nothing while nobody looks: the view is brought up
to date lazily, before a change and before a routing decision, and a run in progress is applied
up to the scrape's time first (its block allocations move the KV usage between events).

NOTE: scrape ``k`` happens at ``phase + k x interval``, computed from ``k`` each time rather than
summed, so that the same scrape falls at the same float however many events came between.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence as Seq

from llmsim.engine.base import EngineObserver
from llmsim.engine.scheduler.block_hash import BlockHash, ExtraKeys, hash_blocks, lora_extra_keys
from llmsim.engine.scheduler.decode_run import DecodeRun
from llmsim.engine.scheduler.params import SchedulerParams
from llmsim.engine.scheduler.pipeline import Pipeline
from llmsim.engine.scheduler.scheduler import ItlGaps, Scheduler, SchedulerOutput, admission_cutoff, ready_time
from llmsim.engine.scheduler.sequence import Sequence, SequenceStatus
from llmsim.fleet.prompt import BlockHasher, Prompt
from llmsim.fleet.replica_view import ReplicaView
from llmsim.fleet.workload import FleetRequest
from llmsim.types import EngineSnapshot, RequestId


class Replica(ReplicaView):
    """One simulated vLLM replica, its router-side view and its counters.

    Parameters
    ----------
    index, name:
        Position in the fleet and ``<group>/<k>``.
    params:
        The replica's scheduler parameters.
    scrape_interval:
        Seconds between two scrapes of its metrics; 0 for a router that sees live state.
    scrape_phase:
        Time of its first scrape, in ``[0, scrape_interval)``.
    hasher:
        Block identities of prompts for the replica's block size (shared by the replicas of that
        size); None when the replica does not cache prefixes.
    fast_forward:
        Jump over runs of decode steps (False: step every one, the reference).
    observer:
        Receives every step's stats as the step ends, KV-cache events included (None: nobody
        listens, and the replica records no KV-cache events).
    audit:
        Check after every step that the block pool agrees exactly with the running sequences
        (O(blocks) per step: for tests).

    Requests name a LoRA adapter of ``params.lora`` (loaded at startup, as vLLM's
    ``--lora-modules``) or none; a request whose token ids are known (one explicit segment) has
    its blocks hashed as vLLM hashes them (chained sha256 of the ids, adapter included).

    Methods that take ``passed`` are called at the current instant of the fleet loop; ``passed``
    says whether a step of this replica's run that starts at exactly that instant has started
    yet (the fleet loop starts replicas one by one; see ``FleetSimulation``).
    """

    __slots__ = (
        "_audit",
        "_duration",
        "_fast_forward",
        "_hasher",
        "_hashers",
        "_id_hashes",
        "_interval",
        "_loras",
        "_observer",
        "_paused",
        "_phase",
        "_pipe",
        "_pipe_busy_until",
        "_scrape_index",
        "_step_duration",
        "_watched",
        "batch_total",
        "busy_time",
        "deadline",
        "in_flight",
        "inbox",
        "index",
        "itl_gaps",
        "kv_peak_blocks",
        "name",
        "next_scrape",
        "num_preemptions",
        "num_routed",
        "num_steps",
        "received",
        "run",
        "scheduler",
        "starting",
        "step_start",
        "version",
    )

    def __init__(
        self,
        index: int,
        name: str,
        params: SchedulerParams,
        scrape_interval: float,
        scrape_phase: float,
        hasher: BlockHasher | None = None,
        *,
        fast_forward: bool = True,
        observer: EngineObserver | None = None,
        audit: bool = False,
    ) -> None:
        super().__init__(params.block_size)
        self.index = index
        self.name = name
        if params.enable_kv_cache_events and observer is None:
            # Nobody subscribes in a plan: recording would only grow a list.
            params = dataclasses.replace(params, enable_kv_cache_events=False)
        self.scheduler: Scheduler[Sequence] = Scheduler(params)
        if hasher is not None and hasher.block_size != params.block_size:
            raise ValueError(
                f"replica {name}: block hasher for {hasher.block_size}-token blocks, not {params.block_size}"
            )
        self._hasher = hasher if params.enable_prefix_caching else None
        # Per adapter: its block identities, apart from the base model's (made when first needed).
        self._hashers: dict[str, BlockHasher] = {}
        # Prompt token ids (and adapter) -> their sha256 block hashes: equal prompts hashed once.
        self._id_hashes: dict[tuple[tuple[int, ...], str | None], list[bytes]] = {}
        # Adapter name -> (vLLM's lora_int_id, the extra keys on its blocks); all loaded at startup.
        self._loras: dict[str, tuple[int, ExtraKeys]] = {}
        if params.lora is not None:
            for i, (adapter, path) in enumerate(params.lora.adapters, start=1):
                self._loras[adapter] = (i, lora_extra_keys(adapter, path))
                self.scheduler.load_lora(adapter)
        self._observer = observer
        self._audit = audit
        # Whether someone looks at every step (an observer, or the audit).
        self._watched = observer is not None or audit
        # The duration of the step in flight (its stats report it).
        self._duration = 0.0
        self._fast_forward = fast_forward
        self._step_duration = self.scheduler.step_duration
        # Disaggregated prefill/decode: decode legs whose pull completed by a step's start (the
        # fleet then frees their blocks on the prefill side), gathered until the fleet reads them.
        self.received: list[Sequence] = []
        # Routed here, not yet handed to the scheduler (that happens at the next step start).
        self.inbox: list[Sequence] = []
        # The step on the GPU, started at step_start and ending at deadline; None while idle.
        self.in_flight: SchedulerOutput[Sequence] | None = None
        self.deadline = math.inf
        # Or a run of decode steps in progress (never both).
        self.run: DecodeRun[Sequence] | None = None
        # A run at the end of its planned steps with sequences still decoding, between its event
        # and the step start at the same instant, which may take the queue in and go on (absorb).
        self._paused: DecodeRun[Sequence] | None = None
        self.step_start = 0.0
        # Bumped whenever the time of the replica's next event changes (older heap entries are stale).
        self.version = 0
        # Set while the fleet loop has queued this replica to start a step at the current instant.
        self.starting = False
        # The router's view (num_running, num_waiting, kv_usage): the last scrape (live state
        # when the interval is 0).
        self._interval = scrape_interval
        self._phase = scrape_phase
        self._scrape_index = 0
        # When the next scrape not yet taken is due (-inf with no interval: every look is a
        # scrape), so the fleet skips a replica with nothing to settle without calling it.
        self.next_scrape = scrape_phase if scrape_interval > 0.0 else -math.inf
        # Counters for the report.
        self.num_routed = 0
        self.num_steps = 0
        self.busy_time = 0.0
        self.batch_total = 0
        self.num_preemptions = 0
        self.kv_peak_blocks = 0
        # Inter-token gaps of the tokens released here, counted by the scheduler as it releases
        # them: a decode step gives every sequence in it the same gap, so this grows by about
        # one entry per step where a list would hold one float per token.
        self.itl_gaps = ItlGaps()
        self.scheduler.itl_gaps = self.itl_gaps
        # Pipeline parallelism: the batches in flight (vLLM's batch queue), and the end of the
        # last one counted in busy_time (which counts time with any batch on the GPUs).
        sched = self.scheduler
        self._pipe: Pipeline[Sequence] | None = Pipeline(params, sched.cost) if sched.pipelined else None
        self._pipe_busy_until = -math.inf

    # -- what the router reads -------------------------------------------------------------

    def _scrape_time(self, k: int) -> float:
        return self._phase + k * self._interval

    def _last_scrape(self, now: float, *, strictly_before: bool) -> int:
        """Index of the last scrape at (or strictly before) ``now``; at least the next unsettled one."""
        k = max(self._scrape_index, math.floor((now - self._phase) / self._interval))
        # Float rounding either way.
        while self._scrape_time(k + 1) < now or (not strictly_before and self._scrape_time(k + 1) == now):
            k += 1
        while k > self._scrape_index and (
            self._scrape_time(k) > now or (strictly_before and self._scrape_time(k) == now)
        ):
            k -= 1
        return k

    def observe(self, now: float, passed: bool = False, *, prefix_cache: bool = True) -> None:
        """Bring the router's view to ``now``: the last scrape at or before it (live state if interval 0),
        and, if asked, the prefix cache to ``now`` (for :meth:`cached_prefix_tokens`)."""
        if self._interval == 0.0:
            self._sync(now, passed)
            self._scrape()
            return
        if self.next_scrape <= now:
            k = self._last_scrape(now, strictly_before=False)
            at = self._scrape_time(k)
            # A scrape before now saw every step that started at its time; one at now, those started so far.
            self._sync(at, True) if at < now else self._sync(now, passed)
            self._scrape()
            self._settled(k)
        if prefix_cache:
            self._sync(now, passed)

    def live_snapshot(self, now: float, passed: bool = False) -> EngineSnapshot:
        """The scheduler's live figures at ``now`` (what a data-parallel API server reads of its
        ranks); the router's view is settled first."""
        self.observe(now, passed, prefix_cache=True)
        return self.scheduler.snapshot(len(self.inbox))

    def cached_prefix_tokens(self, prompt: Prompt) -> int:
        """Tokens at the start of ``prompt`` this replica's prefix cache holds (whole blocks), as of
        the last :meth:`observe`.

        What the prefix-affinity router and the weighted router's prefix scorer read: the
        replica's own cache, as a precise prefix-cache scorer fed by KV events sees it.
        """
        hasher = self._hasher
        if hasher is None:
            return 0
        return self.scheduler.cached_prefix_tokens(hasher.of(prompt.segments))

    def prefix_hit_tokens(self, seq: Sequence) -> int:
        """Prompt tokens of ``seq`` served from the prefix cache at its first admission (vLLM's
        ``num_cached_tokens``: the hit-rate numerator)."""
        return seq.num_cached_tokens

    def prefix_query_tokens(self, seq: Sequence) -> int:
        """Prompt tokens ``seq`` looked up in the prefix cache (the hit-rate denominator): its prompt
        when it was admitted on a replica that caches, else 0, as vLLM counts queries."""
        if self._hasher is None or seq.scheduled_time is None:
            return 0
        return seq.num_prompt_tokens

    def sequence(self, index: int, request: FleetRequest, arrival: float, own_from: int | None = None) -> Sequence:
        """The scheduler's view of request ``index`` sent here at ``arrival``.

        With prefix caching its blocks get their identities (prompt, then the answer a later
        prompt quotes), so it hits what other requests cached and caches what it computes;
        ``own_from`` is the token where its own text begins (``FleetWorkload.own_text_starts``):
        blocks from there on no other request can hit.
        """
        hashes: Seq[BlockHash] = ()
        hasher = self._hasher
        prompt = request.prompt
        prompt_tokens = prompt.num_tokens
        adapter = request.adapter
        lora_id, keys = 0, None
        if adapter is not None:
            lora = self._loras.get(adapter)
            if lora is None:
                raise ValueError(f"request {index}: unknown LoRA adapter '{adapter}' on replica {self.name}")
            lora_id, keys = lora
        segments = prompt.segments
        ids = segments[0].ids if len(segments) == 1 else None
        if ids is not None:
            # Known token ids: hashed as vLLM hashes them, the answer's as they are computed.
            answer = request.answer
            seq = Sequence(
                RequestId(str(index)),
                arrival,
                prompt_tokens,
                request.output_tokens,
                prompt_token_ids=ids,
                output_token_ids=answer.ids if answer is not None else None,
                lora_name=adapter,
                lora_id=lora_id,
                extra_keys=keys,
            )
            if hasher is not None:
                key = (ids, adapter)
                known = self._id_hashes.get(key)
                if known is None:
                    known = self._id_hashes[key] = hash_blocks(ids, self.block_size, keys)
                seq.block_hashes = list(known)
            return seq
        if hasher is not None and prompt_tokens > 0 and request.cacheable:
            if adapter is not None:
                hasher = self._hashers.get(adapter) or self._hashers.setdefault(
                    adapter, BlockHasher(self.block_size, f"lora:{adapter}\0")
                )
            if request.answer is not None:
                segments = (*segments, request.answer)
            # Not copied: a sequence without token ids never changes its identities.
            hashes = hasher.of(segments)
        seq = Sequence(
            RequestId(str(index)),
            arrival,
            prompt_tokens,
            request.output_tokens,
            lora_name=adapter,
            lora_id=lora_id,
            extra_keys=keys,
            block_hashes=hashes,
        )
        if own_from is not None and hashes:
            seq.num_shareable_blocks = own_from // self.block_size
        return seq

    def _scrape(self) -> None:
        sched = self.scheduler
        self.num_running = len(sched.running)
        self.num_waiting = len(sched.waiting) + len(self.inbox)
        self.kv_usage = sched.kv.usage

    def _before_change(self, now: float) -> None:
        """Settle the scrapes strictly before ``now``, which saw the state this event is about to change."""
        if self._interval > 0.0 and self.next_scrape < now:
            k = self._last_scrape(now, strictly_before=True)
            self._sync(self._scrape_time(k), True)
            self._scrape()
            self._settled(k)

    def _settled(self, k: int) -> None:
        """Scrapes up to ``k`` are taken."""
        self._scrape_index = k + 1
        self.next_scrape = self._scrape_time(k + 1)

    # -- the run in progress ---------------------------------------------------------------

    def _sync(self, now: float, starts_at_now: bool) -> None:
        """Apply the run's steps up to ``now`` (between the replica's events: no one finishes)."""
        run = self.run
        if run is not None:
            started = run.num_starts
            run.sync(now, starts_at_now=starts_at_now, on_end=self._run_step_ended if self._watched else None)
            assert not run.finished, "a finish inside a run is an event of its own"
            if run.num_starts != started:
                self._count_run_steps(run, started)

    def _count_run_steps(self, run: DecodeRun[Sequence], first: int) -> None:
        """Steps ``first`` to the last started one of ``run`` started: the counters stepped steps add."""
        last = run.num_starts
        self.num_steps += last - first
        busy = self.busy_time
        sequences = self.batch_total
        durations = run.durations
        batch = run.batch
        # Summed one by one, in the stepping loop's order (the same float); by index, not over
        # slices: compiled, no list is made and the floats are read unboxed.
        for j in range(first, last):
            busy += durations[j]
            sequences += batch[j]
        self.busy_time = busy
        self.batch_total = sequences
        if run.peak_used > self.kv_peak_blocks:
            self.kv_peak_blocks = run.peak_used

    def _end_run(self, run: DecodeRun[Sequence]) -> None:
        self.step_start = run.last_start
        self.run = None
        self.version += 1

    def _stop_run(self, now: float, passed: bool) -> None:
        """End the run at ``now``: the step in flight becomes an ordinary one (or the run is over)."""
        run = self.run
        assert run is not None
        self._sync(now, passed)
        out = run.stop()
        if out is None:
            self._end_run(run)
            return
        j = run.num_steps - 1
        self.in_flight = out
        self.deadline = run.ends[j]
        self.step_start = run.starts[j]
        self._duration = run.durations[j]
        self.run = None
        self.version += 1

    # -- events, driven by the fleet loop ----------------------------------------------------

    @property
    def busy(self) -> bool:
        pipe = self._pipe
        if pipe is not None:
            return bool(pipe.batches)
        return self.in_flight is not None or self.run is not None

    def next_handoff(self) -> float:
        """An idle replica's next P/D wake-up: its first pull in, or (with requests waiting for room)
        its first held prefill leg's expiry; inf: none."""
        sched = self.scheduler
        if sched.link is None:
            return math.inf
        expiry = sched.next_held_expiry() if sched.waiting else math.inf
        pull = sched.next_pull_time()
        return pull if pull < expiry else expiry

    def next_event(self) -> float:
        """When the fleet must next hear from this replica: its step's end, or its run's next finish or end."""
        run = self.run
        if self._pipe is not None:
            return self._pipe.next_end
        return run.next_event() if run is not None else self.deadline

    def route(self, seq: Sequence, now: float, passed: bool = False) -> float:
        """A request routed here at ``now``: it waits for the next step start at or after the time it
        reaches the scheduler (``scheduler.ready_time``), which this returns; a run in progress is
        cut before the step the request joins."""
        self._before_change(now)
        self.inbox.append(seq)
        self.num_routed += 1
        ready = ready_time(self.scheduler.params, now)
        run = self.run
        if run is not None:
            self._sync(now, passed)
            before = run.num_steps
            # A step starting at ``ready`` later than now has not started when the request gets there.
            run.cut_for_arrival(ready, passed and ready == now)
            if run.done:
                run.finish()
                self._end_run(run)
            elif run.num_steps != before:
                self.version += 1
        return ready

    def start_step(self, now: float, ended: list[Sequence]) -> float | None:
        """Admit the inbox and start a step (or a run of steps) at ``now``; the replica's next event,
        or None if there is nothing to run.

        Requests refused at admission (a full waiting queue) are appended to ``ended``.
        """
        if self._pipe is not None:
            return self._start_pipelined(now, ended)
        self._before_change(now)
        self.starting = False
        sched = self.scheduler
        paused = self._paused
        self._paused = None
        later = math.inf
        if self.inbox:
            # As the live engine: with async scheduling a request that arrived
            # during a busy step joins one step later.
            cutoff = admission_cutoff(sched.params, now, self.step_start, bool(sched.running))
            waiting: list[Sequence] = []
            for seq in self.inbox:
                ready = ready_time(sched.params, seq.arrival)
                if ready > cutoff:
                    waiting.append(seq)
                    later = min(later, ready)
                elif not sched.add_requests([seq], now):
                    ended.append(seq)
            self.inbox = waiting
        pulls = self.scheduler.link is not None and _pulling(sched)
        if sched.held:
            # Prefill legs nobody pulled in time (VLLM_NIXL_ABORT_REQUEST_TIMEOUT) free their blocks.
            sched.expire_held(now)
        if paused is not None:
            # A watched run holds no step but decodes (DecodeRun.step_stats reports those). NOTE:
            # neither a run nor its absorbing step knows decode legs (their pull, their held
            # blocks): while one is pulling or waiting to, the replica steps.
            if not self._watched and not pulls and paused.absorb(now, later):
                self.version += 1
                self.run = paused
                self._count_run_steps(paused, paused.num_starts - 1)
                return paused.next_event()
            paused.finish()
        if not sched.has_work() and not (sched.receiving and sched.next_pull_time() <= now):
            return None
        self.version += 1
        if self._fast_forward and not pulls:
            run = DecodeRun.plan(sched, now, self.step_start, next_arrival=later)
            if run is not None:
                self.run = run
                self._count_run_steps(run, 0)
                return run.next_event()
        out = sched.schedule(now)
        if out.received:
            self.received.extend(out.received)
        if not out.scheduled:
            # Nothing can run (pulls in flight; held and pulling blocks leave no room): as the live
            # driver, no step; the replica idles until a pull is in, a hold expires or blocks free.
            return None
        duration = self._step_duration(out)
        self.in_flight = out
        self.step_start = now
        self._duration = duration
        self.deadline = now + duration
        self.num_steps += 1
        self.busy_time += duration
        self.batch_total += len(out.scheduled)
        self.num_preemptions += len(out.preempted)
        if out.kv_used_blocks > self.kv_peak_blocks:
            self.kv_peak_blocks = out.kv_used_blocks
        return self.deadline

    def _start_pipelined(self, now: float, ended: list[Sequence]) -> float | None:
        """:meth:`start_step` with pipeline parallelism: admit what reached the scheduler by ``now``,
        then schedule batches while vLLM's batch queue has room (empty ones included: every
        running sequence may have its batch in flight); the oldest batch's end, or None if idle."""
        self._before_change(now)
        self.starting = False
        sched = self.scheduler
        pipe = self._pipe
        assert pipe is not None
        if self.inbox:
            waiting: list[Sequence] = []
            for seq in self.inbox:
                if ready_time(sched.params, seq.arrival) > now:
                    waiting.append(seq)
                elif not sched.add_requests([seq], now):
                    ended.append(seq)
            self.inbox = waiting
        self.version += 1
        while sched.has_work() and not pipe.full:
            out = sched.schedule(now)
            batch = pipe.push(out, now, sched.lora_load_seconds(out))
            if out.scheduled:
                self.num_steps += 1
                self.batch_total += len(out.scheduled)
                self.num_preemptions += len(out.preempted)
                if out.kv_used_blocks > self.kv_peak_blocks:
                    self.kv_peak_blocks = out.kv_used_blocks
                start = batch.start if batch.start > self._pipe_busy_until else self._pipe_busy_until
                if batch.end > start:
                    self.busy_time += batch.end - start
                    self._pipe_busy_until = batch.end
        return pipe.next_end if pipe.batches else None

    def _end_pipelined(self, now: float, ended: list[Sequence]) -> None:
        """The oldest batch in flight ended at ``now``: release its tokens."""
        self._before_change(now)
        pipe = self._pipe
        assert pipe is not None
        batch = pipe.pop()
        sched = self.scheduler
        result = sched.update_from_output(batch.out, now)
        if result.finished:
            ended.extend(result.finished)
        if self._watched and batch.out.scheduled:
            if self._observer is not None:
                self._observer.on_step(sched.step_stats(batch.out, batch.start, batch.end - batch.start))
            if self._audit:
                sched.kv.audit(_holders(sched))

    def on_event(self, now: float, ended: list[Sequence]) -> bool:
        """The replica's next event, at ``now``: its step or run ended (True: it is idle now), or a
        request of its run finished (False: the run goes on). Ended requests go to ``ended``."""
        if self._pipe is not None:
            # The oldest batch ended: vLLM's engine core schedules the next one at once.
            self._end_pipelined(now, ended)
            return True
        run = self.run
        if run is None:
            self.finish_step(now, ended)
            return True
        self._before_change(now)
        started = run.num_starts
        run.sync(now, starts_at_now=False, on_end=self._run_step_ended if self._watched else None)
        if run.num_starts != started:
            self._count_run_steps(run, started)
        if run.finished:
            ended.extend(run.finished)
            run.finished.clear()
        # At the end of the steps planned so far: plan the next ones (none if the run is over).
        run.on_end_of_plan()
        if not run.done:
            return False
        if run.goes_on:
            # Cut short (an arrival joins the next step, or blocks run short): the step start may
            # take the queue into the run, so its sequences are not brought up to date yet.
            self._paused = run
        else:
            run.finish()
        self._end_run(run)
        return True

    def finish_step(self, now: float, ended: list[Sequence]) -> None:
        """End the step in flight at its deadline ``now``: release tokens; finished sequences go to ``ended``."""
        self._before_change(now)
        out = self.in_flight
        assert out is not None, "no step in flight"
        self.in_flight = None
        self.deadline = math.inf
        sched = self.scheduler
        result = sched.update_from_output(out, now)
        if result.finished:
            ended.extend(result.finished)
        if self._watched:
            if self._observer is not None:
                self._observer.on_step(sched.step_stats(out, self.step_start, self._duration))
            if self._audit:
                sched.kv.audit(_holders(sched))

    def _run_step_ended(self, j: int) -> None:
        """Step ``j`` of the run in progress ended: what :meth:`finish_step` reports of a stepped one."""
        run = self.run
        assert run is not None
        if self._observer is not None:
            self._observer.on_step(run.step_stats(j))
        if self._audit:
            self.scheduler.kv.audit(_holders(self.scheduler))

    def release_held(self, seq: Sequence, now: float, passed: bool = False) -> None:
        """A decode replica has pulled the blocks prefill leg ``seq`` holds here: free them at ``now``.

        Freed blocks may let a waiting request in: a run in progress stops at the step in flight,
        as for an abort, so the next step start admits it.
        """
        sched = self.scheduler
        if seq not in sched.held:
            return  # freed at its timeout already
        self._before_change(now)
        if sched.waiting:
            if self._paused is not None:
                self._paused.finish()
                self._paused = None
            if self.run is not None:
                self._stop_run(now, passed)
        sched.release_held(seq)

    def abort(self, seq: Sequence, now: float, passed: bool = False) -> bool:
        """The client of ``seq`` left at ``now``; False if it had already ended.

        A run in progress stops at the step in flight (which releases nothing to ``seq``), as the
        stepping loop has it; the replica may then be idle (its last step ended at ``now``).
        """
        if seq.is_finished:
            return False
        self._before_change(now)
        if self._paused is not None:
            self._paused.finish()
            self._paused = None
        if seq.status is SequenceStatus.WAITING and seq in self.inbox:
            # Still in the inbox: it never reaches the scheduler (as in the live engine).
            self.inbox.remove(seq)
            seq.status = SequenceStatus.ABORTED
            seq.finished_time = now
            return True
        if self.run is not None:
            self._stop_run(now, passed)
        return self.scheduler.abort(seq, now)


def _pulling(sched: Scheduler[Sequence]) -> bool:
    """Whether a decode leg is pulling, or waiting in the queue to pull or to recompute its last token."""
    if sched.receiving:
        return True
    return any(seq.remote_prefill or seq.blocks for seq in sched.waiting)


def _holders(sched: Scheduler[Sequence]) -> list[Sequence]:
    """Every sequence holding blocks: running, and with P/D pulling, pulled or held for a pull."""
    if sched.link is None:
        return sched.running
    waiting = [seq for seq in sched.waiting if seq.blocks]
    return [*sched.running, *sched.receiving, *waiting, *sched.held]
