"""Every scheduling decision, preemption included, following vLLM V1's ``Scheduler``.

One step, FCFS:

1. ``_schedule_running``: running sequences, in admission order, each get what they still need
   within the token budget (``max_batch_tokens``): one token for a decode, the next chunk for a
   prefill (prefill is always chunked). A sequence that needs a block and finds none preempts
   the newest admitted running sequence (recompute: its blocks are freed, its computed tokens
   reset to 0, it goes to the front of the waiting queue); if it is itself the newest it
   preempts itself, which ends the pass.
2. ``_schedule_waiting``, only if nothing was preempted in this step: the waiting queue is
   admitted in order (preempted sequences sit at its front) while fewer than
   ``max_num_sequences`` run and budget remains. Each sequence first looks up its longest cached
   prefix (prefix caching: whole blocks, at most its length minus one token), then must fit as a
   whole - prompt plus tokens already output, which a resumed sequence recomputes, less the hit
   blocks, plus the hit blocks that are free now - in the free blocks minus the watermark. The
   head of the queue blocks the rest. With LoRA, a sequence whose adapter would make more than
   ``max_loras`` distinct adapters among the running ones is skipped for this step (it keeps its
   place; later ones may still be admitted). Blocks are allocated for the scheduled chunk only,
   and the chunk's full blocks enter the prefix cache at once. Admission never looks at the
   planned output length.
3. ``update_from_output``: a sequence whose computed tokens caught up with its length samples a
   token: the step that ends a prefill releases the first token, each later step one more. A
   sequence that has released its planned tokens finishes, like an end-of-sequence token, and
   frees its blocks (cached ones stay findable until evicted).

Pipeline parallelism (``pipeline_parallel_size`` > 1, ``self.pipelined``): batches overlap, as in
vLLM's batch queue (``pipeline``: the drivers schedule while it has room). A batch's computed
tokens are counted when it is scheduled and its tokens released when it returns
(``SchedulerOutput.sampled`` says whose); in between the running pass follows vLLM's in-flight
rules (:meth:`Scheduler._schedule_running_pipelined`): with async scheduling an output placeholder
per batch in flight and a decode at most every PP steps (the V2 model runner's
``next_decode_eligible_step``), without it no decode while its batch is in flight; prefill chunks
in consecutive batches. A request preempted with batches in flight still gets their tokens (vLLM's
stale outputs). Blocks enter the prefix cache as their tokens become known.

Where this differs from vLLM V1 (read from vllm/v1/core/sched/scheduler.py, kv_cache_manager.py):

- Async scheduling (``SchedulerParams.async_scheduling``, vLLM's default since late 2025) is modelled by its
  effect on admission only (the drivers admit arrivals up to the start of the previous step while
  running sequences keep the pipeline full: :func:`admission_cutoff`). Not modelled: the CPU time
  it hides (``step_overhead_s`` is the per-step cost as measured on such a server), the blocks of
  a finished request returning to the pool one step late, and the wasted decode slot of a request
  that stops on an end-of-sequence token. See docs/routing.md.
- No speculative decoding, encoder inputs, priority policy, cache salts or
  ``long_prefill_token_threshold``. One KV connector: disaggregated prefill/decode's pull, as
  NIXL does it (see the package docstring); a decode leg's pull starts at its admission and is
  ready for the first step starting after its last byte arrived (vLLM's worker reports finished
  receives after a step, so its request joins one step later at most).
- The whole-sequence admission check is vLLM's ``scheduler_reserve_full_isl`` (default on in
  recent releases; older V1 releases checked only the first chunk). As in vLLM, the watermark is
  applied only while some sequence is running, so a lone request is never kept out by it.
- A sequence stops at ``context_length`` (vLLM's max_model_len check) with finish reason
  ``length``; a cache smaller than one full-context request is refused at construction.
- An abort frees the sequence's blocks at once, even mid-step; the step in flight still costs
  what it was scheduled with (the GPU is already running it), but releases nothing to it.
- LoRA: loading an adapter that is not among the ``max_cpu_loras`` most recently used ones adds
  ``load_s`` to the step that first needs it (vLLM's worker loads it from disk before running
  the batch); moving it into a GPU slot costs nothing.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Generic, TypeVar

from llmsim.engine.scheduler.block_hash import BlockHash
from llmsim.engine.scheduler.cost_model import CostModel
from llmsim.engine.scheduler.kv_cache import KVCache
from llmsim.engine.scheduler.kv_link import KVLink
from llmsim.engine.scheduler.params import SchedulerParams, check_context_fits, num_kv_blocks
from llmsim.engine.scheduler.sequence import Sequence, SequenceStatus
from llmsim.types import EngineSnapshot, FinishReason, StepStats

S = TypeVar("S", bound=Sequence)

_WAITING = SequenceStatus.WAITING
_REMOTE = SequenceStatus.WAITING_FOR_REMOTE_KVS
_PREEMPTED = SequenceStatus.PREEMPTED
_RUNNING = SequenceStatus.RUNNING
_FINISHED = SequenceStatus.FINISHED
_ABORTED = SequenceStatus.ABORTED


class SchedulerOutput(Generic[S]):
    """One step's batch: what the cost model prices and ``update_from_output`` advances."""

    # A plain class rather than a dataclass: mypyc cannot compile a generic dataclass (see setup.py).
    __slots__ = (
        "external_prefix_cache_hits",
        "external_prefix_cache_queries",
        "index",
        "kv_used_blocks",
        "num_context_tokens",
        "num_decode_tokens",
        "num_lora_loads",
        "num_prefill_tokens",
        "preempted",
        "prefix_cache_hits",
        "prefix_cache_queries",
        "pulls",
        "received",
        "sampled",
        "scheduled",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        # Sequences with tokens computed in this step, running ones first, then newly admitted.
        self.scheduled: list[S] = []
        # Sequences preempted in this step (now at the front of the waiting queue).
        self.preempted: list[S] = []
        self.num_prefill_tokens = 0
        self.num_decode_tokens = 0
        # Sum over scheduled sequences of their length after the step (see cost_model).
        self.num_context_tokens = 0
        # KV blocks in use while the step runs (StepStats reports the end of the step, as vLLM's gauge).
        self.kv_used_blocks = 0
        # Prefix cache lookups of the sequences admitted for the first time in this step, in tokens.
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        # LoRA adapters the step had to load (each costs LoraParams.load_s).
        self.num_lora_loads = 0
        # The KV connector's lookups (kv_link set): prompt tokens, and tokens to pull.
        self.external_prefix_cache_queries = 0
        self.external_prefix_cache_hits = 0
        # Decode legs whose pull started in this step (now WAITING_FOR_REMOTE_KVS, holding their
        # blocks, ``kv_ready_time`` set), and those whose pull completed by its start (now
        # waiting to recompute their last prompt token). A live driver tells the prefill replica
        # to free a received leg's blocks.
        self.pulls: list[S] = []
        self.received: list[S] = []
        # Pipeline parallelism only: the scheduled sequences whose token this batch samples (with
        # batches in flight, a sequence's counters at the batch's end no longer say so).
        self.sampled: list[S] = []

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens


class StepResult(Generic[S]):
    """What a step produced: who released a token, who finished."""

    __slots__ = ("finished", "released")

    def __init__(self) -> None:
        self.released: list[S] = []
        self.finished: list[S] = []


def ready_time(params: SchedulerParams, arrival: float) -> float:
    """When a request that arrived at ``arrival`` reaches the scheduler: it joins the first step
    decided at or after this moment.

    In vLLM a request's own CPU work comes before the scheduler sees it: the API server parses
    the body, renders the chat template and tokenizes (``OpenAIServing``, the renderer,
    ``InputProcessor.process_inputs``), registers it with the output processor and sends it to
    the engine core process over ZMQ (``AsyncLLM._add_request``), whose busy loop adds it to
    the scheduler's waiting queue before its next step. ``request_overhead_s`` is that whole
    path, a constant per request; the client's time to first token includes it, the steps do
    not. Per-token work on the way out (detokenizing, SSE) is paid on every token and is part of
    the measured inter-token latency the step cost is fitted to.
    """
    return arrival + params.request_overhead_s


def admission_cutoff(params: SchedulerParams, step_start: float, previous_start: float, busy: bool) -> float:
    """Latest arrival stamp that joins the step starting at ``step_start``.

    Synchronous scheduling decides a step when it starts: everything that arrived by then joins.
    With vLLM's async scheduling the engine core schedules step k+1 as soon as it has launched
    step k (a batch queue of two), so while running sequences keep the pipeline full
    (``busy``), step k+1 only sees what arrived by the start of step k: a request arriving during
    a step waits one step more. An idle engine schedules at once (the first step after an idle
    period sees its arrivals, as in vLLM, whose lookahead batch was empty).
    """
    return previous_start if params.async_scheduling and busy else step_start


class ItlGaps:
    """Inter-token gaps as (value, count) entries in the order they were counted; a value may
    appear in several entries.

    Entries, not a value -> count dict: a decode run counts one gap per step and most steps'
    gap is a value of its own (the context grows), so a dict held nearly one key per step all
    the same, and a hash and an insert per step cost more than two appends (the fleet bench,
    compiled: 250 M fewer instructions of ~3,150 M). Whoever reads the distribution merges the
    entries, once.
    """

    __slots__ = ("counts", "values")

    def __init__(self) -> None:
        self.values: list[float] = []
        self.counts: list[int] = []

    def add(self, gap: float, count: int) -> None:
        self.values.append(gap)
        self.counts.append(count)


class Scheduler(Generic[S]):
    """Decides each step's batch; time only enters as the numbers passed in (``now``).

    Parameters
    ----------
    params:
        The engine's plain-number configuration.
    """

    def __init__(self, params: SchedulerParams) -> None:
        pp = params.pipeline_parallel_size
        if pp > 1 and params.kv_link is not None:
            raise ValueError("pipeline_parallel_size > 1 with disaggregated prefill/decode is not simulated")
        num_blocks = num_kv_blocks(params)
        check_context_fits(params, num_blocks)
        self.params = params
        self.kv = KVCache(
            num_blocks,
            params.block_size,
            enable_caching=params.enable_prefix_caching,
            record_events=params.enable_kv_cache_events,
        )
        self.cost = CostModel(params)
        # Pipeline parallelism: batches overlap (see schedule and update_from_output). With async
        # scheduling a sequence that samples in a batch may decode again PP steps later (vLLM's
        # decode_stagger); without it, once its token is back.
        self.pipelined = pp > 1
        self._stagger = pp if pp > 1 and params.async_scheduling else 0
        lora = params.lora
        self._max_loras = lora.max_loras if lora is not None else 0
        self._max_cpu_loras = lora.max_cpu_loras if lora is not None else 0
        self._lora_load_s = lora.load_s if lora is not None else 0.0
        # Adapters loaded on the simulated worker, least recently used first (vLLM's LRU adapter cache).
        self.loaded_loras: OrderedDict[str, None] = OrderedDict()
        self.waiting: deque[S] = deque()
        # Admission order: the newest admitted is last, the first to be preempted.
        self.running: list[S] = []
        self.watermark_blocks = int(params.watermark * num_blocks)
        self.num_steps = 0
        self.num_preemptions = 0
        # Inter-token gaps, when a caller asks for them (a fleet replica's ITL histogram):
        # counted as tokens are released, so a decode run adds one entry per step rather than
        # one per token (every sequence of a decode step gets the same gap).
        self.itl_gaps: ItlGaps | None = None
        self._max_batch_tokens = params.max_batch_tokens
        self._max_num_sequences = params.max_num_sequences
        # Disaggregated prefill/decode (see the package docstring). The link decode legs' pulls
        # queue on; None: no KV connector (no pulls, no external prefix stats).
        self.link: KVLink | None = KVLink(params.kv_link) if params.kv_link is not None else None
        # Decode legs in WAITING_FOR_REMOTE_KVS, in the order their pulls started.
        self.receiving: list[S] = []
        # Finished prefill legs whose blocks wait for a pull -> when they are freed anyway.
        # Insertion order is finishing order, and every leg waits the same timeout, so the
        # first entries are the first to expire.
        self.held: dict[S, float] = {}
        # Lookups counted in steps that ran nothing (a pull started while nothing could run): a
        # driver reports no such step, so they join the next step that runs.
        self._unreported = (0, 0, 0, 0)

    # -- requests -------------------------------------------------------------------------

    def add_request(self, seq: S) -> None:
        """Queue a new sequence behind the waiting ones (raises ValueError if its prompt cannot fit)."""
        seq.limit_to_context(self.params.context_length)
        seq.status = _WAITING
        self.waiting.append(seq)

    def add_requests(self, seqs: list[S], now: float) -> bool:
        """Queue the choices of one request arriving at ``now``, or refuse them all.

        With ``max_waiting_requests`` set, they are refused (status REJECTED, False returned) when
        they would take the waiting queue past the limit: the API answers 503, as vLLM does past
        its queue limits. Judged against the queue at the request's arrival on the simulated
        timeline, so a replica's capacity never depends on the host it runs on.
        """
        limit = self.params.max_waiting_requests
        if limit is not None and len(self.waiting) + len(seqs) > limit:
            for seq in seqs:
                seq.status = SequenceStatus.REJECTED
                seq.finished_time = now
            return False
        for seq in seqs:
            self.add_request(seq)
        return True

    def abort(self, seq: S, now: float) -> bool:
        """End ``seq`` wherever it is and free its blocks at once; False if it had already ended
        (a finished prefill leg's held blocks stay held: :meth:`release_held` frees them)."""
        status = seq.status
        if status >= _FINISHED:
            return False
        if status is _RUNNING:
            self.running.remove(seq)
        elif status is _REMOTE:
            self.receiving.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.kv.free(seq)
        seq.status = _ABORTED
        seq.finished_time = now
        return True

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    # -- disaggregated prefill/decode -----------------------------------------------------

    def next_pull_time(self) -> float:
        """When the earliest confirmed pull in flight completes (inf: none)."""
        return min((s.kv_ready_time for s in self.receiving if s.kv_pull_confirmed), default=math.inf)

    def next_held_expiry(self) -> float:
        """When the first held prefill leg's blocks are freed for want of a pull (inf: none held)."""
        for deadline in self.held.values():
            return deadline
        return math.inf

    def release_held(self, seq: S) -> bool:
        """A decode replica has pulled ``seq``'s blocks: free them. False if they were not held
        (already pulled, or freed at the timeout)."""
        if self.held.pop(seq, None) is None:
            return False
        self.kv.free(seq)
        return True

    def expire_held(self, now: float) -> list[S]:
        """Free the blocks of every held prefill leg whose timeout has passed by ``now`` (vLLM frees
        them when VLLM_NIXL_ABORT_REQUEST_TIMEOUT passes without a pull); returns those legs."""
        held = self.held
        expired: list[S] = []
        for seq, deadline in held.items():
            if deadline > now:
                break
            expired.append(seq)
        for seq in expired:
            del held[seq]
            self.kv.free(seq)
        return expired

    def fail_pull(self, seq: S, now: float, recompute: bool) -> bool:
        """The prefill replica cannot give ``seq``'s blocks (unreachable, restarted, freed them at
        its timeout). vLLM's ``kv_load_failure_policy``: ``recompute`` prefills the prompt here
        instead (True returned: the sequence goes on); ``fail`` ends it with finish reason
        ``error`` (False returned, status FINISHED). A sequence that already ended is left alone."""
        status = seq.status
        if status >= _FINISHED:
            return False
        seq.remote_prefill = False
        if status is _REMOTE:
            self.receiving.remove(seq)
            self.kv.free(seq)
            seq.num_computed_tokens = 0
            seq.num_external_tokens = 0
            seq.kv_ready_time = math.inf
            seq.status = _WAITING
            self.waiting.appendleft(seq)
        if recompute or status is _RUNNING:
            # A running one had its pull complete already: nothing left to fail.
            return True
        if seq in self.waiting:  # (a live driver's inbox may still hold it)
            self.waiting.remove(seq)
        seq.finish_reason = FinishReason.ERROR
        seq.status = _FINISHED
        seq.finished_time = now
        return False

    def _promote_received(self, out: SchedulerOutput[S], now: float) -> None:
        """Decode legs whose pull has completed by ``now`` go back to the front of the waiting queue,
        their whole prompt computed but the last token, which they recompute for its logits (vLLM's
        ``_update_waiting_for_remote_kv``; vLLM puts skipped waiting requests back at the front)."""
        ready = [s for s in self.receiving if s.kv_pull_confirmed and s.kv_ready_time <= now]
        if not ready:
            return
        self.receiving = [s for s in self.receiving if not (s.kv_pull_confirmed and s.kv_ready_time <= now)]
        for seq in reversed(ready):
            computed = seq.num_prompt_tokens - 1
            seq.num_computed_tokens = computed
            # vLLM's num_cached_tokens: what the request's first scheduled step found computed.
            seq.num_cached_tokens = computed
            seq.remote_prefill = False  # one pull per request (a preempted leg recomputes locally)
            seq.status = _WAITING
            self.waiting.appendleft(seq)
        out.received = ready

    def _start_pull(self, out: SchedulerOutput[S], seq: S, hits: list[int], now: float) -> None:
        """Admit decode leg ``seq``: its local prefix hits, then blocks for the rest of its prompt,
        which it pulls (vLLM's ``get_num_new_matched_tokens`` + ``update_state_after_alloc``). It
        takes no budget and no running slot while it waits."""
        kv = self.kv
        kv.take_cached(seq, hits)
        external = seq.num_prompt_tokens - len(hits) * kv.block_size
        allocated = kv.allocate_slots(seq, external)
        assert allocated, "the whole sequence fits, so its prompt does"
        seq.num_external_tokens = external
        # Each tensor-parallel rank pulls its share of the heads over its own NIC, all at once.
        num_bytes = external * self.params.kv_bytes_per_token_per_gpu
        link = self.link
        seq.kv_ready_time = link.pull(now, num_bytes) if link is not None else now
        seq.status = _REMOTE
        if seq.scheduled_time is None:
            seq.scheduled_time = now
        self.receiving.append(seq)
        out.pulls.append(seq)
        out.external_prefix_cache_hits += external

    def load_lora(self, name: str) -> None:
        """Load adapter ``name`` on the worker now (vLLM's ``add_lora``: startup and runtime loads)."""
        self._touch_lora(name)

    def _touch_lora(self, name: str) -> bool:
        """Mark ``name`` most recently used; True if it had to be loaded (evicting the least recent)."""
        loaded = self.loaded_loras
        if name in loaded:
            loaded.move_to_end(name)
            return False
        loaded[name] = None
        if len(loaded) > self._max_cpu_loras:
            loaded.popitem(last=False)
        return True

    def cached_prefix_tokens(self, block_hashes: Iterable[BlockHash]) -> int:
        """Leading tokens of a prompt with these full-block hashes that would hit now (0 with caching off).

        For routers and planners; a request's own admission further caps its hit at its length
        minus one token. Hashes come from :func:`~llmsim.engine.scheduler.block_hash.hash_blocks`.
        """
        return self.kv.count_cached_prefix(block_hashes) * self.kv.block_size

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block (vLLM's ``reset_prefix_cache``); False while requests hold blocks."""
        return self.kv.reset_prefix_cache()

    def lora_adapters(self, inbox: list[S] | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Adapters of the running and of the waiting sequences (``inbox``: not yet queued, counted as waiting)."""
        running = tuple(dict.fromkeys(s.lora_name for s in self.running if s.lora_name is not None))
        waiting = dict.fromkeys(s.lora_name for s in self.waiting if s.lora_name is not None)
        if inbox:
            waiting.update(dict.fromkeys(s.lora_name for s in inbox if s.lora_name is not None))
        return running, tuple(waiting)

    def snapshot(self, num_inbox: int = 0, inbox: list[S] | None = None) -> EngineSnapshot:
        """Live figures (``num_inbox``: requests that arrived but are not yet in the waiting queue)."""
        kv = self.kv
        running, waiting = self.lora_adapters(inbox) if self._max_loras else ((), ())
        return EngineSnapshot(
            num_running=len(self.running),
            num_waiting=num_inbox + len(self.waiting) + len(self.receiving),
            kv_used_blocks=kv.num_used,
            kv_total_blocks=kv.num_usable_blocks,
            running_lora_adapters=running,
            waiting_lora_adapters=waiting,
        )

    # -- one step -------------------------------------------------------------------------

    def schedule(self, now: float) -> SchedulerOutput[S]:
        """Decide the next step, which starts at ``now``; advances computed tokens at once (as vLLM)."""
        out: SchedulerOutput[S] = SchedulerOutput(self.num_steps)
        self.num_steps += 1
        if self.receiving:
            self._promote_received(out, now)
        if self.pipelined:
            budget = self._schedule_running_pipelined(out, self._max_batch_tokens)
            first_admitted = len(out.scheduled)
        else:
            budget = self._schedule_running(out, self._max_batch_tokens)
        # vLLM admits nothing in a step that preempted: the freed room is for the survivors.
        if not out.preempted:
            budget = self._schedule_waiting(out, budget, now)
        if self.pipelined:
            for seq in out.scheduled[first_admitted:]:
                # Newly admitted: nothing in flight, so the chunk samples if it reaches the end.
                if seq.num_computed_tokens >= seq.num_prompt_tokens + seq.num_output_tokens:
                    self._samples(out, seq)
        return self._make_output(out, budget)

    def _samples(self, out: SchedulerOutput[S], seq: S) -> None:
        """``seq``'s token comes out of ``out``: one more batch in flight for it (vLLM's
        AsyncScheduler._update_after_schedule: an output placeholder, and no decode before
        ``decode_stagger`` steps)."""
        out.sampled.append(seq)
        seq.num_in_flight += 1
        if self._stagger:
            seq.num_placeholders += 1
            seq.decode_eligible_step = out.index + self._stagger

    def _schedule_running_pipelined(self, out: SchedulerOutput[S], budget: int) -> int:
        """vLLM's running pass with batches in flight (pipeline parallelism).

        A sequence's computed tokens moved on when its last batch was scheduled. With async
        scheduling its in-flight tokens count as placeholders: it needs one more token at once,
        but is skipped until ``decode_eligible_step`` (vLLM's ``next_decode_eligible_step``) and
        once its batches in flight reach its last token (``num_computed_tokens + 2 -
        num_output_placeholders >= num_prompt_tokens + max_tokens``). Without async scheduling a
        decode with its batch in flight has nothing to compute and is skipped (vLLM's
        ``num_new_tokens == 0``). Prefill chunks follow each other in consecutive batches.
        """
        running = self.running
        kv = self.kv
        bs = kv.block_size
        step = out.index
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            placeholders = seq.num_placeholders
            computed = seq.num_computed_tokens
            if placeholders and computed + 2 - placeholders >= seq.num_prompt_tokens + seq.max_output_tokens:
                i += 1
                continue
            if step < seq.decode_eligible_step:
                i += 1
                continue
            known = seq.num_prompt_tokens + seq.num_output_tokens
            need = known + placeholders - computed
            if need <= 0:
                i += 1
                continue
            n = need if need <= budget else budget
            while not kv.allocate_slots(seq, n):
                victim = running.pop()
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is seq:
                    return budget
            if need == 1 and (placeholders or seq.num_output_tokens):
                out.num_decode_tokens += 1
            else:
                out.num_prefill_tokens += n
            computed += n
            seq.num_computed_tokens = computed
            out.num_context_tokens += computed
            out.scheduled.append(seq)
            # Blocks enter the prefix cache once their tokens are known (placeholders are not).
            cacheable = computed if computed < known else known
            if seq.hashable and cacheable // bs > seq.num_cached_blocks:
                kv.cache_blocks(seq, cacheable)
            if computed >= known + placeholders:
                self._samples(out, seq)
            budget -= n
            i += 1
        return budget

    def _schedule_running(self, out: SchedulerOutput[S], budget: int) -> int:
        running = self.running
        kv = self.kv
        bs = kv.block_size
        scheduled = out.scheduled
        i = 0
        # Once per running sequence per step: a decode (most of them) is taken here, _take's
        # decode case inlined (NOTE: a mirrored rule, see the package docstring); anything else
        # goes through _take.
        while i < len(running) and budget > 0:
            seq = running[i]
            computed = seq.num_computed_tokens
            outputs = seq.num_output_tokens
            need = seq.num_prompt_tokens + outputs - computed
            assert need > 0, "a running sequence always has a token to compute"
            n = need if need <= budget else budget
            # allocate_slots' own first test, so that a step that fits in the blocks held (a
            # decode, most steps) costs no call.
            if -(-(computed + n) // bs) > len(seq.blocks):
                while not kv.allocate_slots(seq, n):
                    victim = running.pop()
                    self._preempt(victim)
                    out.preempted.append(victim)
                    if victim is seq:
                        return budget
            if need == 1 and outputs:
                # Decode: everything but the latest released token is computed (see _take).
                computed += 1
                seq.num_computed_tokens = computed
                out.num_decode_tokens += 1
                out.num_context_tokens += computed
                scheduled.append(seq)
                cached = seq.num_cached_blocks
                if (
                    seq.hashable
                    and computed // bs > cached
                    and (seq.prompt_token_ids is not None or len(seq.block_hashes) > cached)
                ):
                    kv.cache_blocks(seq, computed)
            else:
                self._take(out, seq, n)
            budget -= n
            i += 1
        return budget

    def _schedule_waiting(self, out: SchedulerOutput[S], budget: int, now: float) -> int:
        waiting = self.waiting
        running = self.running
        kv = self.kv
        max_loras = self._max_loras
        # Adapters of every running sequence, scheduled in this step or not (vLLM's scheduled_loras).
        loras = {s.lora_name for s in running if s.lora_name is not None} if max_loras else set()
        skipped: list[S] = []
        caching = kv.enable_caching
        connector = self.link is not None
        bs = kv.block_size
        while waiting and budget > 0 and len(running) < self._max_num_sequences:
            seq = waiting[0]
            lora = seq.lora_name
            if lora is not None and len(loras) >= max_loras and lora not in loras:
                # Not head-of-line: set aside for this step, later requests may still run.
                skipped.append(waiting.popleft())
                continue
            if seq.blocks:
                # A decode leg whose pull completed: its blocks are held, its last token to compute.
                waiting.popleft()
                n = seq.num_tokens - seq.num_computed_tokens
                if n > budget:
                    n = budget
                running.append(seq)
                if lora is not None:
                    loras.add(lora)
                seq.status = _RUNNING
                self._take(out, seq, n)
                budget -= n
                continue
            hits = kv.find_cached_prefix(seq)
            reserve = self.watermark_blocks if running else 0
            if kv.num_blocks_to_admit(seq, hits) + reserve > kv.num_free:
                break
            waiting.popleft()
            if seq.num_preemptions == 0:
                # vLLM 0.34 records a lookup once, when the request is admitted; a resumed
                # request's lookup goes to stats it does not export.
                if caching:
                    out.prefix_cache_queries += seq.num_tokens
                    out.prefix_cache_hits += len(hits) * bs
                if connector:
                    out.external_prefix_cache_queries += seq.num_tokens
            if seq.remote_prefill:
                self._start_pull(out, seq, hits, now)
                continue
            kv.take_cached(seq, hits)
            hit_tokens = len(hits) * bs
            if seq.num_preemptions == 0:
                seq.num_cached_tokens = hit_tokens
            n = seq.num_tokens - hit_tokens
            if n > budget:
                n = budget
            allocated = kv.allocate_slots(seq, n)
            assert allocated, "the whole sequence fits, so its first chunk does"
            running.append(seq)
            if lora is not None:
                loras.add(lora)
            seq.status = _RUNNING
            if seq.scheduled_time is None:
                seq.scheduled_time = now
            self._take(out, seq, n)
            budget -= n
        if skipped:
            waiting.extendleft(reversed(skipped))
        return budget

    def _take(self, out: SchedulerOutput[S], seq: S, n: int) -> None:
        """Put ``n`` of ``seq``'s tokens in the batch."""
        computed = seq.num_computed_tokens
        # Decode: everything but the latest released token is computed; that token is the one.
        # (A resumed sequence whose recompute ends with a 1-token chunk counts as a decode too:
        # the GPU does the same work.)
        outputs = seq.num_output_tokens
        if outputs and computed + 1 == seq.num_prompt_tokens + outputs:
            out.num_decode_tokens += 1
        else:
            out.num_prefill_tokens += n
        computed += n
        seq.num_computed_tokens = computed
        out.num_context_tokens += computed
        out.scheduled.append(seq)
        cached = seq.num_cached_blocks
        if (
            seq.hashable
            and computed // self.kv.block_size > cached
            and (seq.prompt_token_ids is not None or len(seq.block_hashes) > cached)
        ):
            # The KV this step writes is cached as it is scheduled: only when it fills a block
            # whose identity is known (cache_blocks' own first tests, here so that most decode
            # steps cost no call; without token ids, the identities given are all there is).
            self.kv.cache_blocks(seq, computed)

    def _preempt(self, seq: S) -> None:
        self.kv.free(seq, preempted=True)
        seq.num_computed_tokens = 0
        # Pipeline parallelism: batches in flight still deliver their tokens, but no longer count
        # as placeholders (vLLM's num_stale_output_tokens).
        seq.num_stale = seq.num_in_flight
        seq.num_placeholders = 0
        seq.status = _PREEMPTED
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def _make_output(self, out: SchedulerOutput[S], budget: int) -> SchedulerOutput[S]:
        if self._max_loras:
            for name in {s.lora_name for s in out.scheduled if s.lora_name is not None}:
                if self._touch_lora(name):
                    out.num_lora_loads += 1
        # Cheap invariants, every step: a simulator's cheapest bug detector.
        assert budget >= 0, "token budget overspent"
        assert out.num_tokens == self._max_batch_tokens - budget, "token accounting is off"
        assert len(self.running) <= self._max_num_sequences, "too many running sequences"
        # (Held and pulling blocks may leave no room for any waiting request: an empty step.)
        # (With pipeline parallelism every running sequence may have its batch in flight.)
        assert not self.has_work() or out.scheduled or self.held or self.receiving or self.pipelined, (
            "work pending but nothing scheduled"
        )
        self.kv.check()
        out.kv_used_blocks = self.kv.num_used
        if not out.scheduled:
            carried = self._unreported
            self._unreported = (
                carried[0] + out.prefix_cache_queries,
                carried[1] + out.prefix_cache_hits,
                carried[2] + out.external_prefix_cache_queries,
                carried[3] + out.external_prefix_cache_hits,
            )
            out.prefix_cache_queries = out.prefix_cache_hits = 0
            out.external_prefix_cache_queries = out.external_prefix_cache_hits = 0
        elif self._unreported != (0, 0, 0, 0):
            carried = self._unreported
            out.prefix_cache_queries += carried[0]
            out.prefix_cache_hits += carried[1]
            out.external_prefix_cache_queries += carried[2]
            out.external_prefix_cache_hits += carried[3]
            self._unreported = (0, 0, 0, 0)
        return out

    def finish_blocks(self, seq: S, now: float) -> None:
        """``seq`` has finished at ``now``: free its blocks, or hold them for a pull if it is a prefill
        leg that stopped at its length (vLLM's NIXL ``request_finished`` delays the free only for
        FINISHED_LENGTH_CAPPED with blocks; any other end frees at once)."""
        if seq.remote_decode and seq.finish_reason is FinishReason.LENGTH and seq.blocks:
            self.held[seq] = now + self.params.kv_abort_timeout_s
        else:
            self.kv.free(seq)

    def lora_load_seconds(self, out: SchedulerOutput[S]) -> float:
        """What loading the step's non-resident adapters adds to it."""
        return out.num_lora_loads * self._lora_load_s

    def step_duration(self, out: SchedulerOutput[S]) -> float:
        """Simulated seconds the step takes: the roofline of its batch, plus adapter loads."""
        duration = self.cost.step_duration(out.num_tokens, out.num_context_tokens, len(out.scheduled))
        if out.num_lora_loads:
            duration += out.num_lora_loads * self._lora_load_s
        return duration

    def releasing(self, scheduled: list[S]) -> list[S]:
        """The sequences of a step in flight that its end will give a token, if none ends first: those
        the step computes up to their last token, with outputs left (what the live engine prepares
        before the deadline). NOTE: :meth:`update_from_output`'s rule, inlined there (once per
        sequence per step in virtual time): a mirrored rule, see the package docstring."""
        return [
            s
            for s in scheduled
            if s.status is _RUNNING
            and s.num_output_tokens < s.max_output_tokens
            and s.num_computed_tokens >= s.num_prompt_tokens + s.num_output_tokens
        ]

    def releasing_pipelined(self, out: SchedulerOutput[S]) -> list[S]:
        """:meth:`releasing` for a batch of a pipeline, the oldest in flight: what its end releases."""
        return [s for s in out.sampled if s.status < _FINISHED and s.num_output_tokens < s.max_output_tokens]

    def _update_pipelined(self, out: SchedulerOutput[S], now: float) -> StepResult[S]:
        """update_from_output for a batch of a pipeline (batches end in the order they were scheduled)."""
        result: StepResult[S] = StepResult()
        released = result.released
        finished = result.finished
        gaps = self.itl_gaps
        for seq in out.sampled:
            seq.num_in_flight -= 1
            if seq.num_stale:
                seq.num_stale -= 1
            elif seq.num_placeholders:
                seq.num_placeholders -= 1
            status = seq.status
            if status >= _FINISHED:
                continue  # aborted (or finished) while the batch ran
            outputs = seq.num_output_tokens
            if outputs < seq.max_output_tokens:
                outputs += 1
                seq.num_output_tokens = outputs
                times = seq.token_times
                if gaps is not None and times:
                    gaps.add(now - times[-1], 1)
                times.append(now)
                if seq.first_token_time is None:
                    seq.first_token_time = now
                released.append(seq)
            if outputs >= seq.max_output_tokens:
                if status is not _RUNNING:
                    # A preempted sequence's stale batch brought its last token (vLLM delivers it).
                    self.waiting.remove(seq)
                self.finish_blocks(seq, now)
                seq.status = _FINISHED
                seq.finished_time = now
                finished.append(seq)
        if finished:
            self.running = [s for s in self.running if s.status is _RUNNING]
        self.kv.check()
        return result

    def update_from_output(self, out: SchedulerOutput[S], now: float) -> StepResult[S]:
        """Advance the sequences of a step that ended at ``now``: release tokens, finish sequences."""
        if self.pipelined:
            return self._update_pipelined(out, now)
        result: StepResult[S] = StepResult()
        released = result.released
        finished = result.finished
        gaps = self.itl_gaps
        # Gaps are counted per run of equal ones (a decode step's sequences mostly share theirs).
        gap_run = 0.0
        gap_count = 0
        # Once per scheduled sequence per step; the only allocation per token is the time stamp.
        for seq in out.scheduled:
            if seq.status is not _RUNNING:
                continue  # aborted while the step ran
            outputs = seq.num_output_tokens
            if seq.num_computed_tokens < seq.num_prompt_tokens + outputs:
                continue  # a prefill chunk that did not reach the end
            if outputs < seq.max_output_tokens:
                outputs += 1
                seq.num_output_tokens = outputs
                times = seq.token_times
                if gaps is not None and times:
                    gap = now - times[-1]
                    if gap != gap_run or not gap_count:
                        if gap_count:
                            gaps.add(gap_run, gap_count)
                        gap_run = gap
                        gap_count = 0
                    gap_count += 1
                times.append(now)
                if seq.first_token_time is None:
                    seq.first_token_time = now
                released.append(seq)
            if outputs >= seq.max_output_tokens:
                self.finish_blocks(seq, now)
                seq.status = _FINISHED
                seq.finished_time = now
                finished.append(seq)
        if gap_count:
            assert gaps is not None
            gaps.add(gap_run, gap_count)
        if finished:
            # One pass instead of list.remove per finished sequence.
            self.running = [s for s in self.running if s.status is _RUNNING]
        self.kv.check()
        return result

    def step_stats(self, out: SchedulerOutput[S], start: float, duration: float, lag: float = 0.0) -> StepStats:
        """The step's record for observers: running, waiting and KV use as of the end of the step
        (after finished sequences freed their blocks), like vLLM's scheduler stats."""
        return StepStats(
            index=out.index,
            start=start,
            duration=duration,
            batch_size=len(out.scheduled),
            num_prefill_tokens=out.num_prefill_tokens,
            num_decode_tokens=out.num_decode_tokens,
            num_running=len(self.running),
            num_waiting=len(self.waiting) + len(self.receiving),
            kv_used_blocks=self.kv.num_used,
            kv_total_blocks=self.kv.num_usable_blocks,
            num_preemptions=len(out.preempted),
            lag=lag,
            prefix_cache_queries=out.prefix_cache_queries,
            prefix_cache_hits=out.prefix_cache_hits,
            external_prefix_cache_queries=out.external_prefix_cache_queries,
            external_prefix_cache_hits=out.external_prefix_cache_hits,
            kv_events=self.kv.take_events(),
        )
