"""The fleet file: which replicas, how many, behind which router (YAML, checked like models.yml).

    version: 1
    router:
      policy: weighted            # round-robin | random | least-requests | least-kv | prefix-affinity | weighted
      scrape_interval_ms: 50      # how old the router's view of each replica may be; 0: live
      weights: {queue: 2, kv_cache: 2, prefix: 3}   # weighted only (the inference extension's default)
      seed: 0
      dp_aware: false             # true: the router sees data-parallel ranks and pins each request to one
      prefill_policy: least-requests   # disaggregated fleets: the prefill pick and the decode pick
      decode_policy: least-kv          # (default: policy)
      handoff_ms: 0               # disaggregated fleets: a prefill leg's last token to its decode
                                  # leg's arrival at the decode replica (the proxy's read and send)
    replicas:
      - {model: llama-3.1-8b, count: 4}             # a model of --config's models.yml (or the embedded one)
      - {model: llama-a100, count: 2, name: a100}   # name: the group's label (default: the model)

A model with ``data_parallel.size: N`` makes each replica N simulated GPUs (its ranks). Models with
``kv_transfer.kv_role`` kv_producer and kv_consumer make a disaggregated fleet: every request is
prefilled on a producer, its KV pulled over the link into a consumer, and decoded there.

A broken file is one line naming the file, the entry and the field, as for models.yml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from llmsim.config import ModelsConfig
from llmsim.engine.scheduler.kv_link import KVLinkSpec
from llmsim.errors import ConfigError, entry_label, from_validation_error, parse_yaml
from llmsim.fleet.spec import FleetSpec, ReplicaGroup, RouterPolicy, RouterSpec, ScorerWeights
from llmsim.runtime import scheduler_params

NonNegative = Annotated[float, Field(ge=0)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WeightsSection(_Section):
    queue: NonNegative = 2.0
    kv_cache: NonNegative = 2.0
    prefix: NonNegative = 3.0


class RouterSection(_Section):
    policy: RouterPolicy = "least-requests"
    # The endpoint picker's default metrics refresh (--refresh-metrics-interval).
    scrape_interval_ms: NonNegative = 50.0
    weights: WeightsSection | None = None
    seed: int = 0
    # The router sees data-parallel ranks and pins them (vllm-router --intra-node-data-parallel-size).
    dp_aware: bool = False
    # A disaggregated fleet's picks (vllm-router's --prefill-policy / --decode-policy); default: policy.
    prefill_policy: RouterPolicy | None = None
    decode_policy: RouterPolicy | None = None
    # A disaggregated fleet's time from a prefill leg's last token to its decode leg's arrival.
    handoff_ms: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0


class ReplicaEntry(_Section):
    model: Annotated[str, Field(min_length=1)]
    count: Annotated[int, Field(ge=1)] = 1
    name: Annotated[str, Field(min_length=1)] | None = None


class FleetFile(_Section):
    version: Literal[1] = 1
    router: RouterSection = RouterSection()
    replicas: Annotated[list[ReplicaEntry], Field(min_length=1)]


def parse_fleet(text: str, file: str, models: ModelsConfig, models_file: str) -> FleetSpec:
    """A fleet from the YAML ``text`` of ``file``, its models from ``models`` (read from ``models_file``).

    Raises ConfigError.
    """
    raw = parse_yaml(text, file)
    if not isinstance(raw, dict):
        raise ConfigError(file, "expected a mapping with a 'replicas' list at the top level")
    try:
        parsed = FleetFile.model_validate(raw)
    except ValidationError as exc:
        raise from_validation_error(file, exc, FleetFile, raw, {"replicas": "model", "router": None}) from None
    router = parsed.router
    policies = {router.policy, router.prefill_policy or router.policy, router.decode_policy or router.policy}
    if router.weights is not None and "weighted" not in policies:
        raise ConfigError(
            file, f"apply to policy 'weighted' only, not '{router.policy}'", entry="router", field="weights"
        )
    if (router.prefill_policy or router.decode_policy or router.handoff_ms) and not any(
        (models.model(e.model).kv_transfer if e.model in {m.name for m in models.models} else None)
        for e in parsed.replicas
    ):
        field = "prefill_policy" if router.prefill_policy else "decode_policy" if router.decode_policy else "handoff_ms"
        raise ConfigError(
            file, "applies to a disaggregated fleet (models with kv_transfer) only", entry="router", field=field
        )
    known = [m.name for m in models.models]
    groups: list[ReplicaGroup] = []
    for i, entry in enumerate(parsed.replicas):
        label = entry_label("replicas", i, "model", entry.model)
        if entry.model not in known:
            raise ConfigError(
                file,
                f"no model '{entry.model}' in {models_file} (models: {', '.join(known)})",
                entry=label,
                field="model",
            )
        engine = models.model(entry.model).engine
        if engine != "scheduler":
            raise ConfigError(
                file,
                f"model '{entry.model}' uses engine '{engine}'; a fleet needs 'scheduler'",
                entry=label,
                field="model",
            )
        name = entry.name or entry.model
        if any(g.name == name for g in groups):
            raise ConfigError(
                file, f"two replica groups are named '{name}' (give one a distinct 'name')", entry=label, field="name"
            )
        dp = models.model(entry.model).data_parallel
        # A replica serving one rank (data_parallel.rank) is one GPU, as far as a router can tell.
        ranks = dp.size if dp.rank is None else 1
        params = scheduler_params(models, entry.model, models_file)
        kv = models.model(entry.model).kv_transfer
        groups.append(
            ReplicaGroup(
                name,
                entry.model,
                params,
                entry.count,
                ranks,
                dp.load_balancing == "external",
                kv_role=None if kv is None else kv.kv_role,
                kv_link=None if kv is None else KVLinkSpec.from_config(kv.bandwidth_gbps, kv.latency_ms),
                kv_abort_timeout=480.0 if kv is None else kv.abort_request_timeout_s,
            )
        )
    weights = router.weights or WeightsSection()
    spec = RouterSpec(
        policy=router.policy,
        scrape_interval=router.scrape_interval_ms / 1000.0,
        weights=ScorerWeights(weights.queue, weights.kv_cache, weights.prefix),
        seed=router.seed,
        dp_aware=router.dp_aware,
        prefill_policy=router.prefill_policy,
        decode_policy=router.decode_policy,
        handoff=router.handoff_ms / 1000.0,
    )
    try:
        return FleetSpec(tuple(groups), spec)
    except ValueError as exc:
        # The roles of the groups together (kv_transfer.kv_role of their models).
        raise ConfigError(file, str(exc), entry="replicas", field="model") from None


def load_fleet(path: str | Path, models: ModelsConfig, models_file: str) -> FleetSpec:
    """Read and check a fleet file. Raises ConfigError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(p), f"cannot read file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(p), f"not UTF-8 text (byte {exc.start})") from None
    return parse_fleet(text, str(p), models, models_file)
