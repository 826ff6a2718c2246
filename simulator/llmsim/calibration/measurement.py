"""Measurements of a real deployment, as ``llmsim calibrate`` reads them.

Two sources:

- ``vllm bench serve --save-result`` JSON files, one load point each (``max_concurrency``,
  ``request_rate``, ``burstiness``, ``completed``, ``total_input_tokens``,
  ``total_output_tokens``, ``median_ttft_ms``, ``median_tpot_ms``, ``median_itl_ms``; with
  ``--save-detailed`` also ``input_lens``/``output_lens``, replayed request by request). Older
  ``benchmark_serving.py`` files have the same keys.
- A CSV with a header, one load point per row; ``#`` lines are comments (name the source there)::

      concurrency,rate,prompt_tokens,output_tokens,ttft_p50_ms,itl_p50_ms,tpot_p50_ms,num_requests,fit,note
      1,,50,128,13.98,,6.48,,yes,
      64,,50,128,86.92,,46.91,,no,client-bound: 64 Python threads under the GIL

  Each row gives ``concurrency`` (a closed loop) or ``rate`` (Poisson arrivals), or both (rate
  capped by concurrency, as bench's ``--max-concurrency``), the mean prompt and output lengths,
  and at least one of the p50 latencies. ``num_requests`` (default: 10 per client, at least 20,
  or 200 for a rate), ``fit`` (``no``: predicted and shown, not fitted; or the metrics to fit,
  joined by ``+``, e.g. ``tpot`` when the point's TTFT is known to be off for a reason the
  ``note`` gives) and ``note`` are optional.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmsim.errors import ConfigError

#: Metrics a point may carry, as the CLI and the reports name them.
METRICS = ("ttft", "itl", "tpot")
_CSV_COLUMNS = (
    "concurrency",
    "rate",
    "prompt_tokens",
    "output_tokens",
    "ttft_p50_ms",
    "itl_p50_ms",
    "tpot_p50_ms",
    "num_requests",
    "fit",
    "note",
)


@dataclass(frozen=True, slots=True)
class Measurement:
    """One load point of a real deployment; latencies in seconds (None: not measured)."""

    # Where it came from, e.g. ``sweep_c8.json`` or ``h100.csv:4``.
    label: str
    # Clients in a closed loop (bench's --max-concurrency); None: no limit.
    concurrency: int | None
    # Requests per second (Poisson, or gamma with ``burstiness``); None: all at once (bench's "inf").
    rate: float | None
    num_requests: int
    # Mean lengths, or every request's when the source has them.
    prompt_tokens: float
    output_tokens: float
    ttft_p50: float | None = None
    itl_p50: float | None = None
    tpot_p50: float | None = None
    burstiness: float = 1.0
    prompt_lens: tuple[int, ...] | None = None
    output_lens: tuple[int, ...] | None = None
    # False: predicted and reported, not fitted.
    fit: bool = True
    note: str = ""
    # The metrics of this point that are fitted (when ``fit``); the others are only reported.
    fit_metrics: tuple[str, ...] = METRICS

    def measured(self, metric: str) -> float | None:
        value: float | None = getattr(self, f"{metric}_p50")
        return value

    def fits(self, metric: str) -> bool:
        """Whether ``metric`` of this point is fitted (if measured and among the fit's metrics)."""
        return self.fit and metric in self.fit_metrics

    @property
    def load(self) -> str:
        """``c=8``, ``4 req/s``, ``4 req/s c=8``."""
        parts = []
        if self.rate is not None:
            parts.append(f"{self.rate:g} req/s")
        if self.concurrency is not None:
            parts.append(f"c={self.concurrency}")
        return " ".join(parts) or "all at once"


def default_num_requests(concurrency: int | None, rate: float | None) -> int:
    """Enough requests for a steady p50: ten per client (at least 20), or 200 at a rate."""
    if concurrency is not None and rate is None:
        return max(20, 10 * concurrency)
    return 200


def _positive(value: Any, file: str, entry: str, field: str, *, integer: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(file, f"expected a number, got {value!r}", entry=entry, field=field) from None
    if not math.isfinite(number) or number <= 0 or (integer and number != int(number)):
        kind = "a positive integer" if integer else "a positive number"
        raise ConfigError(file, f"expected {kind}, got {value!r}", entry=entry, field=field)
    return number


def parse_bench_json(text: str, file: str) -> Measurement:
    """One ``vllm bench serve`` result file. Raises ConfigError naming the file and the key."""
    label = Path(file).name
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(file, f"invalid JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise ConfigError(file, "expected a vllm bench serve result object")
    for key in ("completed", "total_input_tokens", "total_output_tokens"):
        if key not in raw:
            raise ConfigError(file, "required key is missing (a vllm bench serve --save-result file?)", field=key)
    completed = int(_positive(raw["completed"], file, "", "completed", integer=True))
    rate_raw = raw.get("request_rate", "inf")
    rate = None if rate_raw in ("inf", None) or rate_raw == math.inf else _positive(rate_raw, file, "", "request_rate")
    concurrency_raw = raw.get("max_concurrency")
    concurrency = (
        None if concurrency_raw is None else int(_positive(concurrency_raw, file, "", "max_concurrency", integer=True))
    )
    latencies: dict[str, float | None] = {}
    for metric in METRICS:
        value = raw.get(f"median_{metric}_ms")
        latencies[metric] = None if value is None else _positive(value, file, "", f"median_{metric}_ms") / 1000
    if all(v is None for v in latencies.values()):
        raise ConfigError(file, "no median_ttft_ms, median_itl_ms or median_tpot_ms to fit")
    prompt_lens = raw.get("input_lens")
    output_lens = raw.get("output_lens")
    detailed = (
        isinstance(prompt_lens, list) and isinstance(output_lens, list) and len(prompt_lens) == len(output_lens) > 0
    )
    return Measurement(
        label=label,
        concurrency=concurrency,
        rate=rate,
        num_requests=len(prompt_lens) if detailed else completed,  # type: ignore[arg-type]
        prompt_tokens=_positive(raw["total_input_tokens"], file, "", "total_input_tokens") / completed,
        output_tokens=_positive(raw["total_output_tokens"], file, "", "total_output_tokens") / completed,
        ttft_p50=latencies["ttft"],
        itl_p50=latencies["itl"],
        tpot_p50=latencies["tpot"],
        burstiness=_positive(raw.get("burstiness", 1.0) or 1.0, file, "", "burstiness"),
        prompt_lens=tuple(int(n) for n in prompt_lens) if detailed else None,  # type: ignore[union-attr]
        output_lens=tuple(int(n) for n in output_lens) if detailed else None,  # type: ignore[union-attr]
    )


def parse_csv(text: str, file: str) -> list[Measurement]:
    """The rows of a measurements CSV. Raises ConfigError naming the file, the row and the column."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    columns = [c.strip() for c in reader.fieldnames or []]
    unknown = [c for c in columns if c not in _CSV_COLUMNS]
    if unknown:
        raise ConfigError(file, f"unknown column (columns: {', '.join(_CSV_COLUMNS)})", field=unknown[0])
    for needed in ("prompt_tokens", "output_tokens"):
        if needed not in columns:
            raise ConfigError(file, "required column is missing", field=needed)
    name = Path(file).name
    points: list[Measurement] = []
    for n, row in enumerate(reader, start=2):
        cells = {k.strip(): (v or "").strip() for k, v in row.items() if k is not None}
        entry = f"row {n - 1}"

        def number(
            column: str, *, integer: bool = False, cells: dict[str, str] = cells, entry: str = entry
        ) -> float | None:
            value = cells.get(column, "")
            return None if value == "" else _positive(value, file, entry, column, integer=integer)

        concurrency = number("concurrency", integer=True)
        rate = number("rate")
        if concurrency is None and rate is None:
            raise ConfigError(file, "give concurrency or rate", entry=entry, field="concurrency")
        prompt = number("prompt_tokens")
        output = number("output_tokens")
        if prompt is None or output is None:
            raise ConfigError(
                file, "required", entry=entry, field="prompt_tokens" if prompt is None else "output_tokens"
            )
        latencies = {m: number(f"{m}_p50_ms") for m in METRICS}
        if all(v is None for v in latencies.values()):
            raise ConfigError(file, "no latency to fit: give ttft_p50_ms, itl_p50_ms or tpot_p50_ms", entry=entry)
        fit = cells.get("fit", "").lower()
        fit_metrics: tuple[str, ...] = METRICS
        if fit not in ("", "yes", "no"):
            fit_metrics = tuple(m.strip() for m in fit.split("+"))
            if not all(m in METRICS for m in fit_metrics):
                raise ConfigError(
                    file,
                    f"expected yes, no or metrics joined by '+' (of {', '.join(METRICS)}), got '{fit}'",
                    entry=entry,
                    field="fit",
                )
        requests = number("num_requests", integer=True)
        c = None if concurrency is None else int(concurrency)
        points.append(
            Measurement(
                label=f"{name}:{n - 1}",
                concurrency=c,
                rate=rate,
                num_requests=int(requests) if requests is not None else default_num_requests(c, rate),
                prompt_tokens=prompt,
                output_tokens=output,
                ttft_p50=None if latencies["ttft"] is None else latencies["ttft"] / 1000,
                itl_p50=None if latencies["itl"] is None else latencies["itl"] / 1000,
                tpot_p50=None if latencies["tpot"] is None else latencies["tpot"] / 1000,
                fit=fit != "no",
                note=cells.get("note", ""),
                fit_metrics=fit_metrics,
            )
        )
    if not points:
        raise ConfigError(file, "no measurements (a header and at least one row)")
    return points


def load_measurements(path: str | Path) -> list[Measurement]:
    """A ``.json`` bench result (one point) or a ``.csv`` table. Raises ConfigError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(p), f"cannot read file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(p), f"not UTF-8 text (byte {exc.start})") from None
    if p.suffix.lower() == ".csv":
        return parse_csv(text, str(p))
    return [parse_bench_json(text, str(p))]
