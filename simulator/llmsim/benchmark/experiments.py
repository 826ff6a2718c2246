"""Predict-then-measure experiments: each checks one scheduler decision live, through HTTP, against virtual time.

Every experiment serves its variants as models of one ``llmsim serve`` process. A variant's model
is the shared :data:`BASE_MODEL`, changed in at most one field for the whole experiment (its
``setup``) and in at most one more, the field under study (its ``field``); when the variable is
the workload, no field changes. The prediction of every variant is computed by the virtual-time
core and written out *before* the variant is sent; then the same requests go through HTTP and
each metric is compared with a tolerance of :data:`TOLERANCE`.

The base model is the reference GPU (989 TFLOPS, 3,000 GB/s, an H100's dense FP16 figures) at a quarter of its speed, with
its 6.74 B-parameter fp16 model: every step lasts 4x longer and every ratio stays the same, so the
milliseconds of HTTP and event-loop jitter on a shared 2-core machine stay under 2 % of a step.

Workloads that start with a burst open with a *gate*: one 8,192-token prompt (one full-budget
prefill step, 447 ms here) sent at 0, then the burst at 0.1 s. A burst's requests reach the
server over a few milliseconds, not at one instant; arriving while the gate's step runs, they all
join the next step, as the simulation has them. Closed loops add a *keeper*: one long stream that
keeps the GPU busy, so that the next turns of streams that ended together (a client's round trip
later) join the same step in both. Gate and keeper are predicted and sent, never counted.

The base model caches no prefixes (``kv_cache.enable_prefix_caching: false``): prompts of the other
experiments are distinct anyway, and E8 is the one that turns caching on. It also reports cached
tokens in ``usage`` (``enable_prompt_tokens_details``), so the client measures the hit rate as a
vLLM client would.
"""

from __future__ import annotations

import copy
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llmsim.benchmark.records import Outcome, RequestRecord
from llmsim.benchmark.stats import LoadStats
from llmsim.benchmark.workload import (
    Chain,
    PromptShape,
    Role,
    Segment,
    Turn,
    TurnSource,
    Workload,
    closed_loop,
    first_arrivals,
    open_loop,
)

#: Largest relative difference between prediction and measurement that passes.
TOLERANCE = 0.02

#: The reference GPU at quarter speed: 989 TFLOPS and 3,000 GB/s divided by 4.
HARDWARE: dict[str, dict[str, Any]] = {
    "seed-gpu-quarter": {
        "hbm_gib": 80,
        "memory_bandwidth_gbps": 750,
        "peak_tflops": 247.25,
        "description": "the reference GPU at a quarter of its speed (every step 4x longer, same ratios)",
    },
    "seed-gpu-sixteenth": {
        "hbm_gib": 80,
        "memory_bandwidth_gbps": 187.5,
        "peak_tflops": 61.8125,
        "description": "the reference GPU at a sixteenth of its speed (for E6: a step outlasts 32 clients' turnaround)",
    },
}

#: Every field written out, so that a variant's change is the only difference a reader has to find.
BASE_MODEL: dict[str, Any] = {
    "engine": "scheduler",
    "hardware": "seed-gpu-quarter",
    "context_length": 16384,
    "weights": {"parameters_billions": 6.74, "bytes_per_parameter": 2},
    "kv_cache": {
        "bytes_per_token": 524288,
        "block_size": 16,
        "gpu_memory_utilization": 0.9,
        "watermark": 0.0,
        "enable_prefix_caching": False,
    },
    "scheduler": {"max_batch_tokens": 8192, "max_num_sequences": 256},
    "latency": {"step_overhead_ms": 0.0},
    "efficiency": {"compute": 1.0, "memory": 1.0},
    "enable_prompt_tokens_details": False,
}

#: gpu_memory_utilization that leaves 1,188 KV blocks of 16 tokens next to 13.48 GB of weights:
#: floor((0.273 x 80 GiB - 13.48 GB) / (16 x 512 KiB)) = floor(1188.6); 0.385 leaves 2,335.
SMALL_CACHE = 0.273
LARGER_CACHE = 0.385

