"""One replica of a fleet: a :class:`Scheduler` stepped by the fleet's event loop, and what a gateway
last scraped of it.

The replica follows ``simulate()``'s rules exactly (a request joins the first step starting at or
after its arrival, an idle replica restarts at the next arrival, an abort frees blocks at once),
so a one-replica fleet reproduces ``simulate()`` token for token.

What the router sees is not the live state but the last scrape: an endpoint picker polls each
pod's ``/metrics`` on its own ticker (every 50 ms in the Gateway API Inference Extension), so its
numbers are up to one interval old. The scrape at time ``s`` reads the state after every event
at or before ``s``, the values a live llmsim replica's ``/metrics`` would show then
(``vllm:num_requests_running``, ``vllm:num_requests_waiting`` including requests not yet
admitted, ``vllm:kv_cache_usage_perc``). Scrapes cost nothing while nobody looks: the state only
changes at the replica's own events, so the view is brought up to date lazily, before a change
and before a routing decision.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

from llmsim.engine.scheduler.params import SchedulerParams
from llmsim.engine.scheduler.scheduler import Scheduler, SchedulerOutput, admission_cutoff
from llmsim.engine.scheduler.sequence import Sequence, SequenceStatus
from llmsim.fleet.prompt import BlockHasher, Prompt
from llmsim.fleet.workload import FleetRequest
from llmsim.types import RequestId


class Replica:
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
    """

    __slots__ = (
        "_hasher",
        "_interval",
        "_next_scrape",
        "_step_duration",
        "batch_total",
        "block_size",
        "busy_time",
        "in_flight",
        "inbox",
        "index",
        "itl_gaps",
        "kv_peak_blocks",
        "kv_usage",
        "name",
        "num_preemptions",
        "num_routed",
        "num_running",
        "num_steps",
        "num_waiting",
        "scheduler",
        "starting",
        "step_start",
    )

    def __init__(
        self,
        index: int,
        name: str,
        params: SchedulerParams,
        scrape_interval: float,
        scrape_phase: float,
        hasher: BlockHasher | None = None,
    ) -> None:
        self.index = index
        self.name = name
        if params.enable_kv_cache_events:
            # Nobody subscribes in a plan: recording would only grow a list.
            params = dataclasses.replace(params, enable_kv_cache_events=False)
        self.scheduler: Scheduler[Sequence] = Scheduler(params)
        if hasher is not None and hasher.block_size != params.block_size:
            raise ValueError(
                f"replica {name}: block hasher for {hasher.block_size}-token blocks, not {params.block_size}"
            )
        self._hasher = hasher if params.enable_prefix_caching else None
        self.block_size = params.block_size
        self._step_duration = self.scheduler.step_duration
        # Routed here, not yet handed to the scheduler (that happens at the next step start).
        self.inbox: list[Sequence] = []
        # The step on the GPU, started at step_start; None while idle.
        self.in_flight: SchedulerOutput[Sequence] | None = None
        self.step_start = 0.0
        # Set while the fleet loop has queued this replica to start a step at the current instant.
        self.starting = False
        # The router's view: the last scrape (live state when the interval is 0).
        self.num_running = 0
        self.num_waiting = 0
        self.kv_usage = 0.0
        self._interval = scrape_interval
        self._next_scrape = scrape_phase if scrape_interval > 0 else math.inf
        # Counters for the report.
        self.num_routed = 0
        self.num_steps = 0
        self.busy_time = 0.0
        self.batch_total = 0
        self.num_preemptions = 0
        self.kv_peak_blocks = 0
        # Inter-token gaps of the requests that ended here, as value -> count: a decode step
        # gives every sequence in it the same gap, so this stays near one entry per step while
        # a list would hold one float per token.
        self.itl_gaps: Counter[float] = Counter()

    # -- what the router reads -------------------------------------------------------------

    def observe(self, now: float) -> None:
        """Bring the router's view to ``now``: the last scrape at or before it (live state if interval 0)."""
        if self._interval == 0.0:
            self._scrape()
        elif self._next_scrape <= now:
            # Nothing changed since the last event (which settled every earlier scrape), so
            # every scrape up to now read the current state.
            self._scrape()
            skipped = math.floor((now - self._next_scrape) / self._interval) + 1
            self._next_scrape += skipped * self._interval
            while self._next_scrape <= now:  # float rounding
                self._next_scrape += self._interval

    def cached_prefix_tokens(self, prompt: Prompt) -> int:
        """Tokens at the start of ``prompt`` this replica's prefix cache holds right now (whole blocks).

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

    def sequence(self, index: int, request: FleetRequest, arrival: float) -> Sequence:
        """The scheduler's view of request ``index`` sent here at ``arrival``.

        With prefix caching its blocks get their identities (prompt, then the answer a later
        prompt quotes), so it hits what other requests cached and caches what it computes.
        """
        hashes: list[bytes] = []
        hasher = self._hasher
        if hasher is not None and request.prompt_tokens > 0:
            segments = request.prompt.segments
            if request.answer is not None:
                segments = (*segments, request.answer)
            hashes = list(hasher.of(segments))
        return Sequence(
            RequestId(str(index)), arrival, request.prompt_tokens, request.output_tokens, block_hashes=hashes
        )

    def _scrape(self) -> None:
        sched = self.scheduler
        self.num_running = len(sched.running)
        self.num_waiting = len(sched.waiting) + len(self.inbox)
        self.kv_usage = sched.kv.usage

    def _before_change(self, now: float) -> None:
        """Settle the scrapes strictly before ``now``, which saw the state this event is about to change."""
        if self._next_scrape < now:
            self._scrape()
            skipped = math.ceil((now - self._next_scrape) / self._interval)
            self._next_scrape += skipped * self._interval
            while self._next_scrape < now:  # float rounding
                self._next_scrape += self._interval

    # -- events, driven by the fleet loop ----------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.in_flight is not None

    def route(self, seq: Sequence, now: float) -> None:
        """A request routed here at ``now``: it waits for the next step start."""
        self._before_change(now)
        self.inbox.append(seq)
        self.num_routed += 1

    def start_step(self, now: float, ended: list[Sequence]) -> float | None:
        """Admit the inbox and start a step at ``now``; its deadline, or None if there is nothing to run.

        Requests refused at admission (a full waiting queue) are appended to ``ended``.
        """
        self._before_change(now)
        self.starting = False
        sched = self.scheduler
        if self.inbox:
            # As the live engine and simulate(): with async scheduling a request that arrived
            # during a busy step joins one step later.
            cutoff = admission_cutoff(sched.params, now, self.step_start, bool(sched.running))
            later: list[Sequence] = []
            for seq in self.inbox:
                if seq.arrival > cutoff:
                    later.append(seq)
                elif not sched.add_requests([seq], now):
                    ended.append(seq)
            self.inbox = later
        if not sched.has_work():
            return None
        out = sched.schedule(now)
        duration = self._step_duration(out)
        self.in_flight = out
        self.step_start = now
        self.num_steps += 1
        self.busy_time += duration
        self.batch_total += len(out.scheduled)
        self.num_preemptions += len(out.preempted)
        if out.kv_used_blocks > self.kv_peak_blocks:
            self.kv_peak_blocks = out.kv_used_blocks
        return now + duration

    def finish_step(self, now: float, ended: list[Sequence]) -> None:
        """End the step in flight at its deadline ``now``: release tokens; finished sequences go to ``ended``."""
        self._before_change(now)
        out = self.in_flight
        assert out is not None, "no step in flight"
        self.in_flight = None
        result = self.scheduler.update_from_output(out, now)
        if result.finished:
            ended.extend(result.finished)

    def abort(self, seq: Sequence, now: float) -> bool:
        """The client of ``seq`` left at ``now``; False if it had already ended."""
        if seq.is_finished:
            return False
        self._before_change(now)
        if seq.status is SequenceStatus.WAITING and seq in self.inbox:
            # Still in the inbox: it never reaches the scheduler (as in simulate()).
            self.inbox.remove(seq)
            seq.status = SequenceStatus.ABORTED
            seq.finished_time = now
            return True
        return self.scheduler.abort(seq, now)
