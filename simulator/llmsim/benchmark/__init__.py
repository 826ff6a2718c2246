"""llmsim bench: a load generator for any OpenAI-compatible endpoint that also says what *should* happen.

It sends workloads (open loop, closed loop, conversations, replayed traces) over aiohttp and
times every chunk, predicts the same workload with the scheduler's virtual-time core, and puts
prediction, measurement and the server's own view side by side. It is a client: it talks to
servers only over HTTP, never imports the server (api, metrics, runtime), and nothing on the
server's path imports it. Scheduler numbers for a prediction are handed in by the caller.
"""

from llmsim.benchmark.client import ClientRun, LoadClient, Target, calibrate_chat, session
from llmsim.benchmark.monitor import ClientHealth, LoopMonitor
from llmsim.benchmark.prediction import Prediction, predict
from llmsim.benchmark.prompts import Api, BodyBuilder
from llmsim.benchmark.records import Outcome, RequestRecord
from llmsim.benchmark.run import RunResult, run_point
from llmsim.benchmark.sse import StreamParser
from llmsim.benchmark.stats import Distribution, LoadStats, summarize
from llmsim.benchmark.workload import (
    Chain,
    PromptShape,
    Shape,
    Turn,
    Workload,
    closed_loop,
    constant_arrivals,
    conversations,
    first_arrivals,
    open_loop,
    trace,
)

__all__ = [
    "Api",
    "BodyBuilder",
    "Chain",
    "ClientHealth",
    "ClientRun",
    "Distribution",
    "LoadClient",
    "LoadStats",
    "LoopMonitor",
    "Outcome",
    "Prediction",
    "PromptShape",
    "RequestRecord",
    "RunResult",
    "Shape",
    "StreamParser",
    "Target",
    "Turn",
    "Workload",
    "calibrate_chat",
    "closed_loop",
    "constant_arrivals",
    "conversations",
    "first_arrivals",
    "open_loop",
    "predict",
    "run_point",
    "session",
    "summarize",
    "trace",
]
