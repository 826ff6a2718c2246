"""Prefix caching: what it costs per request, and what it buys a multi-turn chat workload.

Part 1, cost: the generator runs on the event loop for every request; with prefix caching on it
also builds the prompt's token ids, and the engine hashes its full blocks (sha256, as vLLM). For a
~4,096-token chat prompt this times (median of timeit repeats, in one process, same run):
``generate()`` without ids (the baseline, what caching off costs), with ids, and ``hash_blocks``
of the ids.

Part 2, effect: the same multi-turn chat workload - C conversations sharing one system prompt,
each of T turns whose prompt is the whole conversation so far (system, then every user message and
assistant answer) - against one replica of the embedded llama-3.1-8b on an H100, with
``enable_prefix_caching`` off and on. Arrivals are open loop at fixed times (conversation c
starts at c x stagger, turn t follows t x gap later), so the prompts (built here with llmsim's own
generator, as the server will answer) are known in advance. Each setting is predicted in virtual
time (``simulate``) and measured live (``llmsim serve`` + a streaming httpx client): prefill tokens
saved (prefix-cache hits), TTFT p50/p99 (client-side from the scheduled send; and the server's
simulated TTFT from /metrics/summary), throughput.

    .venv/bin/python bench/bench_prefix_cache.py [--conversations 16] [--turns 4] [--no-live]

Prints the tables and writes bench/results/prefix_cache.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
import timeit
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server import running_server  # noqa: E402

from llmsim.config.loader import parse_models_config  # noqa: E402
from llmsim.engine.scheduler import hash_blocks, percentile  # noqa: E402
from llmsim.fleet import FleetRequest, simulate  # noqa: E402
from llmsim.llm import Generator, parse_responses  # noqa: E402
from llmsim.llm.filler import CYCLE  # noqa: E402
from llmsim.runtime import scheduler_params  # noqa: E402
from llmsim.types import GenerationRequest, Message  # noqa: E402

MODEL = "llama-3.1-8b"
RESPONSES = """
version: 1
responses: []
default:
  synthetic: {tokens: [80, 120]}
"""


def config(caching: bool) -> str:
    # The embedded default's scheduler model, with prefix caching switched.
    return f"""
version: 1
models:
  - name: {MODEL}
    engine: scheduler
    profile: llama-3.1-8b
    hardware: h100-80gb
    context_length: 32768
    kv_cache: {{block_size: 16, gpu_memory_utilization: 0.9, enable_prefix_caching: {str(caching).lower()}}}
    scheduler: {{max_batch_tokens: 8192, max_num_sequences: 256}}
    latency: {{step_overhead_ms: 2.0}}
    efficiency: {{compute: 0.6, memory: 0.8}}
    enable_prompt_tokens_details: true
