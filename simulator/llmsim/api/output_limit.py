"""The bound on one request's output: every prompt's every choice, before any of it is planned.

vLLM bounds each choice by the model's context (``max_tokens`` + prompt ≤ ``max_model_len``, checked
by the generator here too) and nothing else, so one request of many prompts and choices
(``prompt`` a list of 1,000, ``n`` 128, ``max_tokens`` 30,000, ``ignore_eos``) asks for billions of
tokens, which a GPU would take hours over and a simulator would have to hold in memory at once.
llmsim refuses a request whose output may exceed a per-request limit (``llmsim serve
--max-request-output-tokens``), with a 400 in OpenAI's error shape, before planning it:

    bound = Σ over prompts of n × per-choice bound
    per-choice bound = max_tokens                       when given (past the context:
                                                        vLLM's own 400 instead)
                     = the model's context length       with ignore_eos and no max_tokens
                                                        (the output then fills the context)

Without ``max_tokens`` or ``ignore_eos`` a choice says its scripted answer, whose length is known
only once planned: :func:`check_planned` then applies the same limit to the plans.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmsim.api.errors import APIError
from llmsim.types import GenerationPlan, GenerationRequest


def choice_bound(request: GenerationRequest, context_length: int) -> int | None:
    """Most output tokens one choice of ``request`` may produce before it is planned (None: its script decides)."""
    if request.max_tokens is not None:
        # Past the context, vLLM's own 400 ("'max_tokens' or 'max_completion_tokens' is too
        # large") comes first: the generator raises it before planning anything.
        return request.max_tokens if request.max_tokens <= context_length else 0
    if request.ignore_eos:
        return context_length
    return None


def output_bound(requests: Sequence[GenerationRequest], context_length: int) -> int:
    """The request's output bound before planning: Σ n × :func:`choice_bound` (scripted choices count 0)."""
    return sum(r.n * (choice_bound(r, context_length) or 0) for r in requests)


def too_many_output_tokens(requests: Sequence[GenerationRequest], total: int, limit: int) -> APIError:
    """400 BadRequestError: the request's output may exceed ``limit`` tokens."""
    first = requests[0]
    shape = f"{len(requests)} prompt{'s' if len(requests) != 1 else ''} × n={first.n}"
    if first.max_tokens is not None:
        shape += f" × max_tokens={first.max_tokens}"
    return APIError(
        400,
        f"This request may produce up to {total} output tokens ({shape}), more than the {limit} this "
        "server allows per request. Please reduce n, max_tokens or the number of prompts.",
        param="max_tokens" if first.max_tokens is not None else "n",
    )


def check_requested(requests: Sequence[GenerationRequest], context_length: int, limit: int) -> int:
    """The request's output bound before planning; raises :func:`too_many_output_tokens` over ``limit``."""
    total = output_bound(requests, context_length)
    if total > limit:
        raise too_many_output_tokens(requests, total, limit)
    return total


def check_planned(requests: Sequence[GenerationRequest], plans: Sequence[GenerationPlan], limit: int) -> None:
    """The same limit on what was planned (scripted answers' lengths are known only now)."""
    total = sum(p.num_output_tokens for p in plans)
    if total > limit:
        raise too_many_output_tokens(requests, total, limit)
