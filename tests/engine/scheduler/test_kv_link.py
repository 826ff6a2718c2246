"""The KV link: pulls queue on the link's bandwidth, each pays the fixed latency once."""

from __future__ import annotations

import pytest

from llmsim.engine.scheduler.kv_link import KVLink, KVLinkSpec


def test_units_from_config() -> None:
    spec = KVLinkSpec.from_config(bandwidth_gbps=50.0, latency_ms=0.5)
    assert spec.bandwidth_bytes_per_s == 50e9
    assert spec.latency_s == pytest.approx(0.0005)
    # 1 GB over 50 GB/s is 20 ms, plus the half millisecond.
    assert spec.transfer_seconds(10**9) == pytest.approx(0.0205)


def test_an_idle_link_costs_latency_plus_bytes_over_bandwidth() -> None:
    link = KVLink(KVLinkSpec(bandwidth_bytes_per_s=1000.0, latency_s=0.25))
    assert link.pull(now=10.0, num_bytes=500) == pytest.approx(10.75)
    assert (link.pulls, link.bytes_moved) == (1, 500)


def test_pulls_queue_behind_each_other_but_latency_does_not() -> None:
    link = KVLink(KVLinkSpec(bandwidth_bytes_per_s=1000.0, latency_s=0.25))
    first = link.pull(now=0.0, num_bytes=1000)  # on the wire 0..1
    second = link.pull(now=0.5, num_bytes=1000)  # waits for the first: on the wire 1..2
    third = link.pull(now=5.0, num_bytes=1000)  # link idle again: on the wire 5..6
    assert (first, second, third) == pytest.approx((1.25, 2.25, 6.25))
    assert link.busy_until() == pytest.approx(6.0)


@pytest.mark.parametrize(("bandwidth", "latency"), [(0.0, 0.0), (-1.0, 0.0), (1.0, -0.1)])
def test_refuses_impossible_links(bandwidth: float, latency: float) -> None:
    with pytest.raises(ValueError, match="must be"):
        KVLinkSpec(bandwidth_bytes_per_s=bandwidth, latency_s=latency)
