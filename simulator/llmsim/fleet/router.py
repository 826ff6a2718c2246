"""Routers: each picks a replica for a request from the replicas as a gateway sees them.

A router reads only a :class:`~llmsim.fleet.replica_view.ReplicaView`: the metrics of each replica's last scrape (running,
waiting, KV-cache usage) and the length of the longest cached prefix of the prompt. Ties are
broken at random with the router's seeded generator, as the inference extension's
``max-score-picker`` shuffles before it sorts: a fixed tie-break would send every request of a
stale scrape interval to the same replica.

==================  ======================================================================
round-robin         replicas in turn, whatever their state
random              uniformly at random
least-requests      fewest running + waiting requests
least-kv            lowest KV-cache usage
prefix-affinity     longest cached prefix of the prompt; then fewest requests
weighted            the Gateway API Inference Extension's default scoring profile:
                    ``2 x queue + 2 x kv + 3 x prefix`` (weights configurable), max score wins
==================  ======================================================================

With a scrape interval of 0 the view is live, so ``least-requests`` becomes a proxy's own
in-flight count (Envoy's least-request balancer).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from llmsim.fleet.prompt import Prompt
from llmsim.fleet.replica_view import ReplicaView
from llmsim.fleet.spec import RouterPolicy, RouterSpec, ScorerWeights


class Router(ABC):
    """Picks a replica index for each request."""

    policy: ClassVar[RouterPolicy]
    # False for routers that never read a replica's metrics (the fleet then skips the scrape).
    reads_state: ClassVar[bool] = True
    # True for routers that ask replicas for cached prefixes (their caches are then brought to now).
    reads_prefix_cache: ClassVar[bool] = False

    def __init__(self, replicas: Sequence[ReplicaView], rng: random.Random) -> None:
        self.replicas = replicas
        self.rng = rng

    @abstractmethod
    def pick(self, prompt: Prompt) -> int:
        """The index of the replica that serves a request with this prompt."""

    def _argmin(self, values: list[float]) -> int:
        """Index of the smallest value, ties broken at random."""
        # A loop, not min(): compiled, it compares unboxed floats.
        best = values[0]
        for v in values:
            if v < best:
                best = v
        ties = [i for i, v in enumerate(values) if v == best]
        return ties[0] if len(ties) == 1 else self.rng.choice(ties)

    def _requests(self) -> list[float]:
        return [float(r.num_running + r.num_waiting) for r in self.replicas]


class RoundRobin(Router):
    policy = "round-robin"
    reads_state = False

    def __init__(self, replicas: Sequence[ReplicaView], rng: random.Random) -> None:
        super().__init__(replicas, rng)
        self._next = 0

    def pick(self, prompt: Prompt) -> int:
        index = self._next
        self._next = (index + 1) % len(self.replicas)
        return index


class RandomRouter(Router):
    policy = "random"
    reads_state = False

    def pick(self, prompt: Prompt) -> int:
        return self.rng.randrange(len(self.replicas))


class LeastRequests(Router):
    policy = "least-requests"

    def pick(self, prompt: Prompt) -> int:
        return self._argmin(self._requests())


class LeastKV(Router):
    policy = "least-kv"

    def pick(self, prompt: Prompt) -> int:
        return self._argmin([r.kv_usage for r in self.replicas])


class PrefixAffinity(Router):
    """Longest cached prefix wins; among equals, fewest requests; then random."""

    policy = "prefix-affinity"
    reads_prefix_cache = True

    def pick(self, prompt: Prompt) -> int:
        cached = [r.cached_prefix_tokens(prompt) for r in self.replicas]
        longest = max(cached)
        # A prefix match outranks any load difference: count requests only among the longest.
        load = [
            float(r.num_running + r.num_waiting) if c == longest else float("inf")
            for r, c in zip(self.replicas, cached, strict=True)
        ]
        return self._argmin(load)


class Weighted(Router):
    """The inference extension's scorers, summed with weights, highest total wins.

    - queue: min-max over the replicas of waiting requests, ``(max - w) / (max - min)``, 1.0 for
      all when they are equal (queue-scorer: waiting only, not running);
    - kv: ``1 - usage`` (kv-cache-utilization-scorer);
    - prefix: matched blocks / the prompt's full blocks (prefix-cache-scorer), 0 for a prompt
      shorter than one block.

    The extension matches 64-character blocks of the request text in its own index, learned
    from its routing decisions; here the prefix comes from the replica itself, in its own
    token blocks (the precise-prefix-cache-scorer's view).
    """

    policy = "weighted"
    reads_prefix_cache = True

    def __init__(self, replicas: Sequence[ReplicaView], rng: random.Random, weights: ScorerWeights) -> None:
        super().__init__(replicas, rng)
        self.weights = weights

    def pick(self, prompt: Prompt) -> int:
        replicas = self.replicas
        w = self.weights
        waiting = [r.num_waiting for r in replicas]
        lo, hi = min(waiting), max(waiting)
        scores: list[float] = []
        for r, q in zip(replicas, waiting, strict=True):
            queue = 1.0 if hi == lo else (hi - q) / (hi - lo)
            kv = 1.0 - min(1.0, max(0.0, r.kv_usage))
            total_blocks = prompt.num_tokens // r.block_size
            prefix = r.cached_prefix_tokens(prompt) // r.block_size / total_blocks if total_blocks else 0.0
            scores.append(w.queue * queue + w.kv_cache * kv + w.prefix * min(1.0, prefix))
        return self._argmin([-s for s in scores])


def build_router(spec: RouterSpec, replicas: Sequence[ReplicaView], rng: random.Random) -> Router:
    """The router ``spec`` names, over ``replicas``."""
    if spec.policy == "weighted":
        return Weighted(replicas, rng, spec.weights)
    simple: dict[str, type[Router]] = {
        cls.policy: cls for cls in (RoundRobin, RandomRouter, LeastRequests, LeastKV, PrefixAffinity)
    }
    return simple[spec.policy](replicas, rng)
