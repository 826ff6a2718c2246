"""Defaults of the sizing inputs, as llmsim's models.yml and the LLMSimulator CRD both state them."""

from __future__ import annotations

#: Bytes in one GiB: GPU memory (``hbm_gib``) is given in binary units, as nvidia-smi reports it.
GIB = 2**30
#: max_model_len when neither the model entry nor its profile gives one.
DEFAULT_CONTEXT_LENGTH = 32768
#: Tokens per KV-cache block (vLLM's default block_size on CUDA).
DEFAULT_BLOCK_SIZE = 16
#: Fraction of GPU memory for weights and KV cache (vLLM's gpu_memory_utilization default).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
#: fp16/bf16 weights.
DEFAULT_BYTES_PER_PARAMETER = 2.0
