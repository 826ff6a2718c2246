"""The scheduler engine on a clock: the only module of the package that touches asyncio or time.

One background task owns the simulated GPU::

    admit arrivals -> schedule -> cost -> deadline = step_start + duration
        -> the release prepared: one TokenEvent for every sequence the step will give a token,
           shown to its consumer's prepare (which encodes its chunk)
        -> lag = await clock.sleep_until(deadline) -> the events handed out (written)
        -> update -> observers -> step_start = deadline

The timeline is anchored: a late wake-up shows up as lag and never shifts the next step.
Requests wait in an inbox ordered by arrival stamp and join the first step that starts at or
after their arrival (so a request arriving mid-step joins the next one, as on a real GPU). When
there is nothing to do the loop waits for a request and restarts the timeline at
max(its arrival stamp, end of the last step) - the stamp, not "now".

Admission follows the simulated timeline, never the host: with ``max_waiting_requests`` set, a
request is judged when the timeline reaches its arrival stamp, against the waiting queue of
that moment, and :meth:`SchedulerEngine.submit` returns (or raises ``EngineOverloaded``) then.
A late timeline (a busy host) delays the answer; it never changes it. All choices of one request
are admitted or refused together.

Each stream owns a deque of released events and, while its consumer waits, one future; the
loop appends and wakes it. No asyncio.Queue per request, nothing per token beyond the event.

A plan with :class:`~llmsim.types.Pacing` gets a :class:`_PacedStream`: the GPU's timeline is
unchanged (the sequence is batched, computed and freed as any other), and the stream holds each
released token until its paced deadline on the way out. The engine's stats keep the GPU's times.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
from collections import deque
from collections.abc import Callable, Coroutine
from collections.abc import Sequence as Seq
from contextlib import suppress
from typing import ClassVar

from llmsim.engine.base import Engine, EngineObserver, KVPeer, NullObserver, TokenPrepare, TokenSink, TokenStream
from llmsim.engine.clock import Clock
from llmsim.engine.errors import EngineOverloaded, EngineStopped, RequestAborted, RequestFailed
from llmsim.engine.release_gate import ReleaseGate
from llmsim.engine.scheduler.block_hash import ExtraKeys, hash_blocks, lora_extra_keys
from llmsim.engine.scheduler.params import SchedulerParams
from llmsim.engine.scheduler.pipeline import Pipeline
from llmsim.engine.scheduler.scheduler import Scheduler, admission_cutoff, ready_time
from llmsim.engine.scheduler.sequence import Sequence, SequenceStatus
from llmsim.types import EngineSnapshot, FinishReason, GenerationPlan, Pacing, RemotePrefill, RequestId, TokenEvent

logger = logging.getLogger(__name__)

_RUNNING = SequenceStatus.RUNNING
_FINISHED = SequenceStatus.FINISHED
_ABORTED = SequenceStatus.ABORTED
#: Tokens written between two polls for arrivals in a pass: at ≈25 µs a write on a slow host, a
#: request that came in during the pass is stamped within ≈0.1 ms of its bytes, for a ≈1 µs poll.
ARRIVAL_POLL_TOKENS = 4


def _nothing() -> None:
    pass


class _Stream(Sequence):
    """A sequence plus its consumer's channel; the :class:`TokenStream` the API pulls."""

    __slots__ = ("engine", "events", "in_inbox", "plan", "prepare", "remote", "sink", "waiter")

    def __init__(
        self,
        engine: SchedulerEngine,
        plan: GenerationPlan,
        arrival: float,
        request_id: RequestId,
        lora: tuple[int, ExtraKeys] = (0, None),
    ) -> None:
        Sequence.__init__(
            self,
            request_id,
            arrival,
            plan.prompt_tokens,
            plan.num_output_tokens,
            plan.finish_reason,
            prompt_token_ids=plan.prompt_token_ids,
            output_token_ids=plan.token_ids,
            lora_name=plan.lora_name,
            lora_id=lora[0],
            extra_keys=lora[1],
        )
        handoff = plan.kv_handoff
        # A decode leg's prefill replica, until its blocks there are released (None: nothing to release).
        self.remote: RemotePrefill | None = None
        if handoff is not None:
            self.remote_decode = handoff.remote_decode
            if handoff.remote_prefill is not None:
                self.remote_prefill = True
                self.remote = handoff.remote_prefill
                # The pull waits for the prefill replica's word that it holds the blocks.
                self.kv_pull_confirmed = False
        self.engine = engine
        self.plan = plan
        self.events: deque[TokenEvent] = deque()
        # True until the step loop hands the stream to the scheduler (or refuses it).
        self.in_inbox = True
        # Set while the consumer waits for the next event.
        self.waiter: asyncio.Future[None] | None = None
        # Where the step loop hands each token at release, when the consumer asked for pushes.
        self.sink: TokenSink | None = None
        # What the consumer prepares each token with, ahead of its release (see _prepare_release).
        self.prepare: TokenPrepare | None = None

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> TokenEvent:
        # Per-token path: a released event is returned without suspending.
        events = self.events
        while not events:
            if self.status >= _FINISHED:
                if self.status is _ABORTED:
                    raise RequestAborted("the engine aborted the request")
                if self.finish_reason is FinishReason.ERROR:
                    raise RequestFailed("the request's KV transfer failed")
                raise StopAsyncIteration
            engine = self.engine
            if engine.failure is not None:
                raise EngineStopped("the scheduler step loop failed") from engine.failure
            if engine.closed:
                raise RequestAborted("the scheduler engine stopped")
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiter = waiter
            await waiter
        return events.popleft()

    async def aclose(self) -> None:
        self.waiter = None
        self.sink = None
        self.prepare = None
        self.engine.close_stream(self)

    def attach(self, sink: TokenSink, prepare: TokenPrepare | None = None) -> bool:
        self.sink = sink
        self.prepare = prepare
        return True

    def interrupt(self) -> None:
        """The stream ended under its consumer (abort, stop): let it see that now."""
        self.wake()


