"""vLLM's batch queue over pipeline stages, in simulated time: when each batch runs and ends.

With ``pipeline_parallel_size`` PP > 1 vLLM's engine core keeps up to ``max_concurrent_batches``
batches in flight (vllm/v1/engine/core.py ``step_with_batch_queue``; vllm/config/vllm.py: PP + 1
with async scheduling on the V2 model runner, vLLM's default; PP without async scheduling). It
schedules a batch whenever the queue has room and otherwise waits for the oldest, so the drivers
here do the same: schedule while :meth:`Pipeline.full` is False and the scheduler has work, then
wait for the oldest batch's end (:meth:`Pipeline.pop`), update the scheduler, and go on.

A batch's time on the GPUs (:meth:`Pipeline.push`), stage by stage (``CostModel.stage_times``):

- between stages ``s - 1`` and ``s`` the batch's activations cross once the sender has finished
  it and the receiver is free of its previous batch (NCCL's send and receive meet: the receive is
  posted on the receiver's stream after its previous work); the sender is busy until then, as a
  worker waits for its previous step's sends before its next forward (``_pp_send_work`` in
  vllm/v1/worker/gpu_worker.py), and the receiver starts the batch when the bytes are over;
- stage 0 starts no earlier than the batch is scheduled, and with async scheduling no earlier
  than the batch ``PP`` before it has sampled and broadcast its tokens (the V2 runner's
  ``PPHandler``: "Step T's recv is consumed at step T+pp_size", vllm/v1/worker/gpu/pp_utils.py),
  empty batches included (their step waits on the ring's slot all the same);
- an empty batch (every running sequence has a batch in flight) runs nothing and returns after
  the batch before it.

Pure: no clock, no I/O. The drivers turn the ends into their timelines.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Generic, TypeVar

from llmsim.engine.scheduler.cost_model import CostModel
from llmsim.engine.scheduler.params import SchedulerParams
from llmsim.engine.scheduler.scheduler import SchedulerOutput
from llmsim.engine.scheduler.sequence import Sequence

S = TypeVar("S", bound=Sequence)


class Batch(Generic[S]):
    """One batch in flight: what was scheduled, when its first stage starts, when it ends."""

    __slots__ = ("end", "out", "scheduled_at", "start")

    def __init__(self, out: SchedulerOutput[S], scheduled_at: float, start: float, end: float) -> None:
        self.out = out
        self.scheduled_at = scheduled_at
        self.start = start
        self.end = end


class Pipeline(Generic[S]):
    """The batches in flight of one pipelined replica, oldest first."""

    __slots__ = ("_broadcast_s", "_cost", "_free", "_last_end", "_sampled", "_wait_sampled", "batches", "depth")

    def __init__(self, params: SchedulerParams, cost: CostModel) -> None:
        pp = params.pipeline_parallel_size
        # vLLM's max_concurrent_batches (V2 model runner, the default).
        self.depth = pp + 1 if params.async_scheduling else pp
        self._cost = cost
        self._wait_sampled = params.async_scheduling
        # The sampled tokens' broadcast from the last stage to the first: one small collective.
        self._broadcast_s = params.gpu.interconnect_latency_s
        # When each stage is free for the next batch.
        self._free = [-math.inf] * pp
        # When each of the last PP batches' sampled tokens reached the first stage (-inf: none).
        self._sampled: deque[float] = deque(maxlen=pp)
        self._last_end = -math.inf
        self.batches: deque[Batch[S]] = deque()

    @property
    def full(self) -> bool:
        return len(self.batches) >= self.depth

    @property
    def next_end(self) -> float:
        """When the oldest batch ends (inf: none in flight)."""
        return self.batches[0].end if self.batches else math.inf

    def push(self, out: SchedulerOutput[S], now: float, extra_s: float = 0.0) -> Batch[S]:
        """Batch ``out``, scheduled at ``now``, enters the pipeline; ``extra_s`` is added to its first
        stage (adapter loads)."""
        free = self._free
        ready = now if now > free[0] else free[0]
        sampled = self._sampled
        if self._wait_sampled and len(sampled) == len(free) and sampled[0] > ready:
            ready = sampled[0]
        if not out.scheduled:
            free[0] = ready
            end = now if now > self._last_end else self._last_end
            sampled.append(-math.inf)
            batch: Batch[S] = Batch(out, now, ready, end)
        else:
            cost = self._cost
            times = cost.stage_times(out.num_tokens, out.num_context_tokens, len(out.scheduled))
            times[0] += extra_s
            hand_over = cost.hand_over(out.num_tokens)
            last = len(times) - 1
            clock = ready
            for s in range(last + 1):
                if s:
                    # The send meets the next stage's receive, posted once that stage is free of
                    # its previous batch (and send): both ends are busy until the bytes are over.
                    transfer = clock if clock > free[s] else free[s]
                    clock = transfer + hand_over
                    free[s - 1] = clock
                clock += times[s]
                free[s] = clock
            end = clock if clock > self._last_end else self._last_end
            sampled.append(end + self._broadcast_s if out.sampled else -math.inf)
            batch = Batch(out, now, ready, end)
        self._last_end = end
        self.batches.append(batch)
        return batch

    def pop(self) -> Batch[S]:
        """The oldest batch, which ends first."""
        return self.batches.popleft()
