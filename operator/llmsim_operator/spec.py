"""An LLMSimulator's spec, defaulted, re-validated and resolved against the built-in profiles.

The API server enforces the OpenAPI schema, but clusters older than 1.25 ignore the CEL rules
(``x-kubernetes-validations``); :func:`parse_spec` re-checks each of them, plus what only the
operator can know (profile names; whether the weights and one request of the full context fit in
the KV cache, with the simulator's own rule from :mod:`llmsim_capacity`), and raises :class:`InvalidSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import llmsim_capacity
from llmsim_operator import conventions, crd
from llmsim_operator.defaulting import apply_defaults
from llmsim_operator.profiles import Hardware, builtin_hardware, builtin_models
from llmsim_operator.rules import broken_rule

#: Name of the models.yml hardware entry rendered from explicit figures.
CUSTOM_HARDWARE = "custom"


class InvalidSpec(ValueError):
    """A spec the simulator cannot serve; ``str()`` is the message reported in status."""


@dataclass(frozen=True, slots=True)
class SimulatorSpec:
    """One LLMSimulator, ready to render."""

    name: str
    namespace: str
    # The spec with the CRD's defaults applied (camelCase, as stored by the API server).
    spec: dict[str, Any]
    # Hardware entry named in models.yml: a built-in profile, or CUSTOM_HARDWARE.
    hardware_name: str
    # Figures of that entry, merged from the profile and the explicit fields.
    hardware: Hardware
    # True when models.yml must define ``hardware_name`` itself.
    custom_hardware: bool
    # KV-cache capacity, None when the model's size is unknown (fixed/instant engine without one).
    kv_cache_blocks: int | None
    # max_model_len the pods run with: the spec's, else the profile's, else llmsim's default.
    context_length: int
    # Why llmsim would refuse to start this model (weights or one full-length request do not fit);
    # None when it fits. Fatal for the scheduler engine, which simulates the cache.
    capacity_problem: str | None

    @property
    def engine(self) -> str:
        return str(self.spec["engine"])

    @property
    def model(self) -> dict[str, Any]:
        model: dict[str, Any] = self.spec["model"]
        return model

    @property
    def roles(self) -> tuple[str, ...]:
        """Each role's own Deployment: (prefill, decode), or (AGGREGATED,)."""
        return conventions.roles(self.spec)

    @property
    def data_parallel_size(self) -> int:
        return int(self.section("dataParallel").get("size", 1))

    @property
    def rank_ports(self) -> int:
        """Ports the API listens on: one per rank under external load balancing, else one."""
        external = self.section("dataParallel").get("loadBalancing") == "external"
        return self.data_parallel_size if external else 1

    def section(self, key: str) -> dict[str, Any]:
        """A defaulted sub-object of the spec ({} when absent and without a default)."""
        value: dict[str, Any] = self.spec.get(key) or {}
        return value


def resolve_spec(name: str, namespace: str, spec: Mapping[str, Any]) -> SimulatorSpec:
    """Default, validate and resolve ``spec``, without refusing a model that does not fit (see parse_spec)."""
    if not crd.RULE_NAME.holds({"metadata": {"name": name}}):
        raise InvalidSpec(crd.RULE_NAME.message)
    full: dict[str, Any] = apply_defaults(crd.SPEC_SCHEMA, dict(spec))
    model: dict[str, Any] | None = full.get("model")
    if not isinstance(model, dict) or not model.get("name"):
        raise InvalidSpec("model.name is required")
    if not crd.RULE_ROLE_NAME.holds({"metadata": {"name": name}, "spec": full}):
        raise InvalidSpec(crd.RULE_ROLE_NAME.message)
    _check_rules(full)
    _check_ports(full)
    hardware_name, hardware, custom = _resolve_hardware(full["hardware"])
    blocks, context_length, problem = _capacity(full, hardware, hardware_name)
    return SimulatorSpec(
        name=name,
        namespace=namespace,
        spec=full,
        hardware_name=hardware_name,
        hardware=hardware,
        custom_hardware=custom,
        kv_cache_blocks=blocks,
        context_length=context_length,
        capacity_problem=problem,
    )


def parse_spec(name: str, namespace: str, spec: Mapping[str, Any]) -> SimulatorSpec:
    """Default, validate and resolve ``spec``. Raises :class:`InvalidSpec`, also for what llmsim would refuse at start."""
    sim = resolve_spec(name, namespace, spec)
    if sim.capacity_problem is not None and sim.engine == "scheduler":
        raise InvalidSpec(sim.capacity_problem)
    return sim


