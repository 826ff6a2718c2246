"""A real ZMQ SUB socket rebuilds the replica's cached-block set from the events alone."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

import pytest
import zmq

from llmsim.fleet import FleetRequest, simulate
from llmsim.kv_events import KVEventStream, ZmqPublisher
from llmsim.kv_events.publisher import binds
from llmsim.kv_events.wire import event_hash
from tests.engine.scheduler.builders import tiny_params

from .vllm_structs import AllBlocksCleared, BlockRemoved, BlockStored, decode_batch


@pytest.fixture
def context() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield ctx
    ctx.term()


def workload(seed: int) -> list[FleetRequest]:
    """Requests drawing prompts from three shared documents plus their own tails: hits and evictions."""
    rng = random.Random(seed)
    documents = [tuple(range(10_000 * d, 10_000 * d + 200)) for d in range(1, 4)]
    items = []
    for i in range(300):
        shared = rng.choice([0, 16, 40, 80, 160])
        own = rng.randint(1, 60)
        prompt = rng.choice(documents)[:shared] + tuple(range(1_000_000 + 1000 * i, 1_000_000 + 1000 * i + own))
        out = rng.randint(1, 30)
        outputs = tuple(range(500, 500 + out)) if rng.random() < 0.5 else None
        items.append(FleetRequest.of(i * 0.004, len(prompt), out, None, prompt, outputs))
    return items


def test_the_vllm_bind_or_connect_rule() -> None:
    assert binds("tcp://*:5557")
    assert binds("tcp://[::]:5557")
    assert binds("ipc:///tmp/kv")
    assert not binds("tcp://indexer.kv.svc:5557")


def test_a_subscriber_rebuilds_the_cache_from_the_events(context: zmq.Context[zmq.Socket[bytes]]) -> None:
    publisher = ZmqPublisher("tcp://127.0.0.1:*", context=context)
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(publisher.last_endpoint)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    # ZMQ's slow joiner: publish probes until the subscription has reached the publisher.
    for _ in range(500):
        publisher.send(b"kv@probe", 0, b"")
        if sub.poll(10):
            break
    else:
        pytest.fail("the subscriber never connected")
    while sub.poll(50):
        sub.recv_multipart()

    # 64 usable blocks of 4 tokens, far fewer than the workload's prompts need: eviction is constant.
    params = tiny_params(64, block_size=4, context_length=256, enable_kv_cache_events=True, max_num_sequences=4)
    stream = KVEventStream(publisher, "kv@{pod_ip}@{model}", model="tiny", wall_clock=lambda: 1.0)
    assert stream.topic.endswith("@tiny")
    result = simulate(params, workload(7), observer=stream)

    rebuilt: Counter[int] = Counter()
    sequence = []
    kinds: Counter[str] = Counter()
    while sub.poll(200):
        topic, seq, payload = sub.recv_multipart()
        assert topic == stream.topic.encode()
        sequence.append(int.from_bytes(seq, "big"))
        for event in decode_batch(payload).events:
            kinds[type(event).__name__] += 1
            if isinstance(event, BlockStored):
                assert len(event.token_ids) == 4 * len(event.block_hashes)
                rebuilt.update(int(h) for h in event.block_hashes)
            elif isinstance(event, BlockRemoved):
                rebuilt.subtract(int(h) for h in event.block_hashes)
            else:
                assert isinstance(event, AllBlocksCleared)
                rebuilt.clear()
    sub.close()
    publisher.close()
    assert publisher.dropped == 0
    # One batch per step that had events, numbered from 0 without gaps.
    assert sequence == list(range(len(sequence)))
    assert sequence, "the workload produced no events"
    assert kinds["BlockStored"] > 0
    assert kinds["BlockRemoved"] > 0, "the cache was never under pressure"
    assert result.summary().prefix_hit_tokens > 0
    # simulate() hashes token ids: every identity is a sha256 digest.
    expected = Counter({event_hash(h): n for h, n in result.cached_blocks.items() if isinstance(h, bytes)})
    assert sum(expected.values()) == sum(result.cached_blocks.values())
    assert +rebuilt == expected
