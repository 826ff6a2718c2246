"""The fleet in virtual time: replicas, a router and the clients, as one event loop with no clock.

Events are replicas' step ends (a heap of each busy replica's next event), request sends (a heap
of the times known so far) and client aborts. One instant ``T`` is handled in this order, which is
the live driver's for one replica:

1. every step ending at ``T`` releases its tokens; requests that ended free their client's
   concurrency slot and release the turn that follows them;
2. decode legs the proxy sends at ``T`` (a hand-off after their prefill leg ended, in the order
   the prefill legs ended), then requests sent at ``T``, are routed (the router reads each
   replica's last scrape) and join the chosen replica's inbox; clients leaving at ``T`` abort;
3. every replica that ended a step at ``T``, in index order, then every replica that was idle and
   got a request, admits its inbox and starts its next step at ``T``.

A replica in a run of decode steps (see ``replica``) is in the heap at its run's next finish or
end only; its steps ending at ``T`` in between are phase-1 and phase-3 events all the same, so the
loop tells it whether its step starting at ``T`` has started yet when a request sent in phase 3
(after a refusal freed a slot) looks at it.

Idle replicas cost nothing: only busy replicas are in the heap, so the work per simulated step
does not grow with the fleet's size. One replica is a fleet of one: :func:`simulate` runs it.
"""

from __future__ import annotations

import dataclasses
import gc
import heapq
import math
import random
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from llmsim.engine.base import EngineObserver
from llmsim.engine.scheduler.params import SchedulerParams
from llmsim.engine.scheduler.sequence import Sequence, SequenceStatus
from llmsim.fleet.dp_server import DataParallelServer
from llmsim.fleet.fleet_result import FleetResult, ReplicaReport, RequestOutcome
from llmsim.fleet.fleet_summary import merged_entries
from llmsim.fleet.prompt import BlockHasher
from llmsim.fleet.replica import Replica
from llmsim.fleet.replica_view import ReplicaView
from llmsim.fleet.router import Router, build_router
from llmsim.fleet.spec import FleetSpec, ReplicaGroup, RouterSpec
from llmsim.fleet.workload import FleetRequest, FleetWorkload
from llmsim.types import FinishReason, StepStats

_INF = math.inf
_ABORT = FinishReason.ABORT
_ABORTED = SequenceStatus.ABORTED
_REJECTED = SequenceStatus.REJECTED
_FINISHED = SequenceStatus.FINISHED
_LENGTH = FinishReason.LENGTH


def check_fits(fleet: FleetSpec, workload: FleetWorkload) -> None:
    """Refuse a workload with a prompt some replica could never hold (vLLM answers 400 to it)."""
    if not workload.requests:
        return
    longest = max(range(len(workload.requests)), key=lambda i: workload.requests[i].prompt_tokens)
    tokens = max(1, workload.requests[longest].prompt_tokens)
    for group in fleet.groups:
        if group.count and tokens > group.params.context_length:
            raise ValueError(
                f"request {longest}: prompt of {tokens} tokens exceeds the context length of "
                f"{group.params.context_length} of replica group '{group.name}'"
            )


def served_adapters(fleet: FleetSpec) -> set[str]:
    """The LoRA adapters every replica of ``fleet`` serves (those a request may name)."""
    served: set[str] | None = None
    for group in fleet.groups:
        lora = group.params.lora
        names = {name for name, _ in lora.adapters} if lora is not None else set()
        served = names if served is None else served & names
    return served or set()


def check_adapters(fleet: FleetSpec, workload: FleetWorkload) -> None:
    """Refuse a request naming a LoRA adapter some replica does not serve (vLLM answers 404 to it)."""
    served = served_adapters(fleet)
    for i, r in enumerate(workload.requests):
        if r.adapter is not None and r.adapter not in served:
            names = ", ".join(sorted(served)) or "none"
            raise ValueError(f"request {i}: unknown LoRA adapter '{r.adapter}' (served: {names})")


