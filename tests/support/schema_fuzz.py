"""schemathesis over llmsim's own /openapi.json: shared by the real-server run and the in-process one.

Bounded and reproducible: a fixed number of examples per operation, generated deterministically
(hypothesis ``derandomize``), positive data for every operation and negative data for those that
take a body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.core.result import Ok
from schemathesis.generation import GenerationMode
from schemathesis.schemas import APIOperation, BaseSchema

Operation = APIOperation[Any, Any, Any, Any]

#: The models the fuzzed servers serve: a chat model and an embedding one.
CONFIG = """
version: 1
models:
  - {name: chat, engine: instant, context_length: 96, lora: {max_loras: 1, max_cpu_loras: 3}}
  - {name: embed, engine: instant, context_length: 96, embeddings: {dimensions: 16}}
"""


def name_served_models(schema: BaseSchema) -> None:
    """Half the generated bodies name a served model, so requests get past the 404 into the answers."""

    @schema.hook
    def map_body(context: Any, body: Any) -> Any:
        if isinstance(body, dict) and "model" in body and len(str(body["model"])) % 2 == 0:
            body["model"] = "embed" if context.operation.path == "/v1/embeddings" else "chat"
        return body


def operations(schema: BaseSchema, keep: Callable[[Operation], bool] = lambda op: True) -> list[Operation]:
    """Every operation of ``schema`` that ``keep`` keeps (the document itself must be valid OpenAPI)."""
    out = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        if keep(operation):
            out.append(operation)
    return out


def fuzz(ops: Iterable[Operation], run: Callable[[schemathesis.Case[Any]], None], examples: int) -> None:
    """``run`` each generated case: ``examples`` per operation and generation mode."""
    for operation in ops:
        # Negative data needs something to break: only the operations that take a body.
        modes = (
            (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if len(operation.body) else (GenerationMode.POSITIVE,)
        )
        for mode in modes:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=examples,
                derandomize=True,
                database=None,
                deadline=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def each(case: schemathesis.Case[Any]) -> None:
                run(case)

            each()
