"""llmsim_capacity: what fits on a simulated GPU, the one copy the simulator and the operator share.

vLLM sizes its KV cache at startup from what ``gpu_memory_utilization`` of the GPU's memory leaves
after the weights, and refuses to start when one request of the full context length would not fit.
The simulator applies both rules when it loads models.yml; the operator applies them to an
LLMSimulator before it renders any child, so a fleet is never reported reconciled with a config
its pods would refuse. Pure arithmetic on plain numbers, standard library only: llmsim and
llmsim_operator both import it, and neither imports the other (import-linter contracts in
pyproject.toml).
"""

from llmsim_capacity.defaults import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_BYTES_PER_PARAMETER,
    DEFAULT_CONTEXT_LENGTH,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    GIB,
)
from llmsim_capacity.kv_cache import CapacityError, check_context_fits, num_kv_blocks

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_BYTES_PER_PARAMETER",
    "DEFAULT_CONTEXT_LENGTH",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "GIB",
    "CapacityError",
    "check_context_fits",
    "num_kv_blocks",
]
