"""The scheduler engine: continuous batching on one simulated GPU (or a tensor- and pipeline-parallel group), following vLLM V1's rules.

Three tiers, dependencies pointing down only:

- resources and cost: ``sequence`` (per-request state), ``kv_cache`` (the block pool and its
  prefix cache, keyed by ``block_hash``: vLLM's chained sha256 of each full block's token ids),
  ``cost_model`` (roofline step duration), from ``params`` (plain numbers), and ``percentiles``
  (latency percentiles, as reports give them);
- decisions: ``scheduler`` (``Scheduler``: admission, batching, preemption, token release), and
  ``decode_run`` (``DecodeRun``: runs of steps that only lengthen sequences, applied without
  stepping each, for virtual time);
- time: ``pipeline`` (``Pipeline``: with pipeline parallelism, when each batch in flight runs
  and ends, pure numbers), ``driver`` (``SchedulerEngine``, the only module touching asyncio or a
  clock). Virtual time is the fleet's event loop (``llmsim.fleet``), for one replica as for many.

Pure and deterministic: no I/O, no randomness.

Disaggregated prefill/decode (vLLM's NIXL connector; ``SchedulerParams.kv_link`` set, models.yml's
``kv_transfer``). A request is one of two legs, marked on its :class:`Sequence`:

- a *prefill leg* (``remote_decode=True``, vLLM's ``do_remote_decode``) is scheduled as any other
  (prefix caching included) and, when it finishes with reason ``length`` (its one token), its
  blocks stay allocated in ``Scheduler.held`` (seq -> deadline), counted in KV usage and
  admission, until ``release_held(seq)`` (its decode partner pulled them) or
  ``expire_held(now)`` frees them at ``finished + kv_abort_timeout_s``
  (``next_held_expiry()`` says when the first is due);
- a *decode leg* (``remote_prefill=True``, vLLM's ``do_remote_prefill``) is admitted as any other
  (its local prefix hits, then blocks for its whole prompt) but computes nothing: it waits in
  ``Scheduler.receiving`` (status WAITING_FOR_REMOTE_KVS, counted as waiting) while the rest of
  its prompt (``num_external_tokens`` tokens x ``kv_bytes_per_token`` bytes) crosses the link
  (``Scheduler.link``, a :class:`KVLink`: pulls queue). ``kv_ready_time`` is when its last byte
  has arrived; the first step starting at or after it finds it ready (``next_pull_time()``), puts
  it back at the front of the waiting queue with all but its last prompt token computed, and it
  recomputes that token (one prefill token) and decodes. ``SchedulerOutput.pulls`` lists the legs
  whose pull started in a step, ``.received`` those whose pull completed (the moment a driver
  frees the prefill side: ``release_held`` there). A pull the prefill side cannot serve ends in
  ``fail_pull(seq, now, recompute)`` (vLLM's ``kv_load_failure_policy``). A live driver may hold a
  pull back until the prefill side confirms its blocks (``kv_pull_confirmed``).

Counting, as vLLM: ``num_external_tokens`` and ``num_cached_tokens`` (all but the last prompt token
for a decode leg) reach :class:`~llmsim.types.RequestStats`; ``StepStats`` carries the
connector's lookups (``external_prefix_cache_queries/hits``: prompt tokens at first admission on
any replica with a link; tokens to pull). A driver with nothing runnable steps to the earliest of
``next_pull_time()``, ``next_held_expiry()`` and its next arrival (a step may be empty while held
or pulling blocks leave no room).

Mirrored rules: seven rules live in two places each, the copy kept for speed: each sits in a loop
run once per sequence per step (or per run, or per request). Each pair has a fast test in
``tests/engine/scheduler/test_mirrored_rules.py`` comparing both sides on random states; change
one side, and that test fails until the other follows.

1. ``Scheduler._take``'s decode case, inlined in ``Scheduler._schedule_running``;
2. ``Scheduler.update_from_output``'s release rule, repeated in ``Scheduler.releasing`` (what the
   live driver prepares before a step's deadline);
3. ``CostModel.step_duration``, repeated in ``DecodeRun.extend`` for decode steps;
4. ``Scheduler._schedule_waiting``'s admission test, repeated in ``decode_run._admits_any``;
5. ``DecodeRun._bring`` (a sequence's counters and token times as of a step), inlined in
   ``DecodeRun.finish`` for the sequences in the run from its start;
6. ``Sequence.to_stats``'s figures (finish reason, TTFT, E2E, queue time), computed in
   ``llmsim.fleet.simulation.FleetSimulation._record`` without building the record;
7. with pipeline parallelism, ``Scheduler._update_pipelined``'s release rule, repeated in
   ``Scheduler.releasing_pipelined`` (what the live pipeline loop prepares before a batch ends).
"""

from llmsim.engine.scheduler.block_hash import hash_blocks
from llmsim.engine.scheduler.cost_model import CostModel
from llmsim.engine.scheduler.driver import SchedulerEngine
from llmsim.engine.scheduler.kv_cache import KVCache
from llmsim.engine.scheduler.kv_link import KVLink, KVLinkSpec
from llmsim.engine.scheduler.params import (
    GpuSpec,
    LoraParams,
    ModelSpec,
    SchedulerParams,
    check_context_fits,
    default_limits,
    num_kv_blocks,
)
from llmsim.engine.scheduler.percentiles import Percentiles, percentile
from llmsim.engine.scheduler.scheduler import Scheduler, SchedulerOutput, StepResult
from llmsim.engine.scheduler.sequence import Sequence, SequenceStatus

__all__ = [
    "CostModel",
    "GpuSpec",
    "KVCache",
    "KVLink",
    "KVLinkSpec",
    "LoraParams",
    "ModelSpec",
    "Percentiles",
    "Scheduler",
    "SchedulerEngine",
    "SchedulerOutput",
    "SchedulerParams",
    "Sequence",
    "SequenceStatus",
    "StepResult",
    "check_context_fits",
    "default_limits",
    "hash_blocks",
    "num_kv_blocks",
    "percentile",
]
