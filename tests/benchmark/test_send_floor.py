"""bench/send_floor.py, the lag floor of a release pass, run for real on loopback (small and short)."""

from __future__ import annotations

import os

from bench.send_floor import FRAMED, send_passes


def test_each_pass_sends_one_chunk_to_every_connection_and_the_reader_gets_them_all() -> None:
    core = str(min(os.sched_getaffinity(0)))
    result = send_passes(connections=5, interval=0.01, seconds=0.2, client_core=core)
    # One pass per 10 ms in 0.2 s: 20 (a late wake-up never skips one).
    assert result["passes"] == 20
    assert result["sends_refused"] == 0  # 100 chunks of ~300 bytes fit any socket buffer
    assert result["bytes_sent"] == 20 * 5 * len(FRAMED)
    assert result["bytes_received"] == result["bytes_sent"]
    # Offsets within a pass: the first send starts the pass, so the p50 (the third of five) comes after it.
    assert 0 <= result["lag_p50_ms"] <= result["lag_p99_ms"]
    assert result["send_us"] > 0
