"""Trace replay: a recorded workload, one request per JSON line (or a YAML/JSON list).

Each request has an ``arrival`` (seconds), its ``output_tokens`` and its prompt, given one of
three ways:

- ``prompt_tokens``: a length only (a prompt that shares nothing);
- ``prompt_token_ids``: the tokens themselves;
- ``prefix_group`` + ``suffix_tokens``: a shared prefix (a system prompt, a document) of
  ``prefix_tokens`` tokens, the same text for every request of the group, then a suffix of its
  own. ``prefix_tokens`` is given at least on the group's first request.

Optional: ``adapter`` (a LoRA adapter the replicas serve, as vLLM's ``--lora-modules``: a request
naming one they do not serve is an error, as vLLM answers it 404), ``abort_at`` (when the client
goes away) and, for disaggregated fleets, ``handoff_ms`` (the router's time between this request's
prefill answer and its decode leg, as measured at a real router; without it, the fleet file's
``router.handoff_ms``). Example::

    {"arrival": 0.00, "prefix_group": "support-bot", "prefix_tokens": 1200, "suffix_tokens": 80, "output_tokens": 150}
    {"arrival": 0.02, "prompt_tokens": 900, "output_tokens": 40, "adapter": "sql-lora"}
    {"arrival": 0.05, "prompt_token_ids": [128000, 9906, 1917], "output_tokens": 8}

The single-replica format of ``llmsim plan --workload`` (``arrival``, ``prompt_tokens``,
``output_tokens``, ``abort_at``) is a trace.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from llmsim.errors import ConfigError, format_loc, parse_yaml
from llmsim.fleet.prompt import Prompt, Segment
from llmsim.fleet.workload import FleetRequest, FleetWorkload

Count = Annotated[int, Field(ge=0)]


class TraceEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    arrival: float
    output_tokens: Count
    prompt_tokens: Count | None = None
    prompt_token_ids: list[Annotated[int, Field(ge=0)]] | None = None
    prefix_group: Annotated[str, Field(min_length=1)] | None = None
    prefix_tokens: Count | None = None
    suffix_tokens: Count | None = None
    adapter: str | None = None
    abort_at: float | None = None
    handoff_ms: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _one_prompt(self) -> TraceEntry:
        given = [n for n in ("prompt_tokens", "prompt_token_ids", "prefix_group") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of prompt_tokens, prompt_token_ids, prefix_group")
        if self.prefix_group is None and (self.prefix_tokens is not None or self.suffix_tokens is not None):
            raise ValueError("prefix_tokens and suffix_tokens go with prefix_group")
        if self.prefix_group is not None and self.suffix_tokens is None:
            raise ValueError("prefix_group needs suffix_tokens (0 for none)")
        if not math.isfinite(self.arrival) or (self.abort_at is not None and not math.isfinite(self.abort_at)):
            raise ValueError("arrival and abort_at must be finite")
        return self


def _entries(text: str, file: str) -> list[tuple[str, Any]]:
    """(label, raw entry) pairs: ``line N`` for JSON lines, ``request N`` for a YAML/JSON list."""
    if text.lstrip().startswith("{"):
        out = []
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                out.append((f"line {n}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ConfigError(file, f"invalid JSON: {exc.msg} (column {exc.colno})", entry=f"line {n}") from None
        return out
    raw = parse_yaml(text, file)
    if not isinstance(raw, list):
        raise ConfigError(file, "expected JSON lines or a list of requests")
    return [(f"request {i}", entry) for i, entry in enumerate(raw)]


def parse_trace(
    text: str, file: str, adapters: Collection[str] | None = None, *, disaggregated: bool | None = None
) -> FleetWorkload:
    """The requests of a trace, in file order. Raises ConfigError naming the line and the field.

    With ``adapters`` (those every replica serves), a request naming another is refused there;
    with ``disaggregated`` False (a fleet without prefill replicas), so is a ``handoff_ms``.
    """
    requests: list[FleetRequest] = []
    group_lengths: dict[str, int] = {}
    for index, (label, raw) in enumerate(_entries(text, file)):
        try:
            entry = TraceEntry.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            messages = {"missing": "required field is missing", "extra_forbidden": "unknown field"}
            message = messages.get(err["type"], str(err["msg"]).removeprefix("Value error, "))
            raise ConfigError(file, message, entry=label, field=format_loc(err["loc"]) or None) from None
        if adapters is not None and entry.adapter is not None and entry.adapter not in adapters:
            served = ", ".join(sorted(adapters)) or "none"
            raise ConfigError(
                file, f"unknown LoRA adapter '{entry.adapter}' (served: {served})", entry=label, field="adapter"
            )
        if disaggregated is False and entry.handoff_ms is not None:
            raise ConfigError(
                file,
                "a hand-off needs a disaggregated fleet (prefill and decode groups)",
                entry=label,
                field="handoff_ms",
            )
        if entry.prompt_token_ids is not None:
            ids = tuple(entry.prompt_token_ids)
            prompt = Prompt((Segment(f"ids:{index}", len(ids), ids),))
        elif entry.prefix_group is not None:
            group = entry.prefix_group
            known = group_lengths.get(group)
            if entry.prefix_tokens is None and known is None:
                raise ConfigError(
                    file,
                    f"first request of prefix group '{group}' must give its length",
                    entry=label,
                    field="prefix_tokens",
                )
            if entry.prefix_tokens is not None and known is not None and entry.prefix_tokens != known:
                raise ConfigError(
                    file,
                    f"prefix group '{group}' is {known} tokens long, not {entry.prefix_tokens}",
                    entry=label,
                    field="prefix_tokens",
                )
            length = known if known is not None else entry.prefix_tokens
            assert length is not None
            assert entry.suffix_tokens is not None
            group_lengths[group] = length
            prompt = Prompt((Segment(f"group:{group}", length), Segment(f"suffix:{index}", entry.suffix_tokens)))
        else:
            assert entry.prompt_tokens is not None
            prompt = Prompt.unique(f"request:{index}", entry.prompt_tokens)
        handoff = None if entry.handoff_ms is None else entry.handoff_ms / 1000.0
        requests.append(
            FleetRequest(
                prompt, entry.output_tokens, entry.arrival, None, entry.abort_at, entry.adapter, handoff=handoff
            )
        )
    return FleetWorkload(tuple(requests))


def load_trace(
    path: str | Path, adapters: Collection[str] | None = None, *, disaggregated: bool | None = None
) -> FleetWorkload:
    """Read a trace file (``adapters``, ``disaggregated``: see :func:`parse_trace`). Raises ConfigError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(p), f"cannot read file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(p), f"not UTF-8 text (byte {exc.start})") from None
    return parse_trace(text, str(p), adapters, disaggregated=disaggregated)
