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
