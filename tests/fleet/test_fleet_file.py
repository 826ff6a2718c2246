"""The fleet file: models from models.yml, router settings, one-line errors naming file, entry, field."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmsim.config import load_models_config
from llmsim.config.loader import EMBEDDED_MODELS
from llmsim.errors import ConfigError
from llmsim.fleet import load_fleet
from llmsim.runtime import scheduler_params

MODELS = """
models:
  - {name: h100, engine: scheduler, profile: llama-3.1-8b, hardware: h100-80gb, context_length: 8192}
  - {name: a100, engine: scheduler, profile: llama-3.1-8b, hardware: a100-80gb, context_length: 8192}
  - {name: steady, engine: fixed, latency: {itl_ms: 10}}
"""


def load(tmp_path: Path, text: str, models: str = MODELS) -> object:
    (tmp_path / "models.yml").write_text(models)
    (tmp_path / "fleet.yml").write_text(text)
    config = load_models_config(tmp_path / "models.yml")
    return load_fleet(tmp_path / "fleet.yml", config, str(tmp_path / "models.yml"))


def test_a_heterogeneous_fleet(tmp_path: Path) -> None:
    fleet = load(
        tmp_path,
        """
version: 1
router: {policy: weighted, scrape_interval_ms: 25, weights: {queue: 1, kv_cache: 1, prefix: 5}, seed: 3}
replicas:
  - {model: h100, count: 4}
  - {model: a100, count: 2, name: old}
""",
    )
    from llmsim.fleet import FleetSpec

    assert isinstance(fleet, FleetSpec)
    config = load_models_config(tmp_path / "models.yml")
    assert [(g.name, g.model, g.count) for g in fleet.groups] == [("h100", "h100", 4), ("old", "a100", 2)]
    assert fleet.groups[1].params == scheduler_params(config, "a100", str(tmp_path / "models.yml"))
    assert fleet.router.policy == "weighted"
    assert fleet.router.scrape_interval == 0.025
    assert (fleet.router.weights.queue, fleet.router.weights.kv_cache, fleet.router.weights.prefix) == (1, 1, 5)
    assert fleet.router.seed == 3
    assert fleet.replica_names() == ["h100/0", "h100/1", "h100/2", "h100/3", "old/0", "old/1"]


def test_defaults_and_the_embedded_models(tmp_path: Path) -> None:
    (tmp_path / "fleet.yml").write_text("replicas: [{model: llama-3.1-8b}]\n")
    fleet = load_fleet(tmp_path / "fleet.yml", load_models_config(), EMBEDDED_MODELS)
    assert fleet.num_replicas == 1
    assert (fleet.router.policy, fleet.router.scrape_interval) == ("least-requests", 0.05)
    assert fleet.router.handoff == 0.0  # the decode leg is sent the instant the prefill leg ends
    # The inference extension's default profile weights.
    assert (fleet.router.weights.queue, fleet.router.weights.kv_cache, fleet.router.weights.prefix) == (2, 2, 3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("replicas: [{model: nope}]", "fleet.yml: replicas[0] (model 'nope'): field 'model': no model 'nope' in"),
        (
            "replicas: [{model: steady}]",
            "replicas[0] (model 'steady'): field 'model': model 'steady' uses engine 'fixed'",
        ),
        (
            "replicas: [{model: h100, count: 0}]",
            "replicas[0] (model 'h100'): field 'count': Input should be greater than or equal to 1",
        ),
        ("replicas: [{model: h100, colour: red}]", "replicas[0] (model 'h100'): field 'colour': unknown field"),
        (
            "replicas: [{model: h100}, {model: h100}]",
            "replicas[1] (model 'h100'): field 'name': two replica groups are named 'h100'",
        ),
        (
            "router: {policy: fastest}\nreplicas: [{model: h100}]",
            "fleet.yml: router: field 'policy': Input should be 'round-robin'",
        ),
        (
            "router: {policy: random, weights: {queue: 1}}\nreplicas: [{model: h100}]",
            "fleet.yml: router: field 'weights': apply to policy 'weighted' only, not 'random'",
        ),
        (
            "router: {scrape_interval_ms: -5}\nreplicas: [{model: h100}]",
            "router: field 'scrape_interval_ms': Input should be greater",
        ),
        ("replicas: []", "fleet.yml: field 'replicas': expected a non-empty list"),
        ("version: 2\nreplicas: [{model: h100}]", "field 'version': Input should be 1"),
        ("- just a list", "expected a mapping with a 'replicas' list"),
        ("replicas: [{model: h100]", "invalid YAML"),
    ],
)
def test_a_broken_fleet_file_is_one_line_naming_file_entry_and_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, text)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_replica_too_small_for_its_context_names_the_models_file(tmp_path: Path) -> None:
    models = "models:\n  - {name: tiny, engine: scheduler, profile: llama-3.1-8b, hardware: l4-24gb, context_length: 131072}\n"
    with pytest.raises(ConfigError, match=r"models.yml: models\[0\] \(name 'tiny'\): field 'kv_cache'"):
        load(tmp_path, "replicas: [{model: tiny}]", models)


PD_MODELS = """
models:
  - {name: plain, engine: scheduler, profile: llama-3.1-8b, hardware: h100-80gb, context_length: 8192}
  - name: prefill
    engine: scheduler
    profile: llama-3.1-8b
    hardware: h100-80gb
    context_length: 8192
    kv_transfer: {kv_role: kv_producer, abort_request_timeout_s: 30}
  - name: decode
    engine: scheduler
    profile: llama-3.1-8b
    hardware: h100-80gb
    context_length: 8192
    kv_transfer: {kv_role: kv_consumer, bandwidth_gbps: 25, latency_ms: 2}
  - name: both
    engine: scheduler
    profile: llama-3.1-8b
    hardware: h100-80gb
    context_length: 8192
    kv_transfer: {kv_role: kv_both}
  - {name: dp, engine: scheduler, profile: llama-3.1-8b, hardware: h100-80gb, context_length: 8192,
     data_parallel: {size: 4}}
  - {name: dp-ext, engine: scheduler, profile: llama-3.1-8b, hardware: h100-80gb, context_length: 8192,
     data_parallel: {size: 2, load_balancing: external}}
  - {name: dp-rank, engine: scheduler, profile: llama-3.1-8b, hardware: h100-80gb, context_length: 8192,
     data_parallel: {size: 4, rank: 1}}
