"""The link a KV-cache pull crosses between a prefill replica and a decode replica.

One definition for the live engine and the planner: a pull of ``n`` bytes occupies the link for
``n / bandwidth`` and arrives ``latency`` after its last byte left. Pulls on one link go one after
another in the order they were asked for (NIXL reads on one NIC share its bandwidth; serving them in
turn finishes each no later than sharing would, and keeps the arithmetic exact). Pure: times are
whatever clock the caller uses, in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KVLinkSpec:
    """A link's figures: bytes per second and a fixed cost per pull."""

    bandwidth_bytes_per_s: float
    latency_s: float

    def __post_init__(self) -> None:
        if not self.bandwidth_bytes_per_s > 0:
            raise ValueError(f"bandwidth_bytes_per_s must be > 0, got {self.bandwidth_bytes_per_s}")
        if not self.latency_s >= 0:
            raise ValueError(f"latency_s must be >= 0, got {self.latency_s}")

    @classmethod
    def from_config(cls, bandwidth_gbps: float, latency_ms: float) -> KVLinkSpec:
        """From models.yml's units (GB/s, ms)."""
        return cls(bandwidth_gbps * 1e9, latency_ms / 1000.0)

    def transfer_seconds(self, num_bytes: float) -> float:
        """How long ``num_bytes`` take on an idle link, latency included."""
        return self.latency_s + num_bytes / self.bandwidth_bytes_per_s


class KVLink:
    """One link's queue of pulls: when each one, asked for at a time, has arrived."""

    __slots__ = ("_free_at", "bytes_moved", "pulls", "spec")

    def __init__(self, spec: KVLinkSpec) -> None:
        self.spec = spec
        self._free_at = 0.0
        self.bytes_moved = 0.0
        self.pulls = 0

    def pull(self, now: float, num_bytes: float) -> float:
        """Queue a pull of ``num_bytes`` asked for at ``now``; return when its last byte has arrived."""
        start = now if now > self._free_at else self._free_at
        self._free_at = start + num_bytes / self.spec.bandwidth_bytes_per_s
        self.bytes_moved += num_bytes
        self.pulls += 1
        return self._free_at + self.spec.latency_s

    def busy_until(self) -> float:
        """When the link's last queued byte leaves (earlier than ``now``: idle)."""
        return self._free_at
