"""What a router reads of a replica: the metric values of its last scrape, and its prefix cache."""

from __future__ import annotations

from llmsim.fleet.prompt import Prompt


class ReplicaView:
    """One replica as a router sees it: metric values as of its last scrape.

    A base class rather than a protocol: compiled with mypyc, a router reads these fields from
    the object's struct, where a protocol's attribute costs a generic lookup (~600 instructions
    a replica for ``least-requests``, a quarter of a send on a 16-replica fleet). The fleet's
    :class:`~llmsim.fleet.replica.Replica` subclasses it; tests make their own views.
    """

    __slots__ = ("block_size", "kv_usage", "num_running", "num_waiting")

    def __init__(self, block_size: int, num_running: int = 0, num_waiting: int = 0, kv_usage: float = 0.0) -> None:
        # vllm:num_requests_running
        self.num_running = num_running
        # vllm:num_requests_waiting (requests routed there and not yet running)
        self.num_waiting = num_waiting
        # vllm:kv_cache_usage_perc, 0..1
        self.kv_usage = kv_usage
        # vllm:cache_config_info's block_size
        self.block_size = block_size

    def cached_prefix_tokens(self, prompt: Prompt) -> int:
        """Leading tokens of ``prompt`` the replica's prefix cache holds (none, unless overridden)."""
        return 0
