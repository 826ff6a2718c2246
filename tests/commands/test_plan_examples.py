"""The capacity-planning example of README.md runs as written (shorter)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmsim.cli import main

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples" / "fleet"


def test_the_readme_fleet_example_runs(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["plan", "--config", str(EXAMPLES / "models.yml"), "--fleet", str(EXAMPLES / "fleet.yml")]
    shape = ["--rate", "40", "--duration", "5", "--prompt-tokens", "1000", "--output-tokens", "200"]
    assert main([*args, *shape, "--json", str(out)]) == 0
    body = json.loads(out.read_text())
    assert [r["name"] for r in body["summary"]["replicas"]] == [
        "h100/0",
        "h100/1",
        "h100/2",
        "h100/3",
        "a100/0",
        "a100/1",
    ]
    assert main([*args, *shape, "--compare", "round-robin,least-requests,weighted"]) == 0


def test_the_example_trace_runs_where_its_adapter_is_served(tmp_path: Path) -> None:
    # The trace's second request names the LoRA adapter sql-lora: every replica must serve it (an
    # adapter belongs to one model, so these are replicas of the H100 model only).
    models = tmp_path / "models.yml"
    lora = "    lora: {max_loras: 1, adapters: [{name: sql-lora, path: /adapters/sql}]}\n"
    text = (EXAMPLES / "models.yml").read_text()
    models.write_text(text.replace("    context_length: 32768\n", "    context_length: 32768\n" + lora, 1))
    out = tmp_path / "out.json"
    args = ["plan", "--config", str(models), "--model", "llama-3.1-8b-h100", "--replicas", "4"]
    assert main([*args, "--workload", str(EXAMPLES / "trace.jsonl"), "--json", str(out)]) == 0
    s = json.loads(out.read_text())["summary"]
    assert (s["num_requests"], s["num_finished"], s["num_aborted"]) == (5, 4, 1)


def test_the_example_trace_names_an_adapter_the_example_models_do_not_serve(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--config", str(EXAMPLES / "models.yml"), "--fleet", str(EXAMPLES / "fleet.yml")]
    assert main([*args, "--workload", str(EXAMPLES / "trace.jsonl")]) == 2
    assert "line 2: field 'adapter': unknown LoRA adapter 'sql-lora'" in capsys.readouterr().err


def test_the_readme_prefix_routing_example_shows_what_prefix_affinity_buys(tmp_path: Path) -> None:
    # README's example, a quarter as long: 300 system prompts of 4,000 tokens, more than one
    # replica caches. Spread by load, each replica's cache churns; sent where they are cached, most hit.
    out = tmp_path / "out.json"
    args = ["plan", "--config", str(EXAMPLES / "models.yml"), "--fleet", str(EXAMPLES / "fleet.yml")]
    shape = ["--rate", "40", "--duration", "30", "--prompt-tokens", "200", "--output-tokens", "200"]
    prefixes = ["--system-prompt-tokens", "4000", "--system-prompts", "300"]
    compare = ["--compare", "least-requests,prefix-affinity"]
    assert main([*args, *shape, *prefixes, *compare, "--json", str(out)]) == 0
    by_router = {c["router"]: c["summary"] for c in json.loads(out.read_text())["compare"]}
    spread, affine = by_router["least-requests"], by_router["prefix-affinity"]
    assert affine["prefix_hit_rate"] > 2 * spread["prefix_hit_rate"] > 0
    assert affine["ttft"]["p50"] < spread["ttft"]["p50"] / 3


def test_the_disaggregated_example_runs_beside_its_aggregated_twin(tmp_path: Path) -> None:
    # docs/planning.md's P/D example, shorter: 3 prefill + 5 decode H100s against the same 8 serving
    # whole requests. Without long prefills in their batches, the decode replicas' ITL tail is flat.
    out = tmp_path / "out.json"
    args = ["plan", "--config", str(EXAMPLES / "pd-models.yml"), "--fleet", str(EXAMPLES / "pd-fleet.yml")]
    shape = ["--rate", "30", "--duration", "10", "--prompt-tokens", "3000", "--output-tokens", "300"]
    assert main([*args, *shape, "--compare", "least-requests", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["compare"]
    assert [(r["router"], r["disaggregated"]) for r in rows] == [("least-requests", True), ("least-requests", False)]
    pd, aggregated = (r["summary"] for r in rows)
    assert pd["num_finished"] == aggregated["num_finished"] == pd["num_requests"]
    assert pd["itl"]["p99"] < aggregated["itl"]["p99"]
    assert main([*args, *shape]) == 0


def test_the_data_parallel_example_compares_routing_by_replica_and_by_rank(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["plan", "--config", str(EXAMPLES / "pd-models.yml"), "--fleet", str(EXAMPLES / "dp-fleet.yml")]
    shape = ["--rate", "40", "--duration", "5", "--prompt-tokens", "1000", "--output-tokens", "200"]
    assert main([*args, *shape, "--compare", "round-robin,least-requests", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["compare"]
    assert [(r["router"], r["dp_aware"]) for r in rows] == [
        ("round-robin", False),
        ("round-robin", True),
        ("least-requests", False),
        ("least-requests", True),
    ]
    assert all(len(r["summary"]["replicas"]) == 8 for r in rows)


def test_a_data_parallel_model_alone_plans_its_ranks(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = ["plan", "--config", str(EXAMPLES / "pd-models.yml"), "--model", "llama-3.1-8b-dp4"]
    shape = ["--rate", "20", "--duration", "2", "--prompt-tokens", "500", "--output-tokens", "50"]
    assert main([*args, *shape, "--json", str(out)]) == 0
    replicas = json.loads(out.read_text())["summary"]["replicas"]
    assert [r["name"] for r in replicas] == [f"llama-3.1-8b-dp4/0/{r}" for r in range(4)]
    # vLLM's balancer spreads them: every rank serves some.
    assert all(r["num_requests"] > 0 for r in replicas)


def test_the_live_pd_example_compares_p_d_with_the_same_gpus_aggregated(capsys: pytest.CaptureFixture[str]) -> None:
    # docs/pd.md's --compare command (shorter): one row P/D, one the same four GPUs aggregated.
    args = ["plan", "--config", str(EXAMPLES / "pd-live-models.yml"), "--fleet", str(EXAMPLES / "pd-live-fleet.yml")]
    shape = ["--rate", "8", "--duration", "5", "--prompt-tokens", "512", "--output-tokens", "16", "--seed", "3"]
    assert main([*args, *shape, "--compare", "round-robin"]) == 0
    rows = [line.split()[:2] for line in capsys.readouterr().out.splitlines() if line.startswith("round-robin")]
    assert rows == [["round-robin", "P/D"], ["round-robin", "aggregated"]]
