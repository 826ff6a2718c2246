"""llmsim_operator: a kopf operator that reconciles LLMSimulator resources into simulator fleets.

It reaches the simulator only through the config format and container image, never by import.
"""

__version__ = "0.1.0"
