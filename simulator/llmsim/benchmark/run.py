"""One benchmark run: predict, send, read the server's view, and put the three side by side."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp

from llmsim.benchmark import server_view
from llmsim.benchmark.client import LoadClient, Target, calibrate_chat, chat_layouts
from llmsim.benchmark.monitor import ClientHealth
from llmsim.benchmark.prediction import Prediction
from llmsim.benchmark.progress import Progress
from llmsim.benchmark.prompts import Api, BodyBuilder
from llmsim.benchmark.records import RequestRecord
from llmsim.benchmark.stats import LoadStats, summarize
from llmsim.benchmark.workload import Workload


@dataclass(slots=True)
class RunResult:
    """Everything one load point produced."""

    # What was varied and its value ("rate" 20.0, "concurrency" 64, "trace" ...).
    load: str
    value: float | None
    workload: Workload
    records: list[RequestRecord]
    measured: LoadStats
    health: ClientHealth
    prediction: Prediction | None = None
    predicted: LoadStats | None = None
    # The server's /metrics/summary for the model, reset after the warm-up (None: not asked, or no such endpoint).
    server: dict[str, Any] | None = None


async def run_point(
    http: aiohttp.ClientSession,
    target: Target,
    workload: Workload,
    *,
    load: str,
    value: float | None,
    prediction: Prediction | None = None,
    reset_server: bool = False,
    progress: Progress | None = None,
) -> RunResult:
    """Run ``workload`` against ``target`` and put it beside its prediction (made before, see :func:`predict`).

    Parameters
    ----------
    http:
        The session requests go through.
    target:
        The endpoint and how to talk to it.
    workload:
        What to send.
    load, value:
        How the point is labelled in reports and plots.
    prediction:
        The virtual-time prediction of the same workload (None: measured only).
    reset_server:
        Reset the server's /metrics/summary at the end of the warm-up and report its view.
    progress:
        Told about every finished request.
    """
    overhead = await calibrate_chat(http, target, chat_layouts(workload)) if target.api is Api.CHAT else None
    bodies = BodyBuilder(target.model, target.api, overhead)
    client = LoadClient(target, http, bodies, progress.advance if progress is not None else None)

    async def reset() -> None:
        await server_view.reset(http, target.url)

    marks = ((workload.warmup, reset),) if reset_server and workload.warmup > 0 else ()
    if reset_server and not marks:
        await reset()
    if progress is not None:
        progress.start(workload, prediction.records if prediction is not None else None)
    try:
        run = await client.run(workload, marks)
    finally:
        if progress is not None:
            progress.stop()
    server = await server_view.fetch(http, target.url, target.model) if reset_server else None
    return RunResult(
        load=load,
        value=value,
        workload=workload,
        records=run.records,
        measured=summarize(run.records, workload.warmup),
        health=run.health,
        prediction=prediction,
        predicted=summarize(prediction.records, workload.warmup) if prediction is not None else None,
        server=server,
    )