def _held_key(stream: _Stream) -> str:
    """The name a finished prefill leg's blocks are held under: its request id, or its hand-off's name."""
    handoff = stream.plan.kv_handoff
    held_as = handoff.held_as if handoff is not None else None
    return held_as or stream.request_id


class _PacedStream(_Stream):
    """A stream whose tokens leave at their paced deadlines, after the step that released them."""

    __slots__ = ("cut", "pacing", "sleeper")

    def __init__(
        self,
        engine: SchedulerEngine,
        plan: GenerationPlan,
        arrival: float,
        request_id: RequestId,
        lora: tuple[int, ExtraKeys],
        pacing: Pacing,
    ) -> None:
        super().__init__(engine, plan, arrival, request_id, lora)
        self.pacing = pacing
        # The consumer's task while it waits for a paced deadline: what interrupt() cancels.
        self.sleeper: asyncio.Task[object] | None = None
        # Aborted while the GPU had finished it but tokens were still held back.
        self.cut = False

    async def __anext__(self) -> TokenEvent:
        if self.cut:
            raise RequestAborted("the engine aborted the request")
        event = await _Stream.__anext__(self)
        deadline = self.pacing.deadline(self.arrival, event.sim_time, event.index)
        clock = self.engine._clock  # the engine's own clock (a sibling class of this module)
        if clock.now() < deadline:
            self.sleeper = asyncio.current_task()
            try:
                await clock.sleep_until(deadline)
            except asyncio.CancelledError:
                engine = self.engine
                if not (self.cut or self.status is _ABORTED or engine.closed or engine.failure is not None):
                    raise
                # Our own cancellation (abort, stop, failed loop): consumed here; the held token is dropped.
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                if engine.failure is not None:
                    raise EngineStopped("the scheduler step loop failed") from engine.failure
                raise RequestAborted("the engine aborted the request") from None
            finally:
                self.sleeper = None
        event.sim_time = deadline
        return event

    def interrupt(self) -> None:
        self.wake()
        if self.sleeper is not None:
            self.sleeper.cancel()

    def attach(self, sink: TokenSink, prepare: TokenPrepare | None = None) -> bool:
        # Each token waits for its own paced deadline on the way out: pulled, never pushed.
        return False


