"""``llmsim bench``: load any OpenAI-compatible endpoint, and say what should have happened beside what did.

    llmsim bench --url URL --model M (--rate R | --rates LIST | --concurrency N | --concurrencies LIST
                 | --workload trace.jsonl) (--duration S | --requests K) --prompt-tokens P --output-tokens O
                 [--predict [--config models.yml] [--fleet fleet.yml]] [--reset-server-metrics] [--json FILE]
                 [--plot FILE.png]
    llmsim bench experiments [--only E1,E3] [--json FILE] [--markdown FILE]

The prediction runs ``llmsim plan``'s virtual-time core on the identical workload before anything
is sent: one replica of the model, or with ``--fleet`` the fleet file's replicas behind its router
(``llmsim.fleet.plan_fleet``), for a URL that is a fleet's Service or a gateway in front of it. This
module is the one place the client meets the server's config (through ``runtime.scheduler_params``
and ``llmsim.fleet.load_fleet``): the benchmark package itself only speaks HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmsim.config import load_models_config
from llmsim.config.loader import EMBEDDED_MODELS
from llmsim.engine.scheduler import SchedulerParams
from llmsim.errors import ConfigError
from llmsim.fleet import FleetSpec, load_fleet, load_trace, poisson_arrivals
from llmsim.runtime import scheduler_params

# NOTE: the benchmark package (aiohttp, the client) is imported inside the functions that run it:
# `llmsim serve` goes through this CLI too and must not load the client.
if TYPE_CHECKING:
    from llmsim.benchmark.prediction import Prediction
    from llmsim.benchmark.run import RunResult
    from llmsim.benchmark.trial import ExperimentResult
    from llmsim.benchmark.workload import PromptShape, Workload

RESULTS = Path("bench/results")

#: What ``llmsim bench --help`` says (the module docstring is for the code's readers).
DESCRIPTION = """\
Send a workload to an OpenAI-compatible endpoint (one replica, a fleet's Service, a gateway) and
report throughput and TTFT, ITL, TPOT and E2E percentiles, timed from each request's scheduled
send and from its actual send. Before sending, GET /v1/models checks that the endpoint answers and
serves --model.

With --predict, llmsim plan's virtual-time prediction of the same workload (from --config, or with
--fleet a fleet's replicas behind its router) is printed beside the measurement; with
--reset-server-metrics, llmsim's own /metrics/summary too.

examples:
  llmsim bench --url http://127.0.0.1:8000 --model llama-3.1-8b --rate 10 --duration 60 \\
      --prompt-tokens 1000 --output-tokens 200 --predict
  llmsim bench --url http://gateway:4000/v1 --model llama-3.1-8b --concurrencies 1,8,64 \\
      --requests 200 --prompt-tokens 500 --output-tokens 100 --json sweep.json
  llmsim bench experiments      # the predict-then-measure experiments against llmsim serve

Exit status: 0 when the run completed, 1 when the endpoint could not be benchmarked (unreachable,
model not served) or every request of a load point failed, 2 for a usage or config error.
"""


class BenchFailed(Exception):
    """The run cannot go on or produced nothing: one line for the user."""


#: Mirrors of llmsim.benchmark's enums, for --help without importing it (a test keeps them equal).
SHAPES = ("distinct", "shared-prefix", "multi-turn")
APIS = ("completions", "chat")


def _floats(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("every value must be > 0")
    return values


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "bench",
        help="load an OpenAI-compatible endpoint; with --predict, beside the virtual-time prediction",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--url", help="base URL of the endpoint (a replica, a fleet's Service, a gateway)")
    p.add_argument("--model", help="the model name sent in every request")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--rate", type=float, help="open loop: requests per second")
    load.add_argument("--rates", type=_floats, help="open loop sweep: comma-separated rates")
    load.add_argument("--concurrency", type=int, help="closed loop: concurrent streams")
    load.add_argument("--concurrencies", type=_floats, help="closed loop sweep: comma-separated stream counts")
    load.add_argument("--workload", type=Path, help="replay a trace in llmsim plan's format (JSON lines or YAML)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--duration", type=float, help="seconds of sending (a closed loop stops sending then)")
    size.add_argument("--requests", type=int, help="number of requests (conversations: of conversations)")
    p.add_argument("--prompt-tokens", type=int, help="prompt length (multi-turn: of each new user message)")
    p.add_argument("--output-tokens", type=int, help="output tokens per request (max_tokens with ignore_eos)")
    p.add_argument("--arrivals", choices=["poisson", "constant"], default="poisson", help="open-loop arrivals")
    p.add_argument("--seed", type=int, default=0, help="seed of the Poisson arrivals (default 0)")
    p.add_argument("--warmup", type=float, default=0.0, help="seconds at the start whose requests are not counted")
    p.add_argument("--think-time", type=float, default=0.0, help="closed loop and conversations: pause between turns")
    p.add_argument("--shape", choices=SHAPES, default="distinct", help="prompt shape")
    p.add_argument("--system-prompt-tokens", type=int, default=0, help="shared-prefix: shared system prompt length")
    p.add_argument("--prefix-groups", type=int, default=1, help="shared-prefix: number of distinct system prompts")
    p.add_argument("--turns", type=int, default=1, help="multi-turn: turns per conversation")
    p.add_argument(
        "--api",
        choices=APIS,
        default="completions",
        help="completions with token-id prompts (exact lengths, default) or chat with text",
    )
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="bearer token (env OPENAI_API_KEY)")
    p.add_argument("--max-concurrency", type=int, help="at most this many requests in flight (open loop)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default 600)")
    p.add_argument("--predict", action="store_true", help="predict the same workload in virtual time first")
    p.add_argument(
        "--config", default=os.environ.get("LLMSIM_CONFIG"), help="models.yml for --predict (default: embedded)"
    )
    p.add_argument("--predict-model", help="model of --config to predict with (default: --model)")
    p.add_argument(
        "--fleet",
        type=Path,
        help="predict a fleet file's replicas (models of --config) behind its router (implies --predict)",
    )
    p.add_argument(
        "--reset-server-metrics",
        action="store_true",
        help="reset /metrics/summary after the warm-up and add the server's own view to the table",
    )
    p.add_argument("--json", type=Path, dest="json_path", help="write every result as JSON to this file")
    p.add_argument("--plot", type=Path, help="draw latency percentiles against load (needs matplotlib)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
    sub = p.add_subparsers(dest="bench_command", metavar="experiments")
    e = sub.add_parser(
        "experiments",
        help="run the predict-then-measure experiments E1-E8 against llmsim serve",
        description="Start llmsim serve for each experiment (E1-E8), predict its workload in virtual time, "
        "measure it, and write the results as JSON and as a markdown table. Exit 1 when a figure is out of "
        "tolerance.",
    )
    e.add_argument("--only", help="comma-separated experiment ids (default: all)")
    e.add_argument("--json", type=Path, dest="json_path", default=RESULTS / "experiments.json")
    e.add_argument("--markdown", type=Path, default=RESULTS / "experiments.md", help="the table for bench/README.md")
    e.set_defaults(func=run_experiments)


def _fail(message: str, code: int = 2) -> int:
    print(f"llmsim bench: {message}", file=sys.stderr)
    return code


def first_failure(result: RunResult) -> str | None:
    """When every counted request of a load point failed: how many, and the first error; else None."""
    from llmsim.benchmark.records import Outcome

    counted = [r for r in result.records if not r.background]
    if not counted or any(r.outcome is not Outcome.ERROR for r in counted):
        return None
    first = min(counted, key=lambda r: r.sent)
    return f"every request failed ({len(counted)} of {len(counted)}); the first: {first.error or 'unknown error'}"


def _params(config_path: str | None, model: str) -> SchedulerParams:
    config = load_models_config(config_path)
    file = str(config_path) if config_path else EMBEDDED_MODELS
    names = [m.name for m in config.models]
    if model not in names:
        raise ConfigError(file, f"no model named '{model}' (models: {', '.join(names)})")
    if config.model(model).engine != "scheduler":
        raise ConfigError(file, f"model '{model}' does not use engine 'scheduler': only its timeline can be predicted")
    return scheduler_params(config, model, file)


def _prompts(args: argparse.Namespace) -> PromptShape:
    from llmsim.benchmark.workload import PromptShape, Shape

    if args.prompt_tokens is None or args.output_tokens is None:
        raise ValueError("--prompt-tokens and --output-tokens are needed (or --workload)")
    return PromptShape(
        args.prompt_tokens,
        args.output_tokens,
        Shape(args.shape),
        system_prompt_tokens=args.system_prompt_tokens,
        prefix_groups=args.prefix_groups,
        turns=args.turns,
    )


def _arrivals(args: argparse.Namespace, rate: float) -> list[float]:
    from llmsim.benchmark.workload import constant_arrivals, first_arrivals

    poisson = args.arrivals == "poisson"
    if args.requests is not None:
        return first_arrivals(rate, args.requests, poisson=poisson, seed=args.seed)
    if args.duration is None:
        raise ValueError("give --duration or --requests")
    return poisson_arrivals(rate, args.duration, args.seed) if poisson else constant_arrivals(rate, args.duration)


def workloads(args: argparse.Namespace) -> list[tuple[str, float | None, Workload]]:
    """The load points of the command line: (what varies, its value, the workload)."""
    from llmsim.benchmark.workload import Shape, closed_loop, conversations, open_loop, trace

    if args.workload is not None:
        return [("trace", None, trace(load_trace(args.workload).requests, warmup=args.warmup))]
    prompts = _prompts(args)
    if args.rate is not None or args.rates is not None:
        points: list[tuple[str, float | None, Workload]] = []
        for rate in args.rates or [args.rate]:
            arrivals = _arrivals(args, rate)
            if prompts.shape is Shape.MULTI_TURN:
                w = conversations(arrivals, prompts, think_time=args.think_time, warmup=args.warmup)
            else:
                w = open_loop(arrivals, prompts, warmup=args.warmup)
            points.append(("rate", rate, w))
        return points
    if args.concurrency is not None or args.concurrencies is not None:
        if args.duration is None and args.requests is None:
            raise ValueError("give --duration or --requests")
        return [
            (
                "concurrency",
                n,
                closed_loop(
                    int(n),
                    prompts,
                    duration=args.duration,
                    requests=args.requests,
                    think_time=args.think_time,
                    warmup=args.warmup,
                ),
            )
            for n in args.concurrencies or [args.concurrency]
        ]
    raise ValueError("give a load: --rate/--rates, --concurrency/--concurrencies or --workload")


#: What --predict runs on a workload: one replica's or a fleet's virtual-time core.
Predictor = Callable[["Workload"], "Prediction"]


def _predictor(args: argparse.Namespace) -> Predictor | None:
    """The prediction --predict (and --fleet) asks for; None without."""
    from llmsim.benchmark.prediction import predict, predict_fleet

    if args.fleet is not None:
        if args.predict_model is not None:
            raise ValueError("--predict-model goes with a one-replica prediction, not --fleet")
        config = load_models_config(args.config)
        fleet: FleetSpec = load_fleet(args.fleet, config, str(args.config) if args.config else EMBEDDED_MODELS)
        return lambda workload: predict_fleet(fleet, workload)
    if not args.predict:
        return None
    params = _params(args.config, args.predict_model or args.model)
    return lambda workload: predict(params, workload)


async def _bench(
    args: argparse.Namespace, points: list[tuple[str, float | None, Workload]], predictor: Predictor | None
) -> list[RunResult]:
    from llmsim.benchmark import client as load_client
    from llmsim.benchmark.client import Target
    from llmsim.benchmark.preflight import preflight
    from llmsim.benchmark.progress import Progress
    from llmsim.benchmark.prompts import Api
    from llmsim.benchmark.report import format_result
    from llmsim.benchmark.run import run_point

    target = Target(
        args.url,
        args.model,
        Api(args.api),
        api_key=args.api_key,
        timeout=args.timeout,
        max_concurrency=args.max_concurrency,
    )
    results = []
    async with load_client.session() as http:
        problem = await preflight(http, target)
        if problem is not None:
            raise BenchFailed(problem)
        for load, value, workload in points:
            prediction = predictor(workload) if predictor is not None else None
            progress = Progress(f"{load} {value:g}" if value is not None else load, enabled=not args.no_progress)
            result = await run_point(
                http,
                target,
                workload,
                load=load,
                value=value,
                prediction=prediction,
                reset_server=args.reset_server_metrics,
                progress=progress,
            )
            print(format_result(result), flush=True)
            print(flush=True)
            results.append(result)
            failure = first_failure(result)
            if failure is not None:
                label = f"{load} {value:g}" if value is not None else load
                raise BenchFailed(f"{label}: {failure}")
    return results


def _run_loop(coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        import uvloop
    except ImportError:  # uvicorn[standard] brings it; plain asyncio works too
        return asyncio.run(coro)
    return uvloop.run(coro)


def run(args: argparse.Namespace) -> int:
    from llmsim.benchmark.plot import plot_sweep
    from llmsim.benchmark.report import format_sweep, result_json

    if args.url is None or args.model is None:
        return _fail("--url and --model are needed (or: llmsim bench experiments)")
    try:
        points = workloads(args)
        predictor = _predictor(args)
    except (ConfigError, ValueError, OSError) as exc:
        return _fail(str(exc))
    try:
        results: list[RunResult] = _run_loop(_bench(args, points, predictor))
    except BenchFailed as exc:
        return _fail(str(exc), code=1)
    if len(results) > 1:
        print(format_sweep(results))
    if args.json_path is not None:
        args.json_path.write_text(json.dumps({"points": [result_json(r) for r in results]}, indent=2) + "\n")
    if args.plot is not None:
        try:
            plot_sweep(results, args.plot, title=f"{args.model} at {args.url}")
        except RuntimeError as exc:
            return _fail(str(exc))
        print(f"wrote {args.plot}")
    return 0


def _params_for(config: Path, model: str) -> SchedulerParams:
    return _params(str(config), model)


def run_experiments(args: argparse.Namespace) -> int:
    from llmsim.benchmark import experiments as registry
    from llmsim.benchmark import trial

    try:
        chosen = registry.select(args.only.split(",") if args.only else None)
    except ValueError as exc:
        return _fail(str(exc))
    results: list[ExperimentResult] = []

    def save(current: ExperimentResult | None = None) -> None:
        done = [*results, current] if current is not None else results
        args.json_path.parent.mkdir(parents=True, exist_ok=True)
        body = {"tolerance": registry.TOLERANCE, "experiments": [trial.result_json(r) for r in done]}
        args.json_path.write_text(json.dumps(body, indent=2) + "\n")

    async def all_experiments() -> None:
        with trial.default_workdir() as tmp:
            for experiment in chosen:
                result = await trial.run_experiment(experiment, _params_for, workdir=Path(tmp), on_prediction=save)
                results.append(result)
                save()
                print(trial.format_result(result), flush=True)

    _run_loop(all_experiments())
    table = trial.markdown(results)
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    args.markdown.write_text(table + "\n")
    print()
    print(table)
    print(f"wrote {args.json_path} and {args.markdown}")
    return 0 if all(r.ok for r in results) else 1
