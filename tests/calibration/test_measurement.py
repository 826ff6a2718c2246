"""Reading measurements: vllm bench serve result files and CSV tables, with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmsim.calibration import default_num_requests, load_measurements, parse_bench_json, parse_csv
from llmsim.errors import ConfigError


def bench_result(**overrides: Any) -> dict[str, Any]:
    """The keys `vllm bench serve --save-result` writes (vllm/benchmarks/serve.py), default percentiles."""
    body: dict[str, Any] = {
        "date": "20260601-101500",
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": 160,
        "vllm": "0.23.0",  # --metadata vllm=0.23.0: a string of its own
        "gpu": "a100-40gb",
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 8,
        "duration": 41.2,
        "completed": 160,
        "failed": 0,
        "total_input_tokens": 163840,
        "total_output_tokens": 20480,
        "request_throughput": 3.88,
        "request_goodput": None,
        "output_throughput": 497.1,
        "total_token_throughput": 4474.0,
        "mean_ttft_ms": 120.0,
        "median_ttft_ms": 110.5,
        "std_ttft_ms": 20.0,
        "p99_ttft_ms": 190.0,
        "mean_tpot_ms": 14.6,
        "median_tpot_ms": 14.2,
        "std_tpot_ms": 0.4,
        "p99_tpot_ms": 15.9,
        "mean_itl_ms": 14.6,
        "median_itl_ms": 13.9,
        "std_itl_ms": 3.0,
        "p99_itl_ms": 40.1,
        "latencies": [],
        "queue_times": [],
    }
    body.update(overrides)
    return body


def test_a_bench_result_is_one_closed_loop_point() -> None:
    m = parse_bench_json(json.dumps(bench_result()), "runs/sweep_c8.json")
    assert (m.label, m.concurrency, m.rate, m.num_requests) == ("sweep_c8.json", 8, None, 160)
    assert (m.prompt_tokens, m.output_tokens) == (1024, 128)
    assert (m.ttft_p50, m.itl_p50, m.tpot_p50) == pytest.approx((0.1105, 0.0139, 0.0142), rel=1e-12)
    assert m.fit


def test_older_benchmark_serving_files_and_detailed_results() -> None:
    # benchmark_serving.py: "request_goodput:" (sic), a numeric rate, no max_concurrency, no ITL.
    old = bench_result(request_rate=4.0, burstiness=0.5, max_concurrency=None, median_itl_ms=None)
    del old["request_goodput"]
    old["request_goodput:"] = None
    old |= {
        "input_lens": [1000, 1048],
        "output_lens": [100, 156],
        "completed": 2,
        "total_input_tokens": 2048,
        "total_output_tokens": 256,
    }
    m = parse_bench_json(json.dumps(old), "old.json")
    assert (m.rate, m.concurrency, m.burstiness, m.itl_p50) == (4.0, None, 0.5, None)
    assert (m.prompt_lens, m.output_lens, m.num_requests) == ((1000, 1048), (100, 156), 2)
    assert m.load == "4 req/s"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"completed": None}, "sweep.json: field 'completed': expected a number"),
        (
            {"median_ttft_ms": None, "median_tpot_ms": None, "median_itl_ms": None},
            "no median_ttft_ms, median_itl_ms or median_tpot_ms",
        ),
        ({"max_concurrency": 2.5}, "field 'max_concurrency': expected a positive integer"),
    ],
)
def test_a_broken_bench_result_names_the_key(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_bench_json(json.dumps(bench_result(**body)), "sweep.json")
    with pytest.raises(ConfigError, match="field 'total_output_tokens': required key is missing"):
        parse_bench_json(json.dumps({"completed": 1, "total_input_tokens": 1}), "sweep.json")


CSV = """\
# source: somewhere public
concurrency,rate,prompt_tokens,output_tokens,ttft_p50_ms,itl_p50_ms,tpot_p50_ms,num_requests,fit,note
1,,1024,128,80,13.3,,,,
8,2.5,1024,128,,14,14.2,50,no,a note
,10,256,128,30,,,,yes,
4,,50,128,22,,6.6,,TTFT + tpot,
4,,50,128,22,,6.6,,tpot,clients out of step
"""


def test_a_csv_table(tmp_path: Path) -> None:
    path = tmp_path / "sweep.csv"
    path.write_text(CSV)
    a, b, c, d, e = load_measurements(path)
    assert (a.label, a.concurrency, a.rate, a.num_requests, a.tpot_p50) == ("sweep.csv:1", 1, None, 20, None)
    assert (a.ttft_p50, a.itl_p50) == pytest.approx((0.08, 0.0133), rel=1e-12)
    assert default_num_requests(1, None) == 20
    assert default_num_requests(8, None) == 80
    assert (b.concurrency, b.rate, b.num_requests, b.fit, b.note, b.load) == (
        8,
        2.5,
        50,
        False,
        "a note",
        "2.5 req/s c=8",
    )
    assert (c.concurrency, c.rate, c.num_requests, c.fit) == (None, 10.0, 200, True)
    # ``fit`` may name the metrics to fit: the others are reported only.
    assert [(m.fits("ttft"), m.fits("tpot")) for m in (a, b, c, d, e)] == [
        (True, True),
        (False, False),
        (True, True),
        (True, True),
        (False, True),
    ]
    assert e.fit_metrics == ("tpot",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "concurrency,prompt_tokens,output_tokens,ttft_p50_ms\n,10,10,5\n",
            "t.csv: row 1: field 'concurrency': give concurrency or rate",
        ),
        ("concurrency,prompt_tokens,output_tokens,ttft_p50_ms\n1,10,10,\n", "t.csv: row 1: no latency to fit"),
        (
            "concurrency,prompt_tokens,output_tokens,ttft_p50_ms\n1,10,10,fast\n",
            "row 1: field 'ttft_p50_ms': expected a number, got 'fast'",
        ),
        ("concurrency,prompt_tokens,output_tokens,ttft_ms\n1,10,10,5\n", "t.csv: field 'ttft_ms': unknown column"),
        ("concurrency,output_tokens,ttft_p50_ms\n1,10,5\n", "field 'prompt_tokens': required column is missing"),
        (
            "concurrency,prompt_tokens,output_tokens,ttft_p50_ms,fit\n1,10,10,5,maybe\n",
            "field 'fit': expected yes, no or metrics joined by '+' (of ttft, itl, tpot), got 'maybe'",
        ),
        ("concurrency,prompt_tokens,output_tokens,ttft_p50_ms\n", "no measurements"),
    ],
)
def test_a_broken_csv_names_the_row_and_column(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_csv(text, "t.csv")
    assert message in str(err.value)
