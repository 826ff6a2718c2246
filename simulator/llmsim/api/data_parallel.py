"""Which data-parallel rank a request runs on: pinned by the client, or vLLM's internal choice.

A request names a rank in one of two ways, both read while its body is parsed
(:func:`llmsim.api.routes.parse_body`) and kept for the one admission point
(:func:`submit`) in a context variable, so no route passes it along by hand:

- vLLM's ``X-data-parallel-rank: r`` header (vllm-router's ``--intra-node-data-parallel-size``,
  llm-d); a value that is not an integer is ignored, as vLLM's ``_get_data_parallel_rank`` does;
- SGLang's ``"data_parallel_rank": r`` body field (sglang-router's ``--dp-aware``); it wins over
  the header when both are given.

A rank outside the ranks this server runs gets vLLM's 400: "data_parallel_rank r is out of range
[0, n)." (vLLM's input processor, which counts only the local engines when the server runs some
ranks of a larger deployment). A request without a rank goes to the rank vLLM's API server would
choose (:class:`llmsim.engine.data_parallel.RankBalancer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from starlette.requests import Request

from llmsim.api.errors import APIError
from llmsim.api.served import ServedModel
from llmsim.engine import TokenStream
from llmsim.engine.data_parallel import DataParallelEngine
from llmsim.types import GenerationPlan, RequestId

__all__ = ["BODY_FIELD", "HEADER", "pin_rank", "pinned_rank", "submit"]

#: vLLM's header (matched case-insensitively, as HTTP headers are).
HEADER = "x-data-parallel-rank"
#: SGLang's body field.
BODY_FIELD = "data_parallel_rank"

#: The rank the request being served asked for (None: let the server choose). Set for every parsed body.
_PINNED: ContextVar[int | None] = ContextVar("llmsim_data_parallel_rank", default=None)


def _header_rank(request: Request) -> int | None:
    value = request.headers.get(HEADER)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None  # vLLM: a header that is not an integer is ignored


def pin_rank(request: Request, data: Any) -> None:
    """Note the rank ``request`` asks for (its parsed JSON ``data`` and its headers), or none."""
    rank = _header_rank(request)
    if isinstance(data, dict) and (field := data.get(BODY_FIELD)) is not None:
        if not isinstance(field, int) or isinstance(field, bool):
            raise APIError(400, f"{BODY_FIELD} must be an integer", param=BODY_FIELD)
        rank = field
    _PINNED.set(rank)


def pinned_rank() -> int | None:
    """The rank the request being served asked for, if any."""
    return _PINNED.get()


async def submit(
    served: ServedModel, plans: Sequence[GenerationPlan], arrival: float, ids: Sequence[RequestId]
) -> list[TokenStream]:
    """Admit the request on its pinned rank (400 when this server runs no such rank), else on the server's choice."""
    rank = _PINNED.get()
    engine = served.engine
    if rank is None:
        return await engine.submit(plans, arrival, ids)
    local = engine.size if isinstance(engine, DataParallelEngine) else 1
    if not 0 <= rank < local:
        raise APIError(400, f"{BODY_FIELD} {rank} is out of range [0, {local}).")
    if isinstance(engine, DataParallelEngine):
        return await engine.submit_to(rank, plans, arrival, ids)
    return await engine.submit(plans, arrival, ids)