GATE_TOKENS = 8192
BURST_AT = 0.1
E6_UNTIL = 20.0
E6_WARMUP = 6.0
#: E8: 16 requests share a 6,144-token system prompt (384 blocks of 16) and ask 128 tokens each.
E8_REQUESTS = 16
E8_SYSTEM = 6144
E8_QUESTION = 128


def with_change(model: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``model`` with dotted fields (``"kv_cache.watermark"``) set."""
    out = copy.deepcopy(dict(model))
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = out
        for name in parents:
            node = node[name]
        if leaf not in node:
            raise KeyError(f"{dotted} is not a field of the base model")
        node[leaf] = value
    return out


# -- workloads -----------------------------------------------------------------------------


def _once(turn: Turn) -> TurnSource:
    return lambda j: turn if j == 0 else None


def _distinct(key: tuple[int, ...], prompt: int, output: int, abort_after: float | None = None) -> Turn:
    return Turn((Segment(Role.USER, key, prompt),), output, abort_after)


def gate() -> Chain:
    """One full-budget prefill at 0 that holds the GPU while a burst arrives."""
    return Chain(0.0, _once(_distinct((-100, 0), GATE_TOKENS, 1)), background=True)


def keeper(until: float) -> Chain:
    """One stream decoding from the gate's end until ``until``, so the GPU never idles."""
    return Chain(0.05, _once(_distinct((-100, 1), 16, 16384 - 16, abort_after=until - 0.05)), background=True)


def burst(n: int, prompt: int, output: int, *, at: float = BURST_AT, first_chain: int = 0) -> list[Chain]:
    return [Chain(at, _once(_distinct((first_chain + i, 0), prompt, output))) for i in range(n)]


def gated(chains: Sequence[Chain], description: str) -> Workload:
    return Workload((gate(), *chains), description=f"gate + {description}")


def shared_system_prompt_burst() -> Workload:
    """E8: a burst of requests that start with the same system prompt, each with its own question."""
    system = Segment(Role.SYSTEM, (-8, 0), E8_SYSTEM)
    chains = [
        Chain(BURST_AT, _once(Turn((system, Segment(Role.USER, (i, 0), E8_QUESTION)), 32))) for i in range(E8_REQUESTS)
    ]
    return gated(
        chains,
        f"{E8_REQUESTS} requests at once, a shared {E8_SYSTEM:,}-token system prompt + {E8_QUESTION} tokens each, 32 out",
    )


def random_lengths_closed_loop(
    workers: int, prompt: int, low: int, high: int, *, until: float, warmup: float
) -> Workload:
    """Closed loop whose output lengths are drawn uniformly from [low, high] (seeded per worker and turn)."""

    def source(worker: int) -> TurnSource:
        def turn(j: int) -> Turn:
            output = random.Random(worker * 100_003 + j).randint(low, high)
            return _distinct((worker, j), prompt, output)

        return turn

    chains = tuple(Chain(BURST_AT, source(w)) for w in range(workers))
    return Workload(
        (gate(), keeper(until), *chains),
        send_until=until,
        warmup=warmup,
        description=f"gate + keeper + closed loop, {workers} streams, {prompt} + {low}-{high} tokens",
    )


def equal_lengths_closed_loop(workers: int, prompt: int, output: int, *, until: float, warmup: float) -> Workload:
    loop = closed_loop(workers, PromptShape(prompt, output), duration=until, warmup=warmup, start=BURST_AT)
    return Workload(
        (gate(), keeper(until), *loop.chains),
        send_until=until,
        warmup=warmup,
        description=f"gate + keeper + closed loop, {workers} streams, {prompt} + {output} tokens",
    )


# -- what is compared -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Observation:
    """One variant's measured requests, predicted or live: what every metric is computed from."""

    records: list[RequestRecord]
    stats: LoadStats
    # Predicted: the simulation's; live: the server's own count (None without /metrics/summary).
    preemptions: int | None


@dataclass(frozen=True, slots=True)
class Metric:
    label: str
    unit: str
    value: Callable[[Observation], float]
    # Latencies are reported in ms.
    scale: float = 1.0


@dataclass(frozen=True, slots=True)
class Ratio:
    """``metric`` of variant ``numerator`` over the same of ``denominator`` (or minus it, with
    ``difference``): the experiment's headline."""

    label: str
    metric: str
    numerator: str
    denominator: str
    # numerator - denominator, in the metric's unit, instead of numerator / denominator.
    difference: bool = False


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    workload: Callable[[], Workload]
    # The value of the experiment's field (None: the experiment's base value).
    value: Any = None


@dataclass(frozen=True, slots=True)
class Experiment:
    id: str
    title: str
    claim: str
    variants: tuple[Variant, ...]
    metrics: tuple[Metric, ...]
    ratios: tuple[Ratio, ...] = ()
    # At most one field of BASE_MODEL changed for every variant of this experiment.
    setup: Mapping[str, Any] = field(default_factory=dict)
    # The field the variants change (None: the variable is the workload).
    field: str | None = None

    def base_model(self) -> dict[str, Any]:
        return with_change(BASE_MODEL, self.setup)

    def model(self, variant: Variant) -> dict[str, Any]:
        base = self.base_model()
        if self.field is None or variant.value is None:
            return base
        return with_change(base, {self.field: variant.value})

    def model_name(self, variant: Variant) -> str:
        return f"{self.id.lower()}-{variant.name}"

    def config(self) -> dict[str, Any]:
        """The models.yml serving every variant of the experiment."""
        models = [{"name": self.model_name(v), **self.model(v)} for v in self.variants]
        return {"version": 1, "hardware": HARDWARE, "models": models}


# -- metrics, computed the same way from predicted and measured records -------------------------


def _ok(o: Observation) -> list[RequestRecord]:
    return [r for r in o.records if r.outcome is Outcome.OK]


def decode_rate(o: Observation) -> float:
    """Output tokens per second from the first token to the last response's end."""
    ok = _ok(o)
    first = min(r.token_times[0] for r in ok if r.token_times)
    last = max(r.end for r in ok)
    return sum(r.output_tokens for r in ok) / (last - first)


def most_decoding(o: Observation) -> float:
    """The most requests between their first token and their end at any moment (who was admitted together)."""
    events = sorted(
        [(r.token_times[0], 1) for r in _ok(o) if r.token_times] + [(r.end, -1) for r in _ok(o) if r.token_times]
    )
    best = running = 0
    for _, delta in events:  # an end at the same instant as a first token counts first (-1 < 1)
        running += delta
        best = max(best, running)
    return float(best)


def _stalled_gaps(o: Observation, prompt_tokens: int) -> list[list[float]]:
    """Per request of ``prompt_tokens``, its gaps longer than 2.5x the run's TPOT p50 (the steps it was stalled)."""
    threshold = 2.5 * o.stats.tpot.p50
    return [
        [b - a for a, b in zip(r.token_times, r.token_times[1:], strict=False) if b - a > threshold]
        for r in _ok(o)
        if r.expected_prompt_tokens == prompt_tokens
    ]


def stall(prompt_tokens: int) -> Callable[[Observation], float]:
    """A stalled step: per request of ``prompt_tokens`` the mean of its stalled gaps, median over the requests.

    The mean, because one late release shortens the next gap as much as it lengthens its own.
    """

    def value(o: Observation) -> float:
        means = [statistics.fmean(gaps) for gaps in _stalled_gaps(o, prompt_tokens) if gaps]
        return statistics.median(means) if means else 0.0

    return value


def stalled_steps(prompt_tokens: int) -> Callable[[Observation], float]:
    """Median number of stalled gaps per request of ``prompt_tokens``."""

    def value(o: Observation) -> float:
        return float(statistics.median(len(g) for g in _stalled_gaps(o, prompt_tokens)))

    return value


def ttft_of(prompt_tokens: int) -> Callable[[Observation], float]:
    def value(o: Observation) -> float:
        return statistics.median(
            r.token_times[0] - r.scheduled
            for r in _ok(o)
            if r.expected_prompt_tokens == prompt_tokens and r.token_times
        )

    return value


def _preemptions(o: Observation) -> float:
    return math.nan if o.preemptions is None else float(o.preemptions)


def prefix_hit_rate(o: Observation) -> float:
    """Prompt tokens found in the prefix cache over prompt tokens, of the completed requests
    (usage.prompt_tokens_details.cached_tokens when measured, the simulation's hits when predicted)."""
    return o.stats.prefix_hit_rate


# TPOT, not ITL p50: a late release shortens the next gap as much as it lengthens its own, so a
# request's mean gap keeps the step time where the median gap is pulled by the server's lag.
STEP_TIME = Metric("step time (TPOT p50)", "ms", lambda o: o.stats.tpot.p50, 1000)
DECODE_RATE = Metric("output tokens/s after the first token", "tok/s", decode_rate)
TTFT_P50 = Metric("TTFT p50", "ms", lambda o: o.stats.ttft.p50, 1000)
E2E_P50 = Metric("E2E p50", "ms", lambda o: o.stats.e2e.p50, 1000)
HIT_RATE = Metric("prefix cache hit rate", "%", prefix_hit_rate, 100)


def _e7_variant(rate: int) -> Variant:
    def workload() -> Workload:
        arrivals = first_arrivals(rate, 10 * rate, poisson=True, seed=0)
        return open_loop(arrivals, PromptShape(256, 32), warmup=2.0)

    return Variant(f"{rate}rps", workload)


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "E1",
        "batching",
        "64 streams decode ~38x the tokens of one for ~1.56x the step time (the step reads the weights once)",
        variants=(
            Variant("1-stream", lambda: gated(burst(1, 128, 200), "1 request, 128 + 200 tokens")),
            Variant("64-streams", lambda: gated(burst(64, 128, 200), "64 requests at once, 128 + 200 tokens")),
        ),
        metrics=(DECODE_RATE, STEP_TIME),
        ratios=(
            Ratio("throughput, 64 / 1 streams", DECODE_RATE.label, "64-streams", "1-stream"),
            Ratio("step time, 64 / 1 streams", STEP_TIME.label, "64-streams", "1-stream"),
        ),
    ),
    Experiment(
        "E2",
        "context length",
        "16x the context makes each decode step ~2.8x slower (the KV read joins the weights')",
        setup={"scheduler.max_batch_tokens": 65536},
        variants=(
            Variant("prompt-128", lambda: gated(burst(32, 128, 100), "32 requests, 128 + 100 tokens")),
            Variant("prompt-2048", lambda: gated(burst(32, 2048, 100), "32 requests, 2,048 + 100 tokens")),
        ),
        metrics=(STEP_TIME, TTFT_P50),
        ratios=(Ratio("step time, 2,048 / 128 prompt", STEP_TIME.label, "prompt-2048", "prompt-128"),),
    ),
    Experiment(
        "E3",
        "chunked prefill",
        "a long prompt stalls 16 decoders for one full-budget step: 447 ms at 8,192 tokens, 112 ms at 2,048",
        field="scheduler.max_batch_tokens",
        variants=tuple(
            Variant(
                f"budget-{budget}",
                lambda: gated(
                    [*burst(16, 128, 200), Chain(0.7, _once(_distinct((99, 0), 8176, 64)))],
                    "16 decoders (128 + 200) and one 8,176-token prompt at 0.7 s",
                ),
                budget,
            )
            for budget in (8192, 2048)
        ),
        metrics=(
            Metric("decode stall (stalled step)", "ms", stall(128), 1000),
            Metric("stalled steps per decoder", "", stalled_steps(128)),
            Metric("long prompt TTFT", "ms", ttft_of(8176), 1000),
        ),
        ratios=(Ratio("stall, 8,192 / 2,048 budget", "decode stall (stalled step)", "budget-8192", "budget-2048"),),
    ),
    Experiment(
        "E4",
        "KV admission",
        "the KV cache, not max_num_sequences (256), decides how many run: floor(blocks / 125) of 2,000-token prompts",
        field="kv_cache.gpu_memory_utilization",
        variants=tuple(
            Variant(
                f"{blocks}-blocks",
                lambda: gated(burst(38, 2000, 64), "38 requests at once, 2,000 + 64 tokens"),
                utilization,
            )
            for blocks, utilization in ((1188, SMALL_CACHE), (2335, LARGER_CACHE))
        ),
        metrics=(
            Metric("most requests decoding at once", "", most_decoding),
            Metric("TTFT mean", "ms", lambda o: o.stats.ttft.mean, 1000),
            DECODE_RATE,
        ),
    ),
    Experiment(
        "E5",
        "preemption and watermark",
        "48 requests that fit at admission outgrow 1,188 blocks and are preempted; a 10 % watermark preempts fewer",
        setup={"kv_cache.gpu_memory_utilization": SMALL_CACHE},
        field="kv_cache.watermark",
        variants=tuple(
            Variant(
                f"watermark-{wm:g}",
                lambda: gated(burst(48, 512, 128), "48 requests at once, 512 + 128 tokens"),
                wm,
            )
            for wm in (0.0, 0.1)
        ),
        metrics=(Metric("preemptions", "", _preemptions), E2E_P50, DECODE_RATE),
    ),
    Experiment(
        "E6",
        "phase locking",
        "equal-length closed-loop streams finish together and prefill together; random lengths break the phase and TTFT p50 falls",
        # A slower GPU: 32 clients must send their next turns within one step (~90 ms here) to stay
        # in phase as the simulation has them; at a quarter speed (~25 ms steps) they do not, here.
        setup={"hardware": "seed-gpu-sixteenth"},
        variants=(
            Variant("equal-lengths", lambda: equal_lengths_closed_loop(32, 256, 32, until=E6_UNTIL, warmup=E6_WARMUP)),
            Variant(
                "random-lengths", lambda: random_lengths_closed_loop(32, 256, 8, 56, until=E6_UNTIL, warmup=E6_WARMUP)
            ),
        ),
        metrics=(TTFT_P50, STEP_TIME),
        ratios=(Ratio("TTFT p50, random / equal", TTFT_P50.label, "random-lengths", "equal-lengths"),),
    ),
    Experiment(
        "E7",
        "open-loop sweep",
        "Poisson arrivals at 10-100 req/s (256 + 32 tokens): TTFT follows the prediction up to and past capacity",
        variants=tuple(_e7_variant(rate) for rate in (10, 20, 40, 60, 80, 100)),
        metrics=(
            Metric("requests/s", "req/s", lambda o: o.stats.request_rate),
            Metric("output tokens/s", "tok/s", lambda o: o.stats.output_token_rate),
            TTFT_P50,
            STEP_TIME,
            E2E_P50,
        ),
    ),
    Experiment(
        "E8",
        "prefix caching",
        "16 requests sharing a 6,144-token system prompt: with caching the first computes it and the other 15 hit"
        " it in the same step (91.8 % of prompt tokens), so all 16 fit one 8,192-token step instead of 13",
        setup={"enable_prompt_tokens_details": True},
        field="kv_cache.enable_prefix_caching",
        variants=(
            Variant("caching-off", shared_system_prompt_burst, False),
            Variant("caching-on", shared_system_prompt_burst, True),
        ),
        metrics=(HIT_RATE, TTFT_P50, Metric("TTFT mean", "ms", lambda o: o.stats.ttft.mean, 1000)),
        ratios=(Ratio("TTFT p50 saved by caching, off - on (ms)", TTFT_P50.label, "caching-off", "caching-on", True),),
    ),
)


def select(only: Sequence[str] | None) -> list[Experiment]:
    """The experiments named in ``only`` (all when None), in registry order; unknown names raise ValueError."""
    if not only:
        return list(EXPERIMENTS)
    known = {e.id: e for e in EXPERIMENTS}
    wanted = [name.strip().upper() for name in only if name.strip()]
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise ValueError(f"unknown experiment(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [e for e in EXPERIMENTS if e.id in wanted]
