"""Workloads for virtual-time runs: explicit request lists and a seeded Poisson generator."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkloadItem:
    """One request of a virtual-time workload."""

    # Seconds on the simulated timeline.
    arrival: float
    prompt_tokens: int
    output_tokens: int
    # When the client goes away (seconds on the same timeline); None: it reads to the end.
    abort_at: float | None = None
    # Token ids of the prompt (len == prompt_tokens) and of the outputs; None: content shared
    # with no other request (it neither hits nor is hit in the prefix cache).
    prompt_token_ids: tuple[int, ...] | None = None
    output_token_ids: tuple[int, ...] | None = None
    # LoRA adapter (one of the params' adapters), None: the base model.
    lora_name: str | None = None


def poisson_arrivals(rate: float, duration: float, seed: int = 0) -> list[float]:
    """Arrival times of a Poisson process of ``rate`` per second over ``[0, duration)``; same seed, same list."""
    if rate <= 0 or duration < 0:
        raise ValueError("rate must be > 0 and duration >= 0")
    rng = random.Random(seed)
    arrivals: list[float] = []
    t = rng.expovariate(rate)
    while t < duration:
        arrivals.append(t)
        t += rng.expovariate(rate)
    return arrivals


def poisson_workload(
    rate: float, duration: float, prompt_tokens: int, output_tokens: int, seed: int = 0
) -> list[WorkloadItem]:
    """Fixed-shape requests arriving as a seeded Poisson process (an open-loop load)."""
    return [WorkloadItem(t, prompt_tokens, output_tokens) for t in poisson_arrivals(rate, duration, seed)]
