"""llmsim's stand-in for vLLM's entry points (deploy/vllm-shim/README.md); not vLLM."""