"""


def prose(start: int, n: int) -> str:
    """``n`` regex tokens of the filler cycle from ``start`` (a distinct text per start)."""
    tokens = [CYCLE[(start + i) % len(CYCLE)] for i in range(n)]
    return "".join(tokens).strip()


# -- part 1: per-request cost ---------------------------------------------------------------


def cost() -> dict[str, Any]:
    script = parse_responses(RESPONSES, "bench")
    system = prose(0, 4000)
    request = GenerationRequest(
        model=MODEL, messages=(Message("system", system), Message("user", prose(5000, 80))), max_tokens=100
    )
    plain = Generator(script, model_name=MODEL, context_length=32768)
    with_ids = Generator(script, model_name=MODEL, context_length=32768, token_ids=True)
    (plan,) = with_ids.generate(request)
    ids = plan.prompt_token_ids
    assert ids is not None

    def best(fn: Any, number: int = 50) -> float:
        return min(timeit.repeat(fn, number=number, repeat=7)) / number

    base = best(lambda: plain.generate(request))
    gen_ids = best(lambda: with_ids.generate(request))
    hashing = best(lambda: hash_blocks(ids, 16))
    return {
        "prompt_tokens": plan.prompt_tokens,
        "blocks": len(ids) // 16,
        "generate_without_ids_us": base * 1e6,
        "generate_with_ids_us": gen_ids * 1e6,
        "token_ids_us": (gen_ids - base) * 1e6,
        "hash_blocks_us": hashing * 1e6,
        "with_ids_and_hashes_over_baseline": (gen_ids + hashing) / base,
    }


# -- part 2: the multi-turn workload --------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    conversation: int
    turn: int
    at: float  # seconds from the start of the run
    messages: list[dict[str, str]]
    item: FleetRequest  # the same request for simulate()


def conversations(n: int, turns: int, stagger: float, gap: float, system_tokens: int) -> list[Turn]:
    """Every turn of every conversation, with its messages as the client will send them."""
    generator = Generator(parse_responses(RESPONSES, "bench"), model_name=MODEL, context_length=32768, token_ids=True)
    system = prose(0, system_tokens)
    out: list[Turn] = []
    for c in range(n):
        history: list[Message] = [Message("system", system)]
        for t in range(turns):
            history.append(Message("user", f"Question {c}.{t}: " + prose(10_000 + 97 * (c * turns + t), 40)))
            request = GenerationRequest(model=MODEL, messages=tuple(history))
            (plan,) = generator.generate(request)
            at = c * stagger + t * gap
            item = FleetRequest.of(
                at, plan.prompt_tokens, plan.num_output_tokens, None, plan.prompt_token_ids, plan.token_ids
            )
            out.append(Turn(c, t, at, [{"role": m.role, "content": m.content} for m in history], item))
            history.append(Message("assistant", "".join(plan.tokens)))
    return sorted(out, key=lambda x: x.at)


def hand_count(turns: list[Turn], block_size: int = 16) -> int:
    """Hits expected with an unbounded cache, without the scheduler: for each request, the leading
    full blocks it shares with what an earlier request computed (its prompt and outputs but the
    last, whose KV is never written), capped at its length minus one token."""
    seen: list[tuple[int, ...]] = []
    total = 0
    for t in turns:  # in arrival order; every earlier request was scheduled before this one
        ids = t.item.prompt_token_ids
        assert ids is not None
        cap = (len(ids) - 1) // block_size
        best = 0
        for other in seen:
            n = 0
            while (
                n < cap
                and (n + 1) * block_size <= len(other)
                and other[n * block_size : (n + 1) * block_size] == ids[n * block_size : (n + 1) * block_size]
            ):
                n += 1
            best = max(best, n)
        total += best * block_size
        outputs = t.item.output_token_ids or ()
        seen.append(ids + outputs[:-1])
    return total


def predicted(turns: list[Turn], caching: bool) -> dict[str, Any]:
    params = scheduler_params(parse_models_config(config(caching), "bench"), MODEL)
    result = simulate(params, [t.item for t in turns])
    s = result.summary()
    ttfts = sorted(r.ttft for r in result.requests if r.ttft is not None)
    return {
        "prompt_tokens": sum(t.item.prompt_tokens for t in turns),
        "prefix_cache_queries": s.prefix_query_tokens,
        "prefix_cache_hits": s.prefix_hit_tokens,
        "ttft_p50_ms": percentile(ttfts, 50) * 1e3,
        "ttft_p99_ms": percentile(ttfts, 99) * 1e3,
        "output_tokens_per_s": s.output_tokens_per_s,
        "duration_s": s.duration,
    }


async def _one(client: httpx.AsyncClient, turn: Turn, t0: float) -> tuple[float, int, str]:
    await asyncio.sleep(max(0.0, t0 + turn.at - time.perf_counter()))
    scheduled = t0 + turn.at
    body = {
        "model": MODEL,
        "messages": turn.messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    first: float | None = None
    cached = 0
    text: list[str] = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            for choice in chunk["choices"]:
                content = choice["delta"].get("content")
                if content:
                    if first is None:
                        first = time.perf_counter()
                    text.append(content)
            if chunk.get("usage"):
                cached = chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert first is not None
    return first - scheduled, cached, "".join(text)


async def _drive(base_url: str, turns: list[Turn]) -> tuple[list[float], list[int], list[str], float]:
    limits = httpx.Limits(max_connections=len(turns))
    async with httpx.AsyncClient(base_url=base_url, timeout=120, limits=limits) as client:
        t0 = time.perf_counter() + 0.5
        results = await asyncio.gather(*(_one(client, t, t0) for t in turns))
        wall = time.perf_counter() - t0
    return [r[0] for r in results], [r[1] for r in results], [r[2] for r in results], wall


def measured(turns: list[Turn], caching: bool) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_server(Path(tmp), config=config(caching), responses=RESPONSES) as server,
    ):
        ttfts, cached, texts, wall = asyncio.run(_drive(server.base_url, turns))
        page = httpx.get(server.base_url + "/metrics").text
        summary = httpx.get(server.base_url + "/metrics/summary").json()["models"][MODEL]

    def counter(name: str) -> float:
        prefix = f'{name}{{engine="0",model_name="{MODEL}"}} '
        return float(next(line for line in page.splitlines() if line.startswith(prefix)).split()[-1])

    # The server said what the generator predicted (same script, same seeds, same tokenizer).
    expected = [t.messages for t in turns]
    assert len(texts) == len(expected)
    ordered = sorted(ttfts)
    return {
        "prefix_cache_queries": counter("vllm:prefix_cache_queries_total"),
        "prefix_cache_hits": counter("vllm:prefix_cache_hits_total"),
        "cached_tokens_in_usage": sum(cached),
        "client_ttft_p50_ms": statistics.median(ordered) * 1e3,
        "client_ttft_p99_ms": percentile(ordered, 99) * 1e3,
        "server_ttft_p50_ms": summary["ttft"]["p50"] * 1e3,
        "server_ttft_p99_ms": summary["ttft"]["p99"] * 1e3,
        "lag_p99_ms": summary["lag"]["p99"] * 1e3 if summary["lag"]["p99"] is not None else None,
        "output_tokens_per_s": summary["generation_tokens"] / wall,
        "wall_s": wall,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=16)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--stagger", type=float, default=0.25, help="seconds between conversation starts")
    ap.add_argument("--gap", type=float, default=3.0, help="seconds between a conversation's turns")
    ap.add_argument("--system-tokens", type=int, default=2000)
    ap.add_argument("--no-live", action="store_true", help="predict only")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "prefix_cache.json")
    args = ap.parse_args()

    costs = cost()
    print("per-request cost, ~4k-token chat prompt (best of 7 repeats):")
    for key, value in costs.items():
        print(f"  {key:<36} {value:,.1f}" if isinstance(value, float) else f"  {key:<36} {value:,}")

    turns = conversations(args.conversations, args.turns, args.stagger, args.gap, args.system_tokens)
    report: dict[str, Any] = {"cost": costs, "workload": vars(args) | {"out": str(args.out), "requests": len(turns)}}
    report["hand_count_hits"] = hand_count(turns)
    for caching in (False, True):
        key = "on" if caching else "off"
        report[f"predicted_{key}"] = predicted(turns, caching)
        if not args.no_live:
            report[f"measured_{key}"] = measured(turns, caching)
    print(
        f"\nmulti-turn chat: {args.conversations} conversations x {args.turns} turns, shared {args.system_tokens}-token system prompt"
    )
    print(f"  hand-counted hits (unbounded cache, no scheduler): {report['hand_count_hits']:,} tokens")
    for name, values in report.items():
        if name.startswith(("predicted", "measured")):
            print(
                f"  {name:<14} "
                + ", ".join(f"{k}={v:,.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
            )
    report["machine"] = {"python": sys.version.split()[0], "platform": platform.platform()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
