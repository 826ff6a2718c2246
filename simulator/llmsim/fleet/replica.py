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

import math
from collections import Counter

from llmsim.engine.scheduler.params import SchedulerParams
from llmsim.engine.scheduler.scheduler import Scheduler, SchedulerOutput, admission_cutoff, ready_time
from llmsim.engine.scheduler.sequence import Sequence, SequenceStatus
from llmsim.fleet.prompt import Prompt


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
    """

    __slots__ = (
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
        self, index: int, name: str, params: SchedulerParams, scrape_interval: float, scrape_phase: float
    ) -> None:
        self.index = index
        self.name = name
        self.scheduler: Scheduler[Sequence] = Scheduler(params)
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
        """Tokens at the start of ``prompt`` this replica's prefix cache holds right now.

        NOTE: always 0 today: the scheduler simulates no prefix cache yet (branch ``routing``
        adds it). Once it lands, answer from the scheduler's block pool here (the longest run
        of ``prompt.token_ids()``'s full blocks it holds); the prefix-affinity router and the
        weighted router's prefix scorer read it only through this method.
        """
        del prompt
        return 0

    def prefix_hit_tokens(self, seq: Sequence) -> int:
        """Prompt tokens of ``seq`` that were served from the prefix cache (the hit-rate numerator).

        NOTE: 0 until the scheduler has a prefix cache (branch ``routing``): then report the
        sequence's cached-token count from its first admission (vLLM's ``num_cached_tokens``).
        """
        del seq
        return 0

    def _scrape(self) -> None:
        sched = self.scheduler
        self.num_running = len(sched.running)
        self.num_waiting = len(sched.waiting) + len(self.inbox)
        self.kv_usage = sched.kv.num_used / sched.kv.num_blocks

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

    def route(self, seq: Sequence, now: float) -> float:
        """A request routed here at ``now``: it waits for the next step start at or after the
        time it reaches the scheduler, which this returns (see ``scheduler.ready_time``)."""
        self._before_change(now)
        self.inbox.append(seq)
        self.num_routed += 1
        return ready_time(self.scheduler.params, now)

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
                if ready_time(sched.params, seq.arrival) > cutoff:
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
