"""The scheduler engine: continuous batching on one simulated GPU, following vLLM V1's rules.

Three tiers, dependencies pointing down only:

- resources and cost: ``sequence`` (per-request state), ``kv_cache`` (the block pool),
  ``cost_model`` (roofline step duration), from ``params`` (plain numbers), ``workload`` and
  ``simulation_summary`` (virtual-time inputs and outputs);
- decisions: ``scheduler`` (``Scheduler``: admission, batching, preemption, token release);
- time: ``driver`` (``SchedulerEngine``, the only module touching asyncio or a clock) and
  ``virtual`` (``simulate``: the same core stepped in a plain loop, far faster than real time).

Pure and deterministic: no I/O, no randomness outside the seeded workload generator.
"""

from llmsim.engine.scheduler.cost_model import CostModel
from llmsim.engine.scheduler.driver import SchedulerEngine
from llmsim.engine.scheduler.kv_cache import KVCache
from llmsim.engine.scheduler.params import (
    GpuSpec,
    ModelSpec,
    SchedulerParams,
    check_context_fits,
    default_limits,
    num_kv_blocks,
)
from llmsim.engine.scheduler.scheduler import Scheduler, SchedulerOutput, StepResult
from llmsim.engine.scheduler.sequence import Sequence, SequenceStatus
from llmsim.engine.scheduler.simulation_summary import Percentiles, SimulationSummary, percentile
from llmsim.engine.scheduler.virtual import RequestResult, SimulationResult, simulate
from llmsim.engine.scheduler.workload import WorkloadItem, poisson_arrivals, poisson_workload

__all__ = [
    "CostModel",
    "GpuSpec",
    "KVCache",
    "ModelSpec",
    "Percentiles",
    "RequestResult",
    "Scheduler",
    "SchedulerEngine",
    "SchedulerOutput",
    "SchedulerParams",
    "Sequence",
    "SequenceStatus",
    "SimulationResult",
    "SimulationSummary",
    "StepResult",
    "WorkloadItem",
    "check_context_fits",
    "default_limits",
    "num_kv_blocks",
    "percentile",
    "poisson_arrivals",
    "poisson_workload",
    "simulate",
]