"""


def test_a_disaggregated_fleet_with_its_two_picks(tmp_path: Path) -> None:
    from llmsim.fleet import FleetSpec

    fleet = load(
        tmp_path,
        """
router: {policy: random, prefill_policy: least-requests, decode_policy: least-kv, handoff_ms: 7.5}
replicas:
  - {model: prefill, count: 2}
  - {model: decode, count: 3}
""",
        PD_MODELS,
    )
    assert isinstance(fleet, FleetSpec)
    assert fleet.disaggregated
    assert [(g.kv_role, g.count) for g in fleet.groups] == [("kv_producer", 2), ("kv_consumer", 3)]
    assert (fleet.router.prefill, fleet.router.decode) == ("least-requests", "least-kv")
    assert fleet.router.handoff == pytest.approx(0.0075)  # ms in the file, seconds in the spec
    decode = fleet.groups[1]
    assert decode.kv_link is not None
    # models.yml's GB/s and ms.
    assert (decode.kv_link.bandwidth_bytes_per_s, decode.kv_link.latency_s) == (25e9, 0.002)
    assert fleet.groups[0].kv_abort_timeout == 30
    # The aggregated fleet of the same GPUs: roles dropped, one policy.
    aggregated = fleet.aggregated()
    assert not aggregated.disaggregated
    assert aggregated.num_gpus == 5


def test_data_parallel_models_make_ranks(tmp_path: Path) -> None:
    from llmsim.fleet import FleetSpec

    fleet = load(
        tmp_path,
        "router: {dp_aware: true}\nreplicas: [{model: dp, count: 2}, {model: dp-ext}, {model: dp-rank}]\n",
        PD_MODELS,
    )
    assert isinstance(fleet, FleetSpec)
    assert fleet.router.dp_aware
    assert [(g.data_parallel, g.external_lb) for g in fleet.groups] == [(4, False), (2, True), (1, False)]
    assert (fleet.num_replicas, fleet.num_gpus) == (4, 11)
    assert fleet.gpu_names()[:5] == ["dp/0/0", "dp/0/1", "dp/0/2", "dp/0/3", "dp/1/0"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "replicas: [{model: prefill}]\n",
            "fleet.yml: replicas: field 'model': a disaggregated fleet needs kv_producer (prefill) and kv_consumer",
        ),
        (
            "replicas: [{model: prefill}, {model: decode}, {model: plain}]\n",
            "a disaggregated fleet needs kv_producer (prefill) and kv_consumer (decode) replicas, and only those",
        ),
        ("replicas: [{model: both}]\n", "kv_both replicas are not planned yet"),
        (
            "router: {decode_policy: least-kv}\nreplicas: [{model: plain}]\n",
            "router: field 'decode_policy': applies to a disaggregated fleet (models with kv_transfer) only",
        ),
        (
            "router: {handoff_ms: 5}\nreplicas: [{model: plain}]\n",
            "router: field 'handoff_ms': applies to a disaggregated fleet (models with kv_transfer) only",
        ),
        (
            "router: {handoff_ms: -1}\nreplicas: [{model: prefill}, {model: decode}]\n",
            "router: field 'handoff_ms': Input should be greater than or equal to 0",
        ),
        (
            "router: {handoff_ms: .inf}\nreplicas: [{model: prefill}, {model: decode}]\n",
            "router: field 'handoff_ms': Input should be a finite number",
        ),
    ],
)
def test_bad_disaggregated_fleets(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text, PD_MODELS)
    assert message in str(info.value)