class _Admission:
    """The choices of one request, admitted or refused together when the timeline reaches them."""

    __slots__ = ("decided", "rejected", "streams")

    def __init__(self, streams: list[_Stream], decided: asyncio.Future[None] | None) -> None:
        self.streams = streams
        # Set by the step loop once it has judged the request; None when nothing is to judge.
        self.decided = decided
        self.rejected = False

    def decide(self) -> None:
        if self.decided is not None and not self.decided.done():
            self.decided.set_result(None)


class SchedulerEngine(Engine):
    """Continuous batching on one simulated GPU (see :mod:`llmsim.engine.scheduler.scheduler`).

    Parameters
    ----------
    params:
        GPU, model and scheduler numbers.
    clock:
        The engine's only view of time; arrival stamps passed to :meth:`submit` are on it.
    observer:
        Receives every step's stats, first tokens and finished requests.
    """

    name: ClassVar[str] = "scheduler"
    required_sections: ClassVar[frozenset[str]] = frozenset({"hardware", "weights", "kv_cache"})

    def __init__(
        self,
        params: SchedulerParams,
        clock: Clock,
        observer: EngineObserver | None = None,
        gate: ReleaseGate | None = None,
        poll_arrivals: Callable[[], None] | None = None,
        kv_peer: KVPeer | None = None,
        recompute_failed_pulls: bool = False,
    ) -> None:
        self._params = params
        # Disaggregated prefill/decode: the line to prefill replicas (decode legs need it), and
        # vLLM's kv_load_failure_policy (False: "fail", vLLM's default; True: "recompute").
        self._kv_peer = kv_peer
        self._recompute_failed_pulls = recompute_failed_pulls
        # Decode legs whose prefill replica said no (handled by the step loop, between steps).
        self._failed_pulls: list[_Stream] = []
        # Finished prefill legs holding blocks for a pull, by request id.
        self._held: dict[str, _Stream] = {}
        # Fire-and-forget side-channel calls, kept so they are not collected mid-flight.
        self._peer_tasks: set[asyncio.Task[None]] = set()
        self._clock = clock
        # Shared with the request side: it holds its work back while a release is at hand.
        self._gate = gate
        # The request side's note of requests that came in while this loop held the event loop
        # (their stamps would otherwise wait for the pass to end; see transport/arrival_watch.py).
        self._poll_arrivals = poll_arrivals or _nothing
        self._observer: EngineObserver = observer or NullObserver()
        self._scheduler: Scheduler[_Stream] = Scheduler(params)
        # (arrival, submission number, admission): a heap, so the waiting queue is in arrival order.
        self._inbox: list[tuple[float, int, _Admission]] = []
        self._submitted = 0
        # Streams in the inbox and not aborted (what /metrics counts as waiting besides the scheduler's).
        self._num_inbox = 0
        self._live: set[_Stream] = set()
        # Paced streams until their consumer closes them (they outlive the sequence on the GPU).
        self._paced: set[_PacedStream] = set()
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Future[None] | None = None
        self._timeline_end = -math.inf
        # LoRA adapters plans may name: name -> (vLLM's lora_int_id, block-hash extra keys).
        self._loras: dict[str, tuple[int, ExtraKeys]] = {}
        self._lora_ids = 0
        # Which released stream goes first in the next step (see _release).
        self._rotation = 0
        self.closed = False
        self.failure: BaseException | None = None
        if params.lora is not None:
            for name, path in params.lora.adapters:
                self.add_lora(name, path)

    @property
    def num_kv_blocks(self) -> int:
        return self._scheduler.kv.num_blocks

    def cached_prefix_tokens(self, token_ids: Seq[int], lora_name: str | None = None) -> int:
        """Leading tokens of a prompt with these ids that the prefix cache holds right now.

        What a prefix-aware router asks a replica; the prompt's own admission would further cap
        the hit at its length minus one token. 0 with prefix caching off.
        """
        keys = self._lora(lora_name)[1]
        return self._scheduler.cached_prefix_tokens(hash_blocks(token_ids, self._params.block_size, keys))

    # -- LoRA -----------------------------------------------------------------------------

    def add_lora(self, name: str, path: str) -> None:
        if self._params.lora is None:
            raise ValueError("LoRA is not enabled for this model (no lora section)")
        known = self._loras.get(name)
        # An in-place reload keeps its id (vLLM's lora_int_id), as vLLM does.
        lora_id = known[0] if known is not None else self._lora_ids + 1
        self._lora_ids = max(self._lora_ids, lora_id)
        self._loras[name] = (lora_id, lora_extra_keys(name, path))
        self._scheduler.load_lora(name)

    def remove_lora(self, name: str) -> None:
        self._loras.pop(name, None)

    def reset_prefix_cache(self) -> bool:
        return self._scheduler.reset_prefix_cache()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is None and not self.closed:
            loop_fn = self._pipeline_loop if self._scheduler.pipelined else self._step_loop
            self._task = asyncio.get_running_loop().create_task(loop_fn(), name="llmsim-scheduler")
            self._task.add_done_callback(self._loop_done)
            logger.debug("scheduler engine started: %d KV blocks", self.num_kv_blocks)

    async def stop(self) -> None:
        self.closed = True
        for peer_task in list(self._peer_tasks):
            peer_task.cancel()
        task, self._task = self._task, None
        if task is not None and not task.done():  # a failed loop's error was already logged
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
        self._wake_everyone()

    def _loop_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("scheduler step loop failed", exc_info=exc)
            self.failure = exc
            self._wake_everyone()

    def _wake_everyone(self) -> None:
        if self._gate is not None:
            self._gate.open(self)  # no release is coming: request work held for one goes on
        for _, _, admission in self._inbox:
            admission.decide()
        for stream in {*self._live, *self._paced}:
            stream.interrupt()

    def abort_requests(self) -> int:
        streams = [s for s in self._live if s.status < _FINISHED]
        for stream in streams:
            self.close_stream(stream)
        for _, _, admission in self._inbox:
            admission.decide()  # a request still waiting for its admission gets its aborted streams
        # Done on the GPU, but still holding tokens back: cut short as well.
        held = [s for s in self._paced if s.status is _FINISHED and not s.cut]
        for stream in held:
            stream.cut = True
        for stream in (*streams, *held):
            stream.interrupt()
        return len(streams) + len(held)

    # -- requests -------------------------------------------------------------------------

    async def submit(
        self, plans: Seq[GenerationPlan], arrival: float, request_ids: Seq[RequestId]
    ) -> list[TokenStream]:
        self._check_serving()
        streams = [
            _Stream(self, plan, arrival, rid, self._lora(plan.lora_name))
            if plan.pacing is None
            else _PacedStream(self, plan, arrival, rid, self._lora(plan.lora_name), plan.pacing)
            for plan, rid in zip(plans, request_ids, strict=True)
        ]
        for stream in streams:
            stream.limit_to_context(self._params.context_length)  # raise here, not in the step loop
        if self._params.enable_prefix_caching:
            self._hash_prompts(streams)
        limit = self._params.max_waiting_requests
        loop = asyncio.get_running_loop()
        admission = _Admission(streams, loop.create_future() if limit is not None else None)
        # Keyed by when the request reaches the scheduler (its arrival plus the API server's work).
        heapq.heappush(self._inbox, (ready_time(self._params, arrival), self._submitted, admission))
        self._submitted += 1
        self._num_inbox += len(streams)
        self._live.update(streams)
        self._paced.update(s for s in streams if isinstance(s, _PacedStream))
        for stream in streams:
            if stream.remote is not None:
                self._spawn(self._check_pull(stream, stream.remote))
        await self.start()
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)
        if admission.decided is not None:
            try:
                await admission.decided
            except asyncio.CancelledError:
                for stream in streams:
                    self.close_stream(stream)
                raise
            self._check_serving()
            if admission.rejected:
                assert limit is not None
                raise EngineOverloaded(len(self._scheduler.waiting), limit)
        return list(streams)

    def _lora(self, name: str | None) -> tuple[int, ExtraKeys]:
        if name is None:
            return 0, None
        lora = self._loras.get(name)
        if lora is None:
            raise ValueError(f"unknown LoRA adapter '{name}'")
        return lora

    def _hash_prompts(self, streams: list[_Stream]) -> None:
        """Hash each distinct prompt's full blocks once, here rather than in the step loop.

        The ``n`` choices of a prompt share its ids (one tuple), so they share one hashing.
        """
        block_size = self._params.block_size
        done: dict[int, list[bytes]] = {}
        for stream in streams:
            ids = stream.prompt_token_ids
            if ids is None:
                continue
            hashes = done.get(id(ids))
            if hashes is None:
                hashes = done[id(ids)] = hash_blocks(ids, block_size, stream.extra_keys)
            stream.block_hashes = list(hashes)

    def _check_serving(self) -> None:
        if self.failure is not None:
            raise EngineStopped("the scheduler step loop failed") from self.failure
        if self.closed:
            raise EngineStopped("the scheduler engine is stopped")

    def close_stream(self, stream: _Stream) -> None:
        """The consumer is done with ``stream``: abort it if it has not ended (idempotent)."""
        self._live.discard(stream)
        if self._paced:
            self._paced.discard(stream)
        if stream.status >= _FINISHED:
            return
        now = max(self._clock.now(), stream.arrival)
        self._release_remote(stream)  # the client left mid-pull: the prefill side frees too
        if stream.in_inbox:
            # Dropped when the step loop reaches its admission.
            stream.status = _ABORTED
            stream.finished_time = now
            self._num_inbox -= 1
        else:
            self._scheduler.abort(stream, now)
        self._observer.on_request_finished(stream.to_stats())

    # -- disaggregated prefill/decode -----------------------------------------------------

    def held_blocks(self, request_id: str) -> tuple[int, ...] | None:
        stream = self._held.get(request_id)
        if stream is None or stream not in self._scheduler.held:
            return None
        return tuple(stream.blocks)

    def release_held(self, request_id: str) -> bool:
        stream = self._held.pop(request_id, None)
        if stream is None or not self._scheduler.release_held(stream):
            return False
        self._wake_loop()  # the freed blocks may admit a waiting request
        return True

    def _wake_loop(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    def _spawn(self, work: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._peer_tasks.add(task)
        task.add_done_callback(self._peer_tasks.discard)

    async def _check_pull(self, stream: _Stream, remote: RemotePrefill) -> None:
        """Ask the prefill replica whether it holds the blocks; the pull goes on, or fails, on its answer."""
        peer = self._kv_peer
        ok = False
        if peer is not None:
            try:
                ok = await peer.check(remote)
            except Exception:
                logger.exception("KV pull check for %s failed", stream.request_id)
        if stream.status >= _FINISHED:
            if ok:
                self._release_remote(stream)
            return
        if ok:
            stream.kv_pull_confirmed = True
            if stream.kv_ready_time < math.inf and remote.wait_s:
                # Admitted already, and SGLang's decode leg may have waited for its prefill: the
                # bytes leave once the prefill side has answered, so they cannot arrive before
                # then plus the pull's own time (not queued behind others: the link's queue was
                # already charged at admission).
                link = self._params.kv_link
                num_bytes = stream.num_external_tokens * self._params.kv_bytes_per_token_per_gpu
                pull = link.transfer_seconds(num_bytes) if link is not None else 0.0
                stream.kv_ready_time = max(stream.kv_ready_time, self._clock.now() + pull)
            elif stream.kv_ready_time < math.inf:
                # vLLM's order: the blocks were held before the decode leg was sent, and NIXL reads
                # them with no per-request ask. The answer's round trip is llmsim's own plumbing,
                # so the pull the link timed at admission stands; an answer later than that (a
                # busy host) makes the leg late by that much, never a pull's time more.
                stream.kv_ready_time = max(stream.kv_ready_time, self._clock.now())
        else:
            stream.remote = None  # nothing held there to release
            self._failed_pulls.append(stream)
        self._wake_loop()

    def _release_remote(self, stream: _Stream) -> None:
        """Tell the prefill replica to free ``stream``'s blocks (once)."""
        remote = stream.remote
        if remote is None or self._kv_peer is None:
            return
        stream.remote = None
        self._spawn(self._kv_peer.release(remote))

    def _settle_handoffs(self, now: float) -> None:
        """Between steps: failed pulls go to the scheduler's failure policy, and held prefill legs
        whose timeout passed are freed."""
        sched = self._scheduler
        failed, self._failed_pulls = self._failed_pulls, []
        recompute = self._recompute_failed_pulls
        for stream in failed:
            if stream.status >= _FINISHED:
                continue
            if stream.in_inbox:
                stream.remote_prefill = False
                if recompute:
                    continue
                # Ends before admission: the step loop's admission drops it.
                stream.finish_reason = FinishReason.ERROR
                stream.status = _FINISHED
                stream.finished_time = now
                self._num_inbox -= 1
            elif sched.fail_pull(stream, now, recompute):
                continue
            logger.warning("request %s: the KV transfer from its prefill replica failed", stream.request_id)
            self._live.discard(stream)
            stream.wake()
            self._observer.on_request_finished(stream.to_stats())
        if sched.held:
            for stream in sched.expire_held(now):
                self._held.pop(_held_key(stream), None)
                logger.debug("request %s: held KV blocks freed at the abort timeout", stream.request_id)

    async def _idle(self, deadline: float) -> None:
        """Wait for a request, a pull's answer or a release, or until ``deadline`` (inf: no limit)."""
        loop = asyncio.get_running_loop()
        self._wakeup = wakeup = loop.create_future()
        try:
            if deadline == math.inf:
                await wakeup
            else:
                timer = loop.create_task(self._clock.sleep_until(deadline))
                try:
                    await asyncio.wait((wakeup, timer), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    timer.cancel()
        finally:
            self._wakeup = None

    def snapshot(self) -> EngineSnapshot:
        inbox = None
        if self._params.lora is not None:
            inbox = [s for _, _, a in self._inbox for s in a.streams if s.status < _FINISHED]
        return self._scheduler.snapshot(self._num_inbox, inbox)

    # -- the step loop --------------------------------------------------------------------

    def _admit_arrivals(self, cutoff: float) -> None:
        """Hand every request that arrived by ``cutoff`` (the moment the step is decided) to the scheduler, or refuse it."""
        inbox = self._inbox
        while inbox and inbox[0][0] <= cutoff:
            admission = heapq.heappop(inbox)[2]
            live = [s for s in admission.streams if s.status < _FINISHED]  # aborted ones are gone
            self._num_inbox -= len(live)
            for stream in admission.streams:
                stream.in_inbox = False
            if not self._scheduler.add_requests(live, cutoff):
                admission.rejected = True
                self._live.difference_update(live)
            admission.decide()

    def _prepare_release(self, releasing: list[_Stream], deadline: float) -> list[tuple[_Stream, TokenEvent]]:
        """The tokens this step will release at ``deadline``, in the order they will be handed out.

        Worked out while the step runs (before the loop sleeps to its deadline), so the pass at the
        deadline is little more than the writes: each event is made here and shown to its
        consumer's ``prepare`` (which encodes its chunk). A sequence releases a token when the step
        computes up to its last token and it has outputs left (:meth:`Scheduler.releasing`, the
        rule of :meth:`Scheduler.update_from_output`, which still decides after the deadline); a stream
        that ends during the sleep (aborted, its client gone) is skipped then, and
        :meth:`_settle` hands over anything this missed.

        Order: first tokens first (a request's TTFT then carries only the wake-up's lag, not its
        place in a pass over the whole batch; a few per step at most, so the decode tokens behind
        them lose a few writes' time), then admission order rotated by one each step, so no
        stream is always the last of a large batch.
        """
        n = len(releasing)
        first = self._rotation % n if n else 0
        self._rotation += 1
        order = releasing[first:] + releasing[:first] if first else releasing
        starting = [s for s in order if s.num_output_tokens == 0]
        if starting and len(starting) < n:
            order = starting + [s for s in order if s.num_output_tokens != 0]
        pending: list[tuple[_Stream, TokenEvent]] = []
        # Once per token to release (up to a thousand per step): one TokenEvent, one call.
        for stream in order:
            index = stream.num_output_tokens
            event = TokenEvent(index, stream.plan.tokens[index], deadline)
            pending.append((stream, event))
            prepare = stream.prepare
            if prepare is not None and not stream.events:
                prepare(event)
        return pending

    def _hand_out(self, pending: list[tuple[_Stream, TokenEvent]]) -> int:
        """At the deadline: hand each prepared token to its stream, in the prepared order.

        Each goes to its consumer's sink right here when it has one and nothing is queued before
        it (the token is written in this same pass: no task wake-up per stream); otherwise it is
        queued and its consumer woken. A stream that ended during the sleep gets nothing.
        Every :data:`ARRIVAL_POLL_TOKENS` tokens, and after the last, requests that came in
        meanwhile are noted. Returns how many were handed out.
        """
        handed = 0
        poll_arrivals = self._poll_arrivals
        # Once per released token: the pass every token of the step waits on.
        for stream, event in pending:
            if stream.status is not _RUNNING:
                continue
            if not handed % ARRIVAL_POLL_TOKENS:
                poll_arrivals()
            handed += 1
            sink = stream.sink
            if sink is not None and not stream.events and sink(event):
                continue
            stream.events.append(event)
            stream.wake()
        poll_arrivals()
        return handed

    def _settle(self, released: list[_Stream], pending: list[tuple[_Stream, TokenEvent]], handed: int) -> None:
        """After the scheduler's update: first-token observations, and a check that the pass at the
        deadline handed out exactly the tokens the update released (a token it did not foresee
        goes out now, late; none while the two rules agree, which the tests hold)."""
        observer = self._observer
        # First tokens lead the pending order (see _prepare_release): only those are looked at.
        for stream, event in pending:
            if event.index:
                break
            if stream.num_output_tokens == 1:  # released now (not aborted during the sleep)
                observer.on_first_token(event.sim_time - stream.arrival)
        if handed == len(released):
            return
        foreseen = {id(s) for s, _ in pending}
        missed = [s for s in released if id(s) not in foreseen]
        logger.error(
            "a step released %d tokens its pass had not prepared (%d handed out, %d released)",
            len(missed),
            handed,
            len(released),
        )
        late: list[tuple[_Stream, TokenEvent]] = []
        for s in missed:
            index = s.num_output_tokens - 1
            event = TokenEvent(index, s.plan.tokens[index], s.token_times[-1])
            late.append((s, event))
            if index == 0:
                observer.on_first_token(event.sim_time - s.arrival)
        self._hand_out(late)

    async def _step_loop(self) -> None:
        sched = self._scheduler
        step_duration = sched.step_duration
        clock = self._clock
        observer = self._observer
        inbox = self._inbox
        step_start = self._timeline_end
        previous_start = -math.inf
        params = self._params
        gate = self._gate
        while True:
            if self._failed_pulls or sched.held:
                self._settle_handoffs(clock.now())
            if not sched.has_work():
                # Idle restart: anchored at the arrival stamp (or a pull's arrival), never at "now".
                restart = min(inbox[0][0] if inbox else math.inf, sched.next_pull_time())
                if restart == math.inf:
                    await self._idle(sched.next_held_expiry())
                    continue
                if restart > step_start:
                    step_start = restart
            self._admit_arrivals(admission_cutoff(params, step_start, previous_start, bool(sched.running)))
            if not sched.has_work() and not sched.receiving:
                continue  # every arrival was refused or had left
            self._poll_arrivals()  # half-way through the work between a pass and the next sleep
            out = sched.schedule(step_start)
            for stream in out.received:
                self._release_remote(stream)  # its bytes are here: the prefill side frees them
            if not out.scheduled:
                # Nothing can run: pulls in flight, or held and pulling blocks leave no room for
                # the waiting. Wait for what changes that, and restart the timeline then.
                await self._idle(min(sched.next_pull_time(), sched.next_held_expiry()))
                # Anchored at what ended the wait (a pull's arrival, a request's), else "now" (a release).
                resume = min(sched.next_pull_time(), inbox[0][0] if inbox else math.inf, clock.now())
                if resume > step_start:
                    step_start = resume
                continue
            duration = step_duration(out)
            deadline = step_start + duration
            pending = self._prepare_release(sched.releasing(out.scheduled), deadline)
            if gate is not None:
                gate.close(self, deadline)
            if clock.now() < deadline:
                lag = await clock.sleep_until(deadline)
            else:
                # A late deadline would return without suspending: yield anyway, or a loop running
                # behind would starve its consumers and new arrivals until it caught up. (Only
                # then: a wake-up a few µs late releases at once, not after another loop turn.)
                await asyncio.sleep(0)
                lag = max(0.0, clock.now() - deadline)
            # The writes first: the scheduler's bookkeeping of the step waits until every token is out.
            handed = self._hand_out(pending)
            # The earliest arrival among request work held back for this release (inf: none).
            earliest_held = gate.open(self) if gate is not None else math.inf
            result = sched.update_from_output(out, deadline)
            self._timeline_end = deadline
            self._settle(result.released, pending, handed)
            observer.on_step(sched.step_stats(out, step_start, duration, lag))
            for stream in result.finished:
                stream.wake()  # a plan with no tokens ends without a release
                self._live.discard(stream)
                if stream.remote_decode and stream in sched.held:
                    self._held[_held_key(stream)] = stream
                observer.on_request_finished(stream.to_stats())
            previous_start = step_start
            step_start = deadline
            if ready_time(params, earliest_held) <= admission_cutoff(
                params, step_start, previous_start, bool(sched.running)
            ):
                # Request work held back for this release could still join the next step: it runs
                # its next slice (parsing, planning, submitting) before the step's admissions are
                # decided, as it would have without the gate, which so moves no request to a later
                # step. (With async scheduling the next step's cutoff is already behind it.) Two
                # loop turns: work deferred as a callback (ReleaseGate.defer) runs in the first and
                # the task it starts in the second; a waiting task's slice in the first.
                await asyncio.sleep(0)
                await asyncio.sleep(0)

    async def _pipeline_loop(self) -> None:
        """The step loop with pipeline parallelism: vLLM's batch queue (``engine.scheduler.pipeline``).

        Batches are scheduled while the queue has room (every arrival by then admitted), then the
        loop sleeps to the oldest batch's end, hands out its tokens and updates the scheduler:
        batch ``j + depth`` is decided as batch ``j`` returns, as vLLM's engine core does.
        Arrivals while batches are in flight wait for the next return.
        """
        sched = self._scheduler
        clock = self._clock
        observer = self._observer
        inbox = self._inbox
        gate = self._gate
        pipe: Pipeline[_Stream] = Pipeline(self._params, sched.cost)
        now = self._timeline_end
        while True:
            if not sched.has_work() and not pipe.batches:
                # Idle restart: anchored at the arrival stamp, never at "now".
                if not inbox:
                    await self._idle(math.inf)
                    continue
                if inbox[0][0] > now:
                    now = inbox[0][0]
            self._admit_arrivals(now)
            self._poll_arrivals()
            while sched.has_work() and not pipe.full:
                out = sched.schedule(now)
                pipe.push(out, now, sched.lora_load_seconds(out))
            if not pipe.batches:
                continue  # every arrival was refused or had left
            batch = pipe.batches[0]
            out = batch.out
            deadline = batch.end
            pending = self._prepare_release(sched.releasing_pipelined(out), deadline)
            if gate is not None:
                gate.close(self, deadline)
            if clock.now() < deadline:
                lag = await clock.sleep_until(deadline)
            else:
                await asyncio.sleep(0)  # as _step_loop: never starve consumers when behind
                lag = max(0.0, clock.now() - deadline)
            handed = self._hand_out(pending)
            earliest_held = gate.open(self) if gate is not None else math.inf
            pipe.pop()
            result = sched.update_from_output(out, deadline)
            if deadline > now:
                now = deadline
            self._timeline_end = now
            self._settle(result.released, pending, handed)
            if out.scheduled:
                observer.on_step(sched.step_stats(out, batch.start, batch.end - batch.start, lag))
            for stream in result.finished:
                stream.wake()
                self._live.discard(stream)
                observer.on_request_finished(stream.to_stats())
            if ready_time(self._params, earliest_held) <= now:
                # As _step_loop: request work held back for this release may still join the next batch.
                await asyncio.sleep(0)
                await asyncio.sleep(0)
