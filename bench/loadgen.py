"""A closed-loop streaming load generator for the benches, run as its own process so it never shares a
CPU-bound event loop with the server it measures.

A thin shell over ``llmsim.benchmark`` (the client behind ``llmsim bench``): ``--concurrency``
streams send chat completions back to back for ``--duration`` seconds. It reports output tokens/s
and, for the fixed engine whose timeline is known (``--ttft``/``--itl``), the client-side lateness
of every token against ``send + ttft + i * itl`` (an upper bound of the server's lag: it adds
delivery), and the client's own event-loop lateness, so a saturated client is visible. Prints one
JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import uvloop

from llmsim.benchmark import Api, BodyBuilder, LoadClient, PromptShape, Target, closed_loop, session, summarize
from llmsim.benchmark.client import calibrate_chat, chat_layouts
from llmsim.benchmark.records import Outcome
from llmsim.benchmark.stats import Distribution


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    target = Target(args.url, args.model, Api.CHAT)
    workload = closed_loop(args.concurrency, PromptShape(args.prompt_tokens, args.max_tokens), duration=args.duration)
    async with session() as http:
        overhead = await calibrate_chat(http, target, chat_layouts(workload))
        run = await LoadClient(target, http, BodyBuilder(args.model, Api.CHAT, overhead)).run(workload)
    stats = summarize(run.records)
    lateness = Distribution.of(
        t - (r.sent + args.ttft + i * args.itl)
        for r in run.records
        if r.outcome is Outcome.OK and args.ttft is not None and args.itl is not None
        for i, t in enumerate(r.token_times)
    )
    loop = run.health.loop_lateness
    return {
        "concurrency": args.concurrency,
        "elapsed_s": stats.window,
        "requests": stats.completed,
        "errors": sum(stats.errors.values()),
        "output_tokens": stats.output_tokens,
        "output_tokens_per_s": stats.output_token_rate,
        "ttft_p50_ms": stats.ttft.p50 * 1000,
        "ttft_p99_ms": stats.ttft.p99 * 1000,
        "client_lateness_p50_ms": lateness.p50 * 1000 if lateness.count else None,
        "client_lateness_p99_ms": lateness.p99 * 1000 if lateness.count else None,
        "client_loop_lateness_p99_ms": loop.p99 * 1000,
        "client_loop_lateness_median_ms": loop.p50 * 1000,
        "client_cpu_share": run.health.cpu_share,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=16, help="chat prompt length, template included")
    p.add_argument("--ttft", type=float, default=None, help="the fixed engine's TTFT for this prompt (s)")
    p.add_argument("--itl", type=float, default=None, help="the fixed engine's ITL (s)")
    args = p.parse_args()
    print(json.dumps(uvloop.run(main_async(args))))


if __name__ == "__main__":
    main()