class FleetSimulation:
    """One run of a workload through a fleet; build it, call :meth:`run` once."""

    def __init__(
        self,
        fleet: FleetSpec,
        workload: FleetWorkload,
        *,
        keep_token_times: bool = False,
        fast_forward: bool = True,
        observer: EngineObserver | None = None,
        audit: bool = False,
    ) -> None:
        check_fits(fleet, workload)
        check_adapters(fleet, workload)
        self.fleet = fleet
        self.workload = workload
        self.keep_token_times = keep_token_times
        rng = random.Random(f"llmsim-fleet/{fleet.router.seed}")
        interval = fleet.router.scrape_interval
        # What the router picks among: a replica, a data-parallel rank, or a data-parallel replica
        # whose API server picks the rank (one endpoint per port, as a gateway sees pods).
        size = sum(g.count if g.balances_ranks(fleet.router) else g.num_gpus for g in fleet.groups)
        self.replicas: list[Replica] = []
        self.groups: list[tuple[str, str]] = []
        # The endpoints the router picks among; in a disaggregated fleet, the prefill replicas',
        # and the decode replicas' in ``decode_endpoints`` (the second pick).
        self.endpoints: list[ReplicaView] = []
        self.decode_endpoints: list[ReplicaView] = []
        self.servers: list[DataParallelServer] = []
        self.disaggregated = fleet.disaggregated
        # The GPUs each pick reads the state of.
        self.prefill_side: list[Replica] = []
        self.decode_side: list[Replica] = []
        # One memo of prompts' block identities per block size, shared by the replicas of that size.
        hashers: dict[int, BlockHasher] = {}
        for group in fleet.groups:
            params = group.params
            decode = group.kv_role == "kv_consumer"
            if group.kv_role is not None and group.kv_link is not None:
                params = dataclasses.replace(params, kv_link=group.kv_link, kv_abort_timeout_s=group.kv_abort_timeout)
            endpoints = self.decode_endpoints if decode else self.endpoints
            side = self.decode_side if decode else self.prefill_side
            hasher = None
            if params.enable_prefix_caching:
                hasher = hashers.setdefault(params.block_size, BlockHasher(params.block_size))
            balanced = group.balances_ranks(fleet.router)
            for k in range(group.count):
                ranks: list[Replica] = []
                for rank in range(group.data_parallel):
                    # One collector per pod, each on its own ticker: endpoint i is first scraped at
                    # i/N of an interval, so the fleet's view is never refreshed all at once (the
                    # ranks behind one port in one scrape).
                    index = len(self.replicas)
                    phase = interval * (len(self.endpoints) + len(self.decode_endpoints)) / size
                    name = f"{group.name}/{k}" if group.data_parallel == 1 else f"{group.name}/{k}/{rank}"
                    replica = Replica(
                        index,
                        name,
                        params,
                        interval,
                        phase,
                        hasher,
                        fast_forward=fast_forward,
                        observer=observer,
                        audit=audit,
                    )
                    self.replicas.append(replica)
                    self.groups.append((group.name, group.model))
                    ranks.append(replica)
                    side.append(replica)
                    if not balanced:
                        endpoints.append(replica)
                if balanced:
                    server = DataParallelServer(ranks)
                    endpoints.append(server)
                    self.servers.append(server)
        if self.disaggregated:
            # Two picks, as vllm-router's P/D mode: a prefill replica, then a decode replica.
            self.router = build_router(fleet.router.for_prefill(), self.endpoints, rng)
            decode_rng = random.Random(f"llmsim-fleet/{fleet.router.seed}/decode")
            self.decode_router = build_router(fleet.router.for_decode(), self.decode_endpoints, decode_rng)
        else:
            self.router = build_router(fleet.router, self.endpoints, rng)
            self.decode_router = self.router
        requests = workload.requests
        n = len(requests)
        # Where each request's own text starts: the prefix caches keep its blocks out of their maps.
        self.own_from = workload.own_text_starts() if hashers else [None] * n
        self.seqs: list[Sequence | None] = [None] * n
        # Disaggregated fleets: each request's prefill leg (its blocks held until pulled), the
        # replica it ran on, and when the client sent the request.
        self.prefill_seqs: list[Sequence | None] = [None] * n
        self.prefill_replica_of = [-1] * n
        self.decode_endpoint_of: list[ReplicaView | None] = [None] * n
        self.sent_at = [0.0] * n
        # (time, sequence number, index): decode legs the proxy sends after the router's hand-off,
        # and the requests between their two legs (a client leaving then cancels the decode leg).
        # An aggregated fleet has no hand-off (``--compare`` runs a P/D trace on one): unused there.
        self.handoff_of = [fleet.router.handoff if r.handoff is None else r.handoff for r in requests]
        self.handoffs: list[tuple[float, int, int]] = []
        self.num_handoffs = 0
        self.handing_off: set[int] = set()
        self.replica_of = [-1] * n
        self.outcomes: list[RequestOutcome | None] = [None] * n
        self.followers: dict[int, list[int]] = {}
        # (time, index): requests whose send time is known.
        self.ready: list[tuple[float, int]] = []
        for i, r in enumerate(requests):
            if r.follows is None:
                self.ready.append((r.arrival, i))
            else:
                self.followers.setdefault(r.follows, []).append(i)
        heapq.heapify(self.ready)
        # (time, index): clients leaving (at the arrival, if abort_at is earlier).
        self.aborts = [(max(r.abort_at, r.arrival), i) for i, r in enumerate(requests) if r.abort_at is not None]
        heapq.heapify(self.aborts)
        self.limit = workload.max_concurrency
        self.in_flight = 0
        # Requests whose time has come, waiting for a free concurrency slot (in send order).
        self.blocked: deque[int] = deque()
        # (time, replica index, replica version): each busy replica's next event (stale if the
        # version moved on).
        self.events: list[tuple[float, int, int]] = []
        # (time, replica index): a routed request reaches that replica's scheduler (after the
        # API server's per-request work), so an idle replica must start a step then.
        self.wakeups: list[tuple[float, int]] = []
        # Replicas starting a step at the current instant: those whose step ended (index order),
        # then those that were idle and got a request.
        self.starting: list[Replica] = []
        # Of which the first ``num_ended`` ended a step; the first ``num_started`` have started
        # (-1: not in phase 3).
        self.num_ended = 0
        self.num_started = -1
        self.end = 0.0

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> FleetResult:
        events = self.events
        ready = self.ready
        aborts = self.aborts
        replicas = self.replicas
        starting = self.starting
        wakeups = self.wakeups
        ended: list[Sequence] = []
        while True:
            now = events[0][0] if events else _INF
            if ready and ready[0][0] < now:
                now = ready[0][0]
            if aborts and aborts[0][0] < now:
                now = aborts[0][0]
            if wakeups and wakeups[0][0] < now:
                now = wakeups[0][0]
            if self.handoffs and self.handoffs[0][0] < now:
                now = self.handoffs[0][0]
            if now == _INF:
                break
            # 1. Steps ending now.
            while events and events[0][0] <= now:
                _, index, version = heapq.heappop(events)
                replica = replicas[index]
                if version != replica.version:
                    continue  # its next event moved
                self.end = now
                if replica.on_event(now, ended):
                    replica.starting = True
                    starting.append(replica)
                else:
                    self._schedule(replica)
            self.num_ended = len(starting)
            if ended:
                self._ended(ended, now)
            # 2. Sends and aborts now.
            self._sends_and_aborts(now, ended)
            while wakeups and wakeups[0][0] <= now:
                self._wake(replicas[heapq.heappop(wakeups)[1]])
            # 3. Step starts now (refusals at admission may free slots and send more).
            k = 0
            while k < len(starting):
                replica = starting[k]
                k += 1
                self.num_started = k
                if replica.start_step(now, ended) is not None:
                    self._schedule(replica)
                else:
                    # Idle, but pulling (or waiting for held blocks to expire): it steps again then.
                    handoff = replica.next_handoff()
                    if handoff < _INF:
                        heapq.heappush(wakeups, (handoff, replica.index))
                if replica.received:
                    self._pulled(replica, now)
                if ended:
                    self._ended(ended, now)
                    self._sends_and_aborts(now, ended)
            starting.clear()
            self.num_started = -1
        return self._result()

    def _schedule(self, replica: Replica) -> None:
        heapq.heappush(self.events, (replica.next_event(), replica.index, replica.version))

    def _passed(self, replica: Replica) -> bool:
        """Whether a step of ``replica``'s run starting at the current instant has started yet.

        In phase 3 the stepping loop would start it in its place among the replicas whose step
        ended now (index order), before the replicas that were idle. Sends in phase 3 come after
        a start (its refusals free slots and release followers): the replica just started, the
        last one started, has passed too.
        """
        k = self.num_started
        if k <= 0:
            return False
        if k > self.num_ended:
            return True
        return replica.index <= self.starting[k - 1].index

    def _changed(self, replica: Replica, version: int) -> None:
        """After a route or an abort: re-queue the replica's next event, or start it now if its run ended now."""
        if replica.version == version:
            return
        if replica.busy:
            self._schedule(replica)
            return
        # Its last step ended now: it starts now, in its place among the replicas whose step ended.
        starting = self.starting
        position = max(self.num_started, 0)
        while position < self.num_ended and starting[position].index < replica.index:
            position += 1
        starting.insert(position, replica)
        self.num_ended += 1
        replica.starting = True

    def _sends_and_aborts(self, now: float, ended: list[Sequence]) -> None:
        handoffs = self.handoffs
        while handoffs and handoffs[0][0] <= now:
            i = heapq.heappop(handoffs)[2]
            if i in self.handing_off:  # else its client left during the hand-off
                self.handing_off.discard(i)
                self._send_decode(i, now)
        ready = self.ready
        aborts = self.aborts
        while (ready and ready[0][0] <= now) or (aborts and aborts[0][0] <= now):
            while ready and ready[0][0] <= now:
                i = heapq.heappop(ready)[1]
                if self.outcomes[i] is not None:
                    continue  # its client left before it was sent
                if self.limit is not None and self.in_flight >= self.limit:
                    self.blocked.append(i)
                else:
                    self._send(i, now)
            while aborts and aborts[0][0] <= now:
                self._abort(heapq.heappop(aborts)[1], now, ended)
            if ended:
                self._ended(ended, now)

    def _send(self, i: int, now: float) -> None:
        request = self.workload.requests[i]
        self.in_flight += 1
        self.sent_at[i] = now
        if self.disaggregated:
            # The prefill leg: the whole prompt, one token (vLLM's proxy sends max_tokens 1).
            replica = self._pick(self.router, self.endpoints, self.prefill_side, request, now)
            seq = replica.sequence(i, dataclasses.replace(request, output_tokens=1), now, self.own_from[i])
            seq.remote_decode = True
            # Capped by max_tokens: vLLM's FINISHED_LENGTH_CAPPED, the end that keeps its blocks for a pull.
            seq.finish_reason = _LENGTH
            self.prefill_seqs[i] = seq
            self.prefill_replica_of[i] = replica.index
            # The router picks the pair at once, as vllm-router's and sglang-router's
            # select_pd_pair: the decode replica is chosen now, on what the router sees now.
            self.decode_endpoint_of[i] = self._pick_endpoint(
                self.decode_router, self.decode_endpoints, self.decode_side, request, now
            )
        else:
            replica = self._pick(self.router, self.endpoints, self.replicas, request, now)
            seq = replica.sequence(i, request, now, self.own_from[i])
        self._route(i, replica, seq, now)

    def _send_decode(self, i: int, now: float) -> None:
        """The proxy sends request ``i``'s decode leg now (its prefill leg ended, the hand-off passed)."""
        request = self.workload.requests[i]
        endpoint = self.decode_endpoint_of[i]
        assert endpoint is not None
        replica = self._on_endpoint(endpoint, now)
        seq = replica.sequence(i, request, now, self.own_from[i])
        seq.remote_prefill = True
        self._route(i, replica, seq, now)

    def _pick(
        self, router: Router, endpoints: list[ReplicaView], side: list[Replica], request: FleetRequest, now: float
    ) -> Replica:
        """The GPU ``router`` sends ``request`` to (through a data-parallel replica's own balancer)."""
        return self._on_endpoint(self._pick_endpoint(router, endpoints, side, request, now), now)

    def _pick_endpoint(
        self, router: Router, endpoints: list[ReplicaView], side: list[Replica], request: FleetRequest, now: float
    ) -> ReplicaView:
        """The endpoint ``router`` picks for ``request`` at ``now``, on what it sees then."""
        if router.reads_state:
            live = router.reads_prefix_cache
            for replica in side:
                # Most replicas have no scrape due (a send every few ms, a scrape every 50).
                if live or replica.next_scrape <= now:
                    replica.observe(now, self._passed(replica), prefix_cache=live)
            for server in self.servers:
                server.refresh()
        return endpoints[router.pick(request.prompt)]

    def _on_endpoint(self, endpoint: ReplicaView, now: float) -> Replica:
        """The GPU a request reaching ``endpoint`` at ``now`` runs on (a data-parallel replica's
        own balancer picks its rank as the request comes in)."""
        if isinstance(endpoint, Replica):
            return endpoint
        assert isinstance(endpoint, DataParallelServer)
        return endpoint.ranks[endpoint.pick(now, [self._passed(r) for r in endpoint.ranks])]

    def _route(self, i: int, replica: Replica, seq: Sequence, now: float) -> None:
        self.seqs[i] = seq
        self.replica_of[i] = replica.index
        version = replica.version
        ready = replica.route(seq, now, self._passed(replica))
        if replica.version != version:
            self._changed(replica, version)
        if ready > now:
            heapq.heappush(self.wakeups, (ready, replica.index))
        else:
            self._wake(replica)

    def _wake(self, replica: Replica) -> None:
        """An idle replica with a request at its scheduler starts a step now (a busy one at its next)."""
        if not replica.busy and not replica.starting:
            replica.starting = True
            self.starting.append(replica)

    def _abort(self, i: int, now: float, ended: list[Sequence]) -> None:
        if i in self.handing_off:
            self._abort_handoff(i, now)
            return
        seq = self.seqs[i]
        if seq is None:
            # Not sent yet (waiting for a slot, or for the request it follows): never will be.
            if self.outcomes[i] is None:
                if i in self.blocked:
                    self.blocked.remove(i)
                self._record_unsent(i, now)
            return
        replica = self.replicas[self.replica_of[i]]
        version = replica.version
        if replica.abort(seq, now, self._passed(replica)):
            ended.append(seq)
        self._changed(replica, version)
        held = self.prefill_seqs[i]
        if held is not None and held is not seq:
            # The client left during the decode leg: the proxy tells the prefill side to free
            # what it holds (as the live server's decode leg does), not waiting for the timeout.
            source = self.replicas[self.prefill_replica_of[i]]
            version = source.version
            source.release_held(held, now, self._passed(source))
            self._changed(source, version)

    def _ended(self, ended: list[Sequence], now: float) -> None:
        """Record requests that ended at ``now``; free their slots and release what follows them."""
        for seq in ended:
            i = int(seq.request_id)
            if seq.remote_decode and seq.finish_reason is _LENGTH and seq.status is _FINISHED:
                # The prefill answer is in: the decode leg goes out after the router's hand-off
                # (the request's own if it has one; at once without one); the request goes on.
                handoff = self.handoff_of[i]
                if handoff:
                    self.handing_off.add(i)
                    heapq.heappush(self.handoffs, (now + handoff, self.num_handoffs, i))
                    self.num_handoffs += 1
                else:
                    self._send_decode(i, now)
                continue
            self._record(i, seq)
            self._done(i, now)
        ended.clear()

    def _done(self, i: int, now: float) -> None:
        """Request ``i`` (recorded) ended at ``now``: free its client's slot, release what follows it."""
        self.in_flight -= 1
        if self.followers:
            self._release_followers(i, now)
        if self.blocked and (self.limit is None or self.in_flight < self.limit):
            self._send(self.blocked.popleft(), now)

    def _abort_handoff(self, i: int, now: float) -> None:
        """The client left between the two legs: the proxy never sends the decode leg, and tells the
        prefill side to free what it holds (as for a client leaving during the decode leg)."""
        self.handing_off.discard(i)
        held = self.prefill_seqs[i]
        assert held is not None
        assert held.scheduled_time is not None
        source = self.replicas[self.prefill_replica_of[i]]
        version = source.version
        source.release_held(held, now, self._passed(source))
        self._changed(source, version)
        if source.scheduler.waiting:
            self._wake(source)  # the freed blocks may let a waiting request in
        sent = self.sent_at[i]
        request = self.workload.requests[i]
        # No token reached the client: vllm-router streams the decode leg's answer only.
        self.outcomes[i] = RequestOutcome(
            index=i,
            replica=source.index,
            arrival=sent,
            prompt_tokens=held.prompt_tokens,
            output_tokens=0,
            finish_reason=FinishReason.ABORT,
            ttft=None,
            e2e=now - sent,
            queue_time=held.scheduled_time - sent,
            num_preemptions=held.num_preemptions,
            tpot=None,
            prefix_hit_tokens=source.prefix_hit_tokens(held),
            prefix_query_tokens=source.prefix_query_tokens(held),
            adapter=request.adapter,
        )
        self._done(i, now)

    def _release_followers(self, i: int, now: float) -> None:
        for j in self.followers.get(i, ()):
            heapq.heappush(self.ready, (now + self.workload.requests[j].arrival, j))

    def _pulled(self, replica: Replica, now: float) -> None:
        """Decode legs on ``replica`` have their KV: the prefill replicas free the blocks they held."""
        for seq in replica.received:
            i = int(seq.request_id)
            held = self.prefill_seqs[i]
            if held is None:
                continue
            source = self.replicas[self.prefill_replica_of[i]]
            version = source.version
            source.release_held(held, now, self._passed(source))
            self._changed(source, version)
            if source.scheduler.waiting:
                self._wake(source)  # the freed blocks may let a waiting request in
        replica.received.clear()

    # -- outcomes ----------------------------------------------------------------------------

    def _record(self, i: int, seq: Sequence) -> None:
        replica = self.replicas[self.replica_of[i]]
        times = seq.token_times
        n = len(times)
        status = seq.status
        arrival = seq.arrival
        finished = seq.finished_time
        assert finished is not None, "only an ended sequence is recorded"
        first = seq.first_token_time
        scheduled = seq.scheduled_time
        hit_tokens = replica.prefix_hit_tokens(seq)
        query_tokens = replica.prefix_query_tokens(seq)
        preemptions = seq.num_preemptions
        prefill = self.prefill_seqs[i]
        if prefill is not None and prefill is not seq:
            # A decoded request: timed from the client's send; its queueing and prefix-cache
            # figures are the prefill leg's (vllm-router reports the prefill side's cached tokens).
            source = self.replicas[self.prefill_replica_of[i]]
            arrival = self.sent_at[i]
            scheduled = prefill.scheduled_time
            hit_tokens = source.prefix_hit_tokens(prefill)
            query_tokens = source.prefix_query_tokens(prefill)
            preemptions += prefill.num_preemptions
        # Sequence.to_stats()'s figures, without building the record (once per request: NOTE: a
        # mirrored rule, see llmsim.engine.scheduler), and passed by position: keywords cost a
        # named tuple ~1 us more per request.
        self.outcomes[i] = RequestOutcome(
            i,  # index
            replica.index,  # replica
            arrival,
            seq.prompt_tokens,
            seq.num_output_tokens,
            _ABORT if status >= _ABORTED else seq.finish_reason,  # finish_reason
            None if first is None else first - arrival,  # ttft
            finished - arrival,  # e2e
            (scheduled if scheduled is not None else finished) - arrival,  # queue_time
            preemptions,
            (times[-1] - times[0]) / (n - 1) if n > 1 else None,  # tpot
            hit_tokens,
            query_tokens,
            status is _REJECTED,  # rejected
            self.workload.requests[i].adapter,
            tuple(times) if self.keep_token_times else (),  # token_times
        )
        if not self.keep_token_times:
            seq.token_times = []  # ended: the scheduler never reads it again

    def _record_unsent(self, i: int, now: float) -> None:
        request = self.workload.requests[i]
        self.outcomes[i] = RequestOutcome(
            index=i,
            replica=-1,
            arrival=now,
            prompt_tokens=request.prompt_tokens,
            output_tokens=0,
            finish_reason=FinishReason.ABORT,
            ttft=None,
            e2e=0.0,
            queue_time=0.0,
            num_preemptions=0,
            tpot=None,
            adapter=request.adapter,
        )
        # Its turn never comes, but the conversation's client moves on.
        self._release_followers(i, now)

    def _result(self) -> FleetResult:
        outcomes = self.outcomes
        assert all(o is not None for o in outcomes), "a request neither ended nor was abandoned"
        reports = []
        decoding = set(self.decode_side)
        for rep, (group, model) in zip(self.replicas, self.groups, strict=True):
            role = None if not self.disaggregated else "kv_consumer" if rep in decoding else "kv_producer"
            gap_values, gap_counts = merged_entries(rep.itl_gaps.values, rep.itl_gaps.counts)
            reports.append(
                ReplicaReport(
                    name=rep.name,
                    group=group,
                    model=model,
                    num_routed=rep.num_routed,
                    num_steps=rep.num_steps,
                    busy_time=rep.busy_time,
                    batch_total=rep.batch_total,
                    num_preemptions=rep.num_preemptions,
                    kv_total_blocks=rep.scheduler.kv.num_usable_blocks,
                    kv_peak_used_blocks=rep.kv_peak_blocks,
                    itl_gap_values=gap_values,
                    itl_gap_counts=gap_counts,
                    role=role,
                )
            )
        return FleetResult([o for o in outcomes if o is not None], reports, self.end)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for a virtual-time loop.

    The loop allocates millions of small objects that hold no cycles (token times, step records,
    tuples), so reference counting frees them all; the cyclic collector would only walk the
    growing heap again and again (measured: 25-35 % of a fleet run). Anything cyclic made
    meanwhile is collected when the collector resumes.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def simulate_fleet(
    fleet: FleetSpec,
    workload: FleetWorkload,
    *,
    keep_token_times: bool = False,
    fast_forward: bool = True,
    observer: EngineObserver | None = None,
    audit: bool = False,
) -> FleetResult:
    """Run ``workload`` through ``fleet`` in virtual time.

    Parameters
    ----------
    fleet:
        Replica groups and router.
    workload:
        The requests, how they are sent and the client-side concurrency limit.
    keep_token_times:
        Keep every token's release time in the outcomes (memory grows with the tokens; tests).
    fast_forward:
        Jump over runs of decode steps; False steps every one (the reference: same results).
    observer:
        Receives every replica's step stats as each step ends (KV-cache events included).
    audit:
        Check after every step that each replica's block pool agrees exactly with its running
        sequences (O(blocks) per step: for tests).
    """
    with collector_paused():
        simulation = FleetSimulation(
            fleet,
            workload,
            keep_token_times=keep_token_times,
            fast_forward=fast_forward,
            observer=observer,
            audit=audit,
        )
        return simulation.run()


