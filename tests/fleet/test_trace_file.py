"""Trace replay files: three ways to give a prompt, optional adapter and abort, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmsim.errors import ConfigError
from llmsim.fleet import load_trace, parse_trace

TRACE = """\
{"arrival": 0.0, "prefix_group": "bot", "prefix_tokens": 1200, "suffix_tokens": 80, "output_tokens": 150}
{"arrival": 0.02, "prompt_tokens": 900, "output_tokens": 40, "adapter": "sql-lora"}

{"arrival": 0.05, "prompt_token_ids": [5, 6, 7], "output_tokens": 8, "abort_at": 0.5}
{"arrival": 0.06, "prefix_group": "bot", "suffix_tokens": 10, "output_tokens": 5}
"""


def test_a_trace_with_every_kind_of_prompt(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(TRACE)
    w = load_trace(path)
    a, b, c, d = w.requests
    assert [r.arrival for r in w.requests] == [0.0, 0.02, 0.05, 0.06]
    assert [r.prompt_tokens for r in w.requests] == [1280, 900, 3, 1210]
    assert [r.output_tokens for r in w.requests] == [150, 40, 8, 5]
    assert b.adapter == "sql-lora"
    assert c.abort_at == 0.5
    assert c.prompt.token_ids() == [5, 6, 7]
    # The group's prefix is the same text in both requests, their suffixes differ.
    assert a.prompt.shared_prefix(d.prompt) == 1200
    assert a.prompt.token_ids()[:1200] == d.prompt.token_ids()[:1200]
    assert a.prompt.shared_prefix(b.prompt) == 0


def test_the_single_replica_yaml_format_is_a_trace() -> None:
    w = parse_trace(
        "- {arrival: 0, prompt_tokens: 10, output_tokens: 1}\n- {arrival: 1.5, prompt_tokens: 3, output_tokens: 2}\n",
        "w.yml",
    )
    assert [(r.arrival, r.prompt_tokens, r.output_tokens) for r in w.requests] == [(0, 10, 1), (1.5, 3, 2)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"arrival": 0, "prompt_tokens": 5}\n', "t.jsonl: line 1: field 'output_tokens': required field is missing"),
        (
            '{"arrival": 0, "prompt_tokens": 5, "output_tokens": 1}\n{"arrival": 1, "output_tokens": 1}\n',
            "line 2: give exactly one of prompt_tokens, prompt_token_ids, prefix_group",
        ),
        (
            '{"arrival": 0, "prefix_group": "g", "suffix_tokens": 1, "output_tokens": 1}\n',
            "line 1: field 'prefix_tokens': first request of prefix group 'g' must give its length",
        ),
        (
            '{"arrival": 0, "prefix_group": "g", "prefix_tokens": 8, "suffix_tokens": 1, "output_tokens": 1}\n'
            '{"arrival": 0, "prefix_group": "g", "prefix_tokens": 9, "suffix_tokens": 1, "output_tokens": 1}\n',
            "line 2: field 'prefix_tokens': prefix group 'g' is 8 tokens long, not 9",
        ),
        (
            '{"arrival": 0, "prompt_tokens": -1, "output_tokens": 1}\n',
            "line 1: field 'prompt_tokens': Input should be greater than or equal to 0",
        ),
        (
            '{"arrival": 0, "prompt_tokens": 1, "output_tokens": 1, "lora": "x"}\n',
            "line 1: field 'lora': unknown field",
        ),
        ('{"arrival": 0, "prompt_tokens": 1, "output_tokens": 1\n', "line 1: invalid JSON"),
        ('{"arrival": "soon", "prompt_tokens": 1, "output_tokens": 1}\n', "line 1: field 'arrival'"),
        ("just: a mapping\n", "expected JSON lines or a list of requests"),
        (
            "- {arrival: 0, prompt_tokens: 1, output_tokens: 1}\n- {arrival: 1}\n",
            "t.jsonl: request 1: field 'output_tokens'",
        ),
        (
            '{"arrival": 0, "prompt_tokens": 1, "output_tokens": 1, "handoff_ms": -2}\n',
            "line 1: field 'handoff_ms': Input should be greater than or equal to 0",
        ),
    ],
)
def test_a_broken_trace_is_one_line_naming_the_request_and_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_trace(text, "t.jsonl")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_request_carries_the_routers_handoff_in_seconds() -> None:
    text = (
        '{"arrival": 0, "prompt_tokens": 4, "output_tokens": 1, "handoff_ms": 2.5}\n'
        '{"arrival": 1, "prompt_tokens": 4, "output_tokens": 1}\n'
    )
    a, b = parse_trace(text, "t.jsonl", disaggregated=True).requests
    assert a.handoff == pytest.approx(0.0025)
    assert b.handoff is None  # the fleet's router.handoff_ms


def test_a_handoff_needs_a_disaggregated_fleet() -> None:
    text = '{"arrival": 0, "prompt_tokens": 4, "output_tokens": 1}\n{"arrival": 1, "prompt_tokens": 4, "output_tokens": 1, "handoff_ms": 3}\n'
    with pytest.raises(ConfigError) as err:
        parse_trace(text, "t.jsonl", disaggregated=False)
    assert str(err.value) == (
        "t.jsonl: line 2: field 'handoff_ms': a hand-off needs a disaggregated fleet (prefill and decode groups)"
    )
