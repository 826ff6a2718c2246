"""Pipeline parallelism's memory split and one batch's latency: expectations worked out by hand.

Expected values follow vLLM's rules, not llmsim's code: layers split as ``get_pp_indices`` does
(vllm/distributed/utils.py), every stage given the smallest stage's KV block count
(``get_kv_cache_configs``, vllm/v1/core/kv_cache_planning.py), and two activations a token sent
between stages, each TP rank its slice, all-gathered on arrival (vllm/v1/worker/gpu_worker.py).
Figures are the h100-80gb profile's (hardware.yml) and llama-3.1-70b's (model_profiles.yml).
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from llmsim.engine.scheduler import (
    CostModel,
    GpuSpec,
    ModelSpec,
    Scheduler,
    SchedulerOutput,
    SchedulerParams,
    Sequence,
    num_kv_blocks,
)
from llmsim.engine.scheduler.params import pipeline_stage_layers
from llmsim.engine.scheduler.pipeline import Pipeline
from llmsim.types import RequestId

from .builders import H100, LLAMA_70B


def params(tp: int, pp: int, model: ModelSpec = LLAMA_70B) -> SchedulerParams:
    return SchedulerParams(
        gpu=H100, model=model, context_length=8192, tensor_parallel_size=tp, pipeline_parallel_size=pp
    )


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [
        (80, 1, (80,)),
        (80, 2, (40, 40)),
        # 80 // 3 = 26, remainder 2: one more each to the second-to-last and third-to-last stages.
        (80, 3, (27, 27, 26)),
        (32, 3, (11, 11, 10)),
        # 10 // 4 = 2, remainder 2: partitions[-2] and [-3] get one more; the first and last keep 2.
        (10, 4, (2, 3, 3, 2)),
        (126, 4, (31, 32, 32, 31)),
        (7, 7, (1,) * 7),
    ],
)
def test_layers_split_as_vllm_splits_them(layers: int, pp: int, expected: tuple[int, ...]) -> None:
    assert pipeline_stage_layers(layers, pp) == expected


def test_70b_on_two_stages_of_two_h100s_holds_a_quarter_a_gpu() -> None:
    p = params(tp=2, pp=2)
    # Each stage: 40 of the 80 layers, its weights halved again by TP 2.
    assert p.weight_bytes_per_gpu == pytest.approx(141.2e9 / 2 / 2, rel=1e-12)  # 35.3 GB
    # A GPU's KV a token: 4 of the 8 KV heads (TP 2), 40 of the 80 layers.
    assert p.kv_bytes_per_token_per_gpu == pytest.approx(327_680 / 2 / 2, rel=1e-12)  # 81,920 B
    budget = 0.9 * 80 * 2**30  # 77.309 GB
    blocks = math.floor((budget - 35.3e9) / (81_920 * 16))  # 42.009 GB / 1,310,720 B a block
    assert blocks == 32_050
    assert num_kv_blocks(p) == blocks
    # The same 4 GPUs as TP 4 hold the same bytes a GPU, so the same blocks (vLLM: same per-GPU sizes).
    assert num_kv_blocks(params(tp=4, pp=1)) == blocks


def test_uneven_stages_take_the_largest_stages_block_count() -> None:
    # 80 layers on 3 stages of one GPU: 27, 27, 26. A 27-layer stage holds 27/80 of the weights
    # and of the KV a token, and has the fewest free blocks; vLLM gives every stage that count.
    budget = 0.9 * 80 * 2**30
    per_stage = {
        layers: math.floor((budget - 141.2e9 * layers / 80) / (327_680 * layers / 80 * 16)) for layers in (27, 26)
    }
    assert per_stage[27] < per_stage[26]
    # 77.309 GB - 47.655 GB = 29.654 GB over 110,592 B a token x 16 = 1,769,472 B a block.
    assert per_stage[27] == 16_758
    # A fourth stage would be needed for the 70B on one GPU a stage; 3 x 80 GB do hold it.
    assert num_kv_blocks(params(tp=1, pp=3)) == per_stage[27]


def test_a_lone_decode_passes_every_stage_and_each_hand_over() -> None:
    # One sequence at 1,000 tokens of context decodes one token on TP 2 x PP 2: memory-bound.
    tokens, context = 1, 1000
    stage_weights = 141.2e9 / 4 / 3350e9  # 35.3 GB a GPU: 10.537 ms
    stage_kv = 81_920 * context / 3350e9  # its 40 layers' KV, 4 heads: 0.0245 ms
    # 2 all-reduces a layer over TP 2: 40 us + a ring's 2 (2 - 1) / 2 x 8,192 x 2 B over 450 GB/s.
    stage_all_reduces = 2 * 40 * (40e-6 + 1.0 * 8192 * 2 * tokens / 450e9)
    # Stage 0 -> 1: hidden_states and residual, 2 x 8,192 x 2 B = 32,768 B a token; each TP rank
    # sends half (16,384 B), then the receiving pair all-gathers, a ring moving the other half.
    hand_over = (40e-6 + 16_384 * tokens / 450e9) + (40e-6 + 16_384 * tokens / 450e9)
    expected = 2 * (stage_weights + stage_kv + stage_all_reduces) + hand_over
    latency = CostModel(params(tp=2, pp=2)).pipeline_latency(tokens, context, 1)
    assert latency == pytest.approx(expected, rel=1e-12)
    # 2 x (10.537 + 0.024 + 3.203) ms of stages, 0.080 ms of hand-over: the two latencies.
    assert latency * 1e3 == pytest.approx(2 * (10.537 + 0.0245 + 3.203) + 0.080, abs=0.002)
    # The same 4 GPUs at TP 4 decode it in one pass with quarter shards: faster alone.
    assert CostModel(params(tp=4, pp=1)).step_duration(tokens, context, 1) < latency


def test_a_prefill_chunk_splits_its_flops_between_the_stages() -> None:
    # 4,096 prompt tokens on PP 2 of one GPU each: compute-bound; each stage does half the FLOPs.
    tokens = 4096
    compute = 2 * 70.6e9 * tokens / 989e12  # 0.5848 s in all
    # No TP: no all-reduce, no all-gather; the send is 4,096 x 32,768 B = 128 MiB at 450 GB/s.
    hand_over = 40e-6 + tokens * 32_768 / 450e9  # 0.338 ms
    gpu = GpuSpec(
        hbm_bytes=141 * 2**30,
        memory_bandwidth=4800e9,
        peak_flops=989e12,
        interconnect_bandwidth=450e9,
        interconnect_latency_s=40e-6,
    )  # an H200's memory: 70.6 GB of weights a stage fit
    p = SchedulerParams(gpu=gpu, model=LLAMA_70B, context_length=8192, pipeline_parallel_size=2)
    assert CostModel(p).pipeline_latency(tokens, tokens, 1) == pytest.approx(compute + hand_over, rel=1e-12)


def test_one_stage_is_the_step() -> None:
    cost = CostModel(params(tp=4, pp=1))
    for tokens, context, seqs in ((1, 1000, 1), (4096, 4096, 1), (64, 64_000, 64)):
        assert cost.pipeline_latency(tokens, context, seqs) == pytest.approx(
            cost.step_duration(tokens, context, seqs), rel=1e-12
        )


def run_pipeline(
    p: SchedulerParams, seqs: list[Sequence], arrivals: dict[str, float] | None = None
) -> list[SchedulerOutput[Sequence]]:
    """vLLM's engine-core loop with a batch queue (``step_with_batch_queue``): schedule while the
    queue has room and the scheduler has requests, else wait for the oldest batch and update."""
    sched: Scheduler[Sequence] = Scheduler(p)
    pipe: Pipeline[Sequence] = Pipeline(p, sched.cost)
    pending = sorted(seqs, key=lambda s: (arrivals or {}).get(s.request_id, 0.0))
    batches: list[SchedulerOutput[Sequence]] = []
    now = 0.0
    while pending or sched.has_work() or pipe.batches:
        if not sched.has_work() and not pipe.batches:
            now = max(now, (arrivals or {}).get(pending[0].request_id, 0.0))
        while pending and (arrivals or {}).get(pending[0].request_id, 0.0) <= now:
            sched.add_requests([pending.pop(0)], now)
        while sched.has_work() and not pipe.full:
            out = sched.schedule(now)
            pipe.push(out, now)
            batches.append(out)
        batch = pipe.pop()
        now = max(now, batch.end)
        sched.update_from_output(batch.out, now)
    return batches


def decode_stage(tokens: int = 1, context: int = 0) -> float:
    """One decode stage of the 70B on TP 2 x PP 2, uncalibrated: 40 layers' weights and KV at
    3,350 GB/s, 80 all-reduces over TP 2 (a ring moves 1 x 8,192 x 2 B a token)."""
    return (141.2e9 / 4 + 81_920 * context) / 3350e9 + 80 * (40e-6 + 8192 * 2 * tokens / 450e9)


#: Hand-over of one token between the stages (send half, all-gather the other half), and the
#: sampled tokens' broadcast from the last stage back to the first (one small collective).
HAND_OVER = 2 * 40e-6 + 32_768 / 450e9
BROADCAST = 40e-6


def test_a_lone_request_decodes_once_per_trip_through_the_pipeline() -> None:
    # Async scheduling (vLLM's default): a queue of 3 batches, each decode eligible every 2 steps.
    p = dataclasses.replace(params(tp=2, pp=2), async_scheduling=True)
    seq = Sequence(RequestId("a"), 0.0, 16, 4)
    batches = run_pipeline(p, [seq])
    # Batches alternate: the request, then an empty one (its next decode waits 2 steps).
    assert [[s.request_id for s in out.scheduled] for out in batches[:5]] == [["a"], [], ["a"], [], ["a"]]
    gaps = [b - a for a, b in zip(seq.token_times, seq.token_times[1:], strict=False)]
    assert len(gaps) == 3
    for i, gap in enumerate(gaps):
        # Decode i + 1 computes the token at position 16 + i: its context is 17 + i tokens. Its batch
        # waits for the previous token's broadcast, then runs stage 0, the hand-over and stage 1.
        context = 17 + i
        expected = BROADCAST + 2 * decode_stage(1, context) + HAND_OVER
        assert gap == pytest.approx(expected, rel=1e-9)
    assert gaps[0] * 1e3 == pytest.approx(0.040 + 2 * (10.537 + 3.203) + 0.080, abs=0.002)


def test_without_async_scheduling_a_decode_waits_for_its_token_only() -> None:
    # --no-async-scheduling: a queue of PP batches; a decode with its batch in flight is skipped
    # (no placeholders), and once its token is back it goes in the next batch at once.
    p = params(tp=2, pp=2)
    assert not p.async_scheduling
    seq = Sequence(RequestId("a"), 0.0, 16, 3)
    run_pipeline(p, [seq])
    gaps = [b - a for a, b in zip(seq.token_times, seq.token_times[1:], strict=False)]
    for i, gap in enumerate(gaps):
        assert gap == pytest.approx(2 * decode_stage(1, 17 + i) + HAND_OVER, rel=1e-9)


def test_requests_admitted_a_step_apart_decode_in_alternate_batches() -> None:
    # Two 100-token prompts, a 128-token budget: "a" and the first 28 of "b" in batch 0, the rest of
    # "b" in batch 1 (prefill chunks go back to back). "a" samples in batch 0, "b" in batch 1, so
    # each later batch holds one of them: vLLM's decode micro-batches, one per stage.
    p = dataclasses.replace(params(tp=2, pp=2), async_scheduling=True, max_batch_tokens=128)
    a, b = Sequence(RequestId("a"), 0.0, 100, 40), Sequence(RequestId("b"), 0.0, 100, 40)
    batches = run_pipeline(p, [a, b])
    assert [[s.request_id for s in out.sampled] for out in batches[:6]] == [["a"], ["b"], ["a"], ["b"], ["a"], ["b"]]
    # Steady state: stage 0 alternates between the two, each batch followed by its send (a worker
    # waits for its last send before its next forward), so each request gets a token every two
    # stage-0 turns: 2 x (stage + hand-over), more than a lone request's trip (2 stages + one
    # hand-over + the broadcast), and the two streams interleave.
    gap = a.token_times[30] - a.token_times[29]
    context = 100 + 30
    assert gap == pytest.approx(2 * (decode_stage(1, context) + HAND_OVER), rel=1e-3)
    assert a.token_times[29] < b.token_times[29] < a.token_times[30]


def test_the_engine_holds_vllms_block_count() -> None:
    sched: Scheduler[Sequence] = Scheduler(params(tp=2, pp=2))
    assert sched.kv.num_blocks == 32_050
    assert Pipeline(params(tp=2, pp=2), sched.cost).depth == 2  # synchronous: PP batches
    assert Pipeline(dataclasses.replace(params(tp=2, pp=2), async_scheduling=True), sched.cost).depth == 3


@pytest.mark.parametrize(
    ("model", "gpu", "pp", "message"),
    [
        (LLAMA_70B, H100, 81, "exceeds the model's 80 layers"),
        (ModelSpec(num_parameters=8e9, weight_bytes=16e9, kv_bytes_per_token=131_072), H100, 2, "num_hidden_layers"),
        (LLAMA_70B, GpuSpec(hbm_bytes=80 * 2**30, memory_bandwidth=2e12, peak_flops=756e12), 2, "interconnect"),
        (LLAMA_70B, H100, 0, ">= 1"),
    ],
)
def test_params_refuse_an_impossible_pipeline(model: ModelSpec, gpu: GpuSpec, pp: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SchedulerParams(gpu=gpu, model=model, context_length=8192, pipeline_parallel_size=pp)