def _check_rules(spec: dict[str, Any]) -> None:
    """The CEL rules of the CRD, in Python, and the profile names only the operator knows."""
    broken = broken_rule(crd.SPEC_SCHEMA, spec, crd.RULES)
    if broken is not None:
        raise InvalidSpec(broken.message)
    model = spec["model"]
    if "profile" in model and model["profile"] not in builtin_models():
        known = ", ".join(sorted(builtin_models()))
        raise InvalidSpec(f"unknown model profile '{model['profile']}' (built-in: {known})")


def _check_ports(spec: dict[str, Any]) -> None:
    """Container ports that would collide in the pod (the second bind would fail at startup)."""
    dp = spec.get("dataParallel") or {}
    ranks = int(dp.get("size", 1))
    api_ports = ranks if dp.get("loadBalancing") == "external" else 1
    used: dict[int, str] = {conventions.CONTAINER_PORT + r: "the API" for r in range(api_ports)}
    wanted: list[tuple[int, str]] = []
    events = spec.get("kvEvents") or {}
    if events.get("enabled"):
        # One PUB socket per data-parallel rank, on the port + the rank.
        first = int(events.get("port", conventions.KV_EVENTS_PORT))
        wanted += [(first + r, "kvEvents.port") for r in range(ranks)]
    if spec.get("disaggregation") is not None:
        first = int(spec["disaggregation"].get("sideChannelPort", conventions.SIDE_CHANNEL_PORT))
        if first + ranks - 1 > 65535:
            raise InvalidSpec(f"disaggregation.sideChannelPort + dataParallel.size - 1 exceeds 65535 ({first})")
        wanted += [(first + r, "disaggregation.sideChannelPort") for r in range(ranks)]
    for port, owner in wanted:
        if port in used:
            raise InvalidSpec(f"{owner} {port} collides with {used[port]}'s port {port} in the pod")
        used[port] = owner
    service_port = int((spec.get("service") or {}).get("port", conventions.CONTAINER_PORT))
    if service_port + api_ports - 1 > 65535:
        raise InvalidSpec(f"service.port + dataParallel.size - 1 exceeds 65535 ({service_port})")


def _resolve_hardware(hw: dict[str, Any]) -> tuple[str, Hardware, bool]:
    base: Hardware | None = None
    if "profile" in hw:
        base = builtin_hardware().get(hw["profile"])
        if base is None:
            known = ", ".join(sorted(builtin_hardware()))
            raise InvalidSpec(f"unknown hardware profile '{hw['profile']}' (built-in: {known})")
    explicit = {k: hw[k] for k in ("hbmGiB", "memoryBandwidthGBps", "peakTFLOPS") if k in hw}
    if base is not None and not explicit:
        return str(hw["profile"]), base, False
    merged = Hardware(
        hbm_gib=float(explicit.get("hbmGiB", base.hbm_gib if base else 0)),
        memory_bandwidth_gbps=float(explicit.get("memoryBandwidthGBps", base.memory_bandwidth_gbps if base else 0)),
        peak_tflops=float(explicit.get("peakTFLOPS", base.peak_tflops if base else 0)),
    )
    return CUSTOM_HARDWARE, merged, True


def _capacity(spec: dict[str, Any], hw: Hardware, hardware_name: str) -> tuple[int | None, int, str | None]:
    """(KV-cache blocks, context length, why the model cannot run) with llmsim's own rules (llmsim_capacity).

    Blocks are None when the model's size is unknown (fixed/instant engine without one); 0 when the
    weights leave no room.
    """
    model = spec["model"]
    profile = builtin_models().get(model.get("profile", ""))
    context_length = int(
        model.get("contextLength")
        or (profile.context_length if profile else None)
        or llmsim_capacity.DEFAULT_CONTEXT_LENGTH
    )
    params = model.get("parametersBillions", profile.parameters_billions if profile else None)
    bytes_per_param = model.get("bytesPerParameter", profile.bytes_per_parameter if profile else None)
    kv_bytes = model.get("kvBytesPerToken", profile.kv_bytes_per_token if profile else None)
    if params is None or kv_bytes is None:
        return None, context_length, None
    sched = spec["scheduler"]
    block_size = int(sched["blockSize"])
    blocks = 0
    try:
        blocks = llmsim_capacity.num_kv_blocks(
            hbm_bytes=hw.hbm_gib * llmsim_capacity.GIB,
            gpu_memory_utilization=float(sched["gpuMemoryUtilization"]),
            weight_bytes=float(params) * 1e9 * float(bytes_per_param or llmsim_capacity.DEFAULT_BYTES_PER_PARAMETER),
            kv_bytes_per_token=int(kv_bytes),
            block_size=block_size,
        )
        llmsim_capacity.check_context_fits(num_blocks=blocks, block_size=block_size, context_length=context_length)
    except llmsim_capacity.CapacityError as exc:
        return blocks, context_length, f"the model does not fit on {hardware_name}: {exc}"
    return blocks, context_length, None