class _Steps:
    """Records every step's stats, and passes them on."""

    def __init__(self, observer: EngineObserver | None) -> None:
        self.steps: list[StepStats] = []
        self.observer = observer

    def on_step(self, stats: StepStats) -> None:
        self.steps.append(stats)
        if self.observer is not None:
            self.observer.on_step(stats)

    def on_first_token(self, ttft: float) -> None:
        pass

    def on_request_finished(self, stats: object) -> None:
        pass


def simulate(
    params: SchedulerParams,
    workload: Iterable[FleetRequest],
    *,
    audit: bool = False,
    observer: EngineObserver | None = None,
    fast_forward: bool = True,
) -> FleetResult:
    """Run ``workload`` through one replica in virtual time: a fleet of one, every step and every
    token time recorded (``FleetResult.steps``, ``RequestOutcome.token_times``).

    Parameters
    ----------
    params:
        The engine's numbers, as the server would use them.
    workload:
        Requests (sent at their arrival) in any order; ties in arrival keep workload order.
        ``abort_at`` earlier than the arrival counts as an abort at arrival. Requests with token
        ids share cached prefixes (see ``FleetRequest.of``).
    audit:
        Check after every step that reference counts, the free queue and the prefix cache agree
        exactly with the running sequences (O(blocks) per step: for tests).
    observer:
        Receives every step's stats as the step ends (KV-cache events included), as the live
        engine's observer does.
    fast_forward:
        Jump over runs of decode steps (:class:`~llmsim.engine.scheduler.decode_run.DecodeRun`);
        False steps every one (the reference the fast-forward is tested against: same results).
    """
    fleet = FleetSpec((ReplicaGroup("replica", "replica", params, 1),), RouterSpec("round-robin", 0.0))
    steps = _Steps(observer)
    with collector_paused():
        simulation = FleetSimulation(
            fleet,
            FleetWorkload(tuple(workload)),
            keep_token_times=True,
            fast_forward=fast_forward,
            observer=steps,
            audit=audit,
        )
        result = simulation.run()
    result.steps = steps.steps
    result.cached_blocks = simulation.replicas[0].scheduler.kv.cached_hashes()
    return result
