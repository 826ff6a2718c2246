"""vLLM's command line on ``llmsim serve``: ``vllm serve``'s flags in, a models.yml structure out.

``llmsim serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768 ...`` reads vLLM's flags, with
vLLM's names and meanings, and builds the one-model models.yml mapping the config loader validates:
every check of a file applies, and an error names the flag it came from. docs/vllm-cli.md maps each
flag. Flags that only change a real GPU's internals are accepted with one warning naming them; a flag
whose meaning llmsim does not simulate (pipeline parallelism, several ranks) is refused, not ignored.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import llmsim_capacity
from llmsim.config import ModelsConfig
from llmsim.config.loader import builtin_model_profiles, read_data_file, validate_models_config
from llmsim.engine.scheduler.params import kv_bytes_per_gpu, pipeline_stage_layers
from llmsim.errors import ConfigError, parse_yaml

__all__ = [
    "COMMAND_LINE",
    "DEFAULT_HARDWARE",
    "VllmArgError",
    "VllmServe",
    "add_arguments",
    "build",
    "config_error",
    "flag_for_field",
    "known_model_ids",
    "models_mapping",
    "normalize_argv",
    "requested",
]

#: How errors name the configuration built from the flags.
COMMAND_LINE = "command line"
DEFAULT_HARDWARE = "h100-80gb"

#: Weight bytes per parameter of each --dtype (auto: the checkpoint's, 16-bit for every profile).
DTYPE_BYTES = {"auto": 2.0, "half": 2.0, "float16": 2.0, "bfloat16": 2.0, "float": 4.0, "float32": 4.0}
#: Weight bytes per parameter of each --quantization llmsim simulates (awq/gptq: 4-bit weights).
QUANTIZATION_BYTES = {"fp8": 1.0, "awq": 0.5, "awq_marlin": 0.5, "gptq": 0.5, "gptq_marlin": 0.5}
#: KV-cache bytes per element of each --kv-cache-dtype (auto: the model's dtype).
KV_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1}
#: Bytes per KV element the profiles' bytes_per_token are written at (fp16/bf16).
PROFILE_KV_BYTES = 2

#: Flags that change only what a real GPU does inside (kernels, logging, loading): accepted, one warning.
#: On/off flags get vLLM's --no- form as well (vLLM's BooleanOptionalAction for boolean fields).
IGNORED_SWITCHES = (
    "enforce-eager",
    "disable-log-requests",
    "enable-log-requests",
    "disable-log-stats",
    "trust-remote-code",
    "disable-custom-all-reduce",
    "disable-frontend-multiprocessing",
    "disable-uvicorn-access-log",
    "disable-fastapi-docs",
    "enable-request-id-headers",
    "enable-server-load-tracking",
    "enable-sleep-mode",
    "use-tqdm-on-load",
    # The hybrid KV-cache manager serves models mixing attention kinds (sliding window, Mamba); every
    # profile is full attention, where vLLM's one manager and its hybrid one allocate alike.
    "disable-hybrid-kv-cache-manager",
)
IGNORED_OPTIONS = (
    "swap-space",
    "cpu-offload-gb",
    "max-num-partial-prefills",
    "max-long-partial-prefills",
    "compilation-config",
    "distributed-executor-backend",
    "tokenizer",
    "tokenizer-mode",
    "revision",
    "tokenizer-revision",
    "code-revision",
    "download-dir",
    "load-format",
    "chat-template",
    "chat-template-content-format",
    "generation-config",
    "hf-overrides",
    "max-seq-len-to-capture",
    "cuda-graph-sizes",
    "uvicorn-log-level",
    "max-log-len",
    "root-path",
    "allowed-origins",
    "allowed-methods",
    "allowed-headers",
    "reasoning-parser",
    "worker-cls",
    "otlp-traces-endpoint",
    "disable-access-log-for-endpoints",
    "max-lora-rank",
    "tool-call-parser",
    "kv-transfer-config",
)
#: Switches that are accepted because llmsim does what they ask anyway (they still get the warning).
ACCEPTED_SWITCHES = ("enable-auto-tool-choice",)


class VllmArgError(Exception):
    """A vLLM flag llmsim cannot serve as given; ``str()`` is the one-line message, naming the flag."""

    def __init__(self, flag: str | None, message: str) -> None:
        self.flag = flag
        super().__init__(f"{flag}: {message}" if flag else message)


@dataclass(frozen=True)
class VllmServe:
    """What vLLM's flags asked for: the config to serve and what was accepted without effect."""

    config: ModelsConfig
    #: The flags accepted without changing the simulation, as given (for the one warning).
    ignored: tuple[str, ...]
    #: --kv-transfer-config, parsed and kept (NixlConnector's becomes the model's kv_transfer).
    kv_transfer_config: dict[str, Any] | None


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """vLLM's ``FlexibleArgumentParser``: ``--max_model_len`` is ``--max-model-len``."""
    out = []
    for arg in argv:
        if arg.startswith("--") and "_" in arg.split("=", 1)[0]:
            key, sep, value = arg.partition("=")
            arg = key.replace("_", "-") + sep + value
        out.append(arg)
    return out


#: --max-model-len auto (or -1): the longest context the KV cache holds, at most the model's.
AUTO = -1


def human_int(text: str) -> int:
    """vLLM's ``human_readable_int``: ``32768``, ``32k`` (x1000), ``32K`` (x1024), ``1m``/``1M``."""
    match = re.fullmatch(r"(-?\d+(?:\.\d+)?)([kKmMgG]?)", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid integer '{text}' (e.g. 32768, 32k, 32K)")
    number, unit = match.groups()
    decimal = {"k": 10**3, "m": 10**6, "g": 10**9}
    binary = {"K": 2**10, "M": 2**20, "G": 2**30}
    scale = decimal.get(unit) or binary.get(unit) or 1
    value = float(number) * scale
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number of tokens")
    return int(value)


def _max_model_len(text: str) -> int:
    return AUTO if text.strip().lower() == "auto" else human_int(text)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"invalid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def _lora_module(text: str) -> dict[str, Any]:
    """One --lora-modules item: ``name=path`` or ``{"name": ..., "path": ..., "base_model_name": ...}``."""
    if text.lstrip().startswith("{"):
        value = _json_object(text)
        if not isinstance(value.get("name"), str) or not isinstance(value.get("path"), str):
            raise argparse.ArgumentTypeError(f"'{text}': the JSON form needs string 'name' and 'path'")
        unknown = set(value) - {"name", "path", "base_model_name"}
        if unknown:
            raise argparse.ArgumentTypeError(f"'{text}': unknown keys {', '.join(sorted(unknown))}")
        return value
    name, sep, path = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"invalid LoRA module '{text}': expected name=path or a JSON object")
    return {"name": name, "path": path}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """vLLM's flags, on ``llmsim serve``'s parser (docs/vllm-cli.md)."""
    g = parser.add_argument_group("vLLM's command line (docs/vllm-cli.md)")
    g.add_argument("model_tag", nargs="?", metavar="MODEL", help="Hugging Face model id (vLLM's form)")
    g.add_argument("--model", dest="vllm_model", help="the model, as the positional MODEL")
    g.add_argument(
        "--hardware",
        default=None,
        help=f"simulated GPU (hardware.yml; env LLMSIM_HARDWARE; default {DEFAULT_HARDWARE})",
    )
    g.add_argument("--served-model-name", nargs="+", help="name requests give in 'model' (default: MODEL)")
    g.add_argument(
        "--max-model-len",
        type=_max_model_len,
        help="context length (default: the model's; auto or -1: the longest that fits, at most the model's)",
    )
    g.add_argument("--max-num-seqs", type=int, help="sequences running at once")
    g.add_argument("--max-num-batched-tokens", type=human_int, help="token budget of one step")
    g.add_argument("--gpu-memory-utilization", type=float, help="fraction of GPU memory for weights and KV cache")
    g.add_argument("--block-size", type=int, help="tokens per KV-cache block")
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--enable-prompt-tokens-details", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--enable-lora", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--lora-modules", nargs="+", type=_lora_module, help="name=path or JSON, one or more")
    g.add_argument("--max-loras", type=int)
    g.add_argument("--max-cpu-loras", type=int)
    g.add_argument("--kv-events-config", type=_json_object, help="JSON (vLLM's KVEventsConfig)")
    g.add_argument("--data-parallel-size", "-dp", type=int, help="ranks: independent simulated GPUs")
    g.add_argument("--data-parallel-rank", "-dpn", type=int, help="serve only this rank (external load balancing)")
    g.add_argument(
        "--data-parallel-multi-port-external-lb",
        "-dpm",
        action="store_true",
        default=None,
        help="every rank in this process, rank r on --port + r",
    )
    g.add_argument("--data-parallel-external-lb", "-dpe", action="store_true", default=None)
    g.add_argument("--data-parallel-size-local", "-dpl", type=int)
    g.add_argument("--data-parallel-start-rank", "-dpr", type=int)
    g.add_argument("--data-parallel-hybrid-lb", "-dph", action="store_true", default=None)
    g.add_argument("--tensor-parallel-size", "-tp", type=int)
    g.add_argument("--pipeline-parallel-size", "-pp", type=int)
    g.add_argument("--seed", type=int)
    g.add_argument("--dtype", choices=sorted(DTYPE_BYTES))
    g.add_argument("--quantization", "-q")
    g.add_argument("--kv-cache-dtype", choices=["auto", *sorted(KV_DTYPE_BYTES)])
    for name in (*IGNORED_SWITCHES, *ACCEPTED_SWITCHES):
        g.add_argument(f"--{name}", dest=_ignored_dest(name), action=argparse.BooleanOptionalAction, default=None)
    for name in IGNORED_OPTIONS:
        flags = [f"--{name}", "-O"] if name == "compilation-config" else [f"--{name}"]
        g.add_argument(*flags, dest=_ignored_dest(name), default=None, metavar="VALUE")


def _ignored_dest(name: str) -> str:
    return "vllm_ignored_" + name.replace("-", "_")


#: Every dest of a vLLM flag, to tell whether the vLLM form was used.
_VLLM_DESTS = (
    "vllm_model",
    "hardware",
    "served_model_name",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "block_size",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "async_scheduling",
    "enable_prompt_tokens_details",
    "enable_lora",
    "lora_modules",
    "max_loras",
    "max_cpu_loras",
    "kv_events_config",
    "data_parallel_size",
    "data_parallel_rank",
    "data_parallel_multi_port_external_lb",
    "data_parallel_external_lb",
    "data_parallel_size_local",
    "data_parallel_start_rank",
    "data_parallel_hybrid_lb",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "seed",
    "dtype",
    "quantization",
    "kv_cache_dtype",
)


def requested(args: argparse.Namespace) -> list[str]:
    """The vLLM-form settings given (dest names); empty for ``llmsim serve``'s own form."""
    given = [d for d in ("model_tag", *_VLLM_DESTS) if getattr(args, d, None) is not None]
    given += [d for d in vars(args) if d.startswith("vllm_ignored_") and getattr(args, d) is not None]
    return given


@cache
def _hf_models() -> dict[str, dict[str, Any]]:
    raw: dict[str, dict[str, Any]] = parse_yaml(read_data_file("hf_models.yml"), "<embedded>/hf_models.yml")
    return raw


def known_model_ids() -> list[str]:
    """The model ids the vLLM form serves: Hugging Face ids, then the profiles' own names."""
    return [*_hf_models(), *builtin_model_profiles()]


#: config.json's ``model_type`` (Hugging Face's name of the architecture) -> the profile names of that family.
_MODEL_TYPE_PREFIX = {
    "llama": "llama-",
    "mistral": "mistral-",
    "mixtral": "mixtral-",
    "qwen2": "qwen2",
    "qwen3": "qwen3-",
}
#: config.json's fields a profile's ``architecture`` keeps (the same names).
_ARCHITECTURE_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads")


def _checkpoint_quantization(section: Any) -> str | None:
    """config.json's quantization_config as hf_models.yml names it: FP8 whichever tool wrote it
    (vLLM's ``fp8``, Meta's ``fbgemm_fp8``, llm-compressor's 8-bit float ``compressed-tensors``)."""
    if not isinstance(section, dict):
        return None
    method = section.get("quant_method")
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8"
    if method == "compressed-tensors":
        groups = section.get("config_groups")
        weights = [g.get("weights") or {} for g in groups.values()] if isinstance(groups, dict) else []
        if weights and all(w.get("num_bits") == 8 and w.get("type") == "float" for w in weights):
            return "fp8"
    return str(method)


def _resolve_directory(path: str) -> tuple[str, float | None]:
    """A model directory (KServe's ``--model=/mnt/models``, a download): its config.json's shape, as vLLM reads it.

    vLLM loads whatever checkpoint the directory holds; llmsim serves the one built-in profile whose
    architecture family (``model_type``), shape and published quantization that config.json gives, and
    refuses a directory it cannot name exactly.
    """
    config_path = os.path.join(path, "config.json")
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except FileNotFoundError:
        raise VllmArgError("MODEL", f"'{path}' is a directory without a config.json: no model to serve") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise VllmArgError("MODEL", f"{config_path}: {exc}") from None
    if not isinstance(config, dict):
        raise VllmArgError("MODEL", f"{config_path}: expected a JSON object")
    shape = {key: config.get(key) for key in _ARCHITECTURE_KEYS}
    # Hugging Face's default: no num_key_value_heads is multi-head attention (Llama 2).
    if shape["num_key_value_heads"] is None:
        shape["num_key_value_heads"] = shape["num_attention_heads"]
    quantization = _checkpoint_quantization(config.get("quantization_config"))
    prefix = _MODEL_TYPE_PREFIX.get(str(config.get("model_type")))
    profiles = builtin_model_profiles()
    matches = sorted(
        {
            str(entry["profile"])
            for entry in _hf_models().values()
            if prefix is not None
            and str(entry["profile"]).startswith(prefix)
            and entry.get("quantization") == quantization
            and profiles[str(entry["profile"])].get("architecture") == shape
        }
    )
    if len(matches) != 1:
        found = ", ".join(f"{k} {v}" for k, v in shape.items())
        raise VllmArgError(
            "MODEL",
            f"{config_path} (model_type {config.get('model_type')}, {found}, quantization {quantization}) "
            f"is not one of llmsim's built-in profiles ({', '.join(profiles)})",
        )
    return matches[0], QUANTIZATION_BYTES[quantization] if quantization else None


def _resolve_model(model_id: str) -> tuple[str, float | None]:
    """The built-in profile of a model id, and its checkpoint's weight bytes when published quantized."""
    if os.path.isdir(model_id):
        return _resolve_directory(model_id)
    if model_id in _hf_models():
        entry = _hf_models()[model_id]
        quantization = entry.get("quantization")
        return str(entry["profile"]), QUANTIZATION_BYTES[quantization] if quantization else None
    if model_id in builtin_model_profiles():
        weights = builtin_model_profiles()[model_id].get("weights") or {}
        size = float(weights.get("bytes_per_parameter", PROFILE_KV_BYTES))
        return model_id, size if size < PROFILE_KV_BYTES else None
    known = ", ".join(known_model_ids())
    raise VllmArgError("MODEL", f"unknown model '{model_id}': llmsim simulates only its built-in profiles ({known})")


def _refuse_parallel(args: argparse.Namespace) -> None:
    for dest, flag in (
        ("tensor_parallel_size", "--tensor-parallel-size"),
        ("pipeline_parallel_size", "--pipeline-parallel-size"),
    ):
        size = getattr(args, dest)
        if size is not None and size < 1:
            raise VllmArgError(flag, f"must be >= 1, got {size}")


def _data_parallel(args: argparse.Namespace) -> dict[str, Any] | None:
    """models.yml's data_parallel from vLLM's --data-parallel-* flags (one node: every rank local)."""
    size = args.data_parallel_size if args.data_parallel_size is not None else 1
    if size < 1:
        raise VllmArgError("--data-parallel-size", f"must be >= 1, got {size}")
    if args.data_parallel_hybrid_lb:
        raise VllmArgError(
            "--data-parallel-hybrid-lb",
            "not simulated (ranks over several nodes); run one llmsim server per node with --data-parallel-size "
            "its local ranks, or one per rank with --data-parallel-rank",
        )
    local = args.data_parallel_size_local
    if local is not None and local != size:
        raise VllmArgError(
            "--data-parallel-size-local",
            f"{local}: llmsim runs every rank of --data-parallel-size ({size}) on its one node; "
            "run one server per rank with --data-parallel-rank for a deployment over several nodes",
        )
    start = args.data_parallel_start_rank
    if start is not None and start != 0:
        raise VllmArgError("--data-parallel-start-rank", f"{start}: llmsim runs ranks from 0 on its one node")
    rank = args.data_parallel_rank
    if rank is not None and not 0 <= rank < size:
        raise VllmArgError("--data-parallel-rank", f"{rank}: must be in [0, --data-parallel-size ({size}))")
    multi_port = bool(args.data_parallel_multi_port_external_lb)
    if multi_port and rank is not None:
        raise VllmArgError("--data-parallel-multi-port-external-lb", "serves every rank: give no --data-parallel-rank")
    if multi_port and size < 2:
        raise VllmArgError("--data-parallel-multi-port-external-lb", "needs --data-parallel-size >= 2")
    external = multi_port or rank is not None or bool(args.data_parallel_external_lb)
    if args.data_parallel_external_lb and rank is None and size > 1:
        raise VllmArgError("--data-parallel-external-lb", "needs --data-parallel-rank (the rank this server runs)")
    if size == 1 and rank in (None, 0):
        return None
    section: dict[str, Any] = {"size": size, "load_balancing": "external" if external else "internal"}
    if rank is not None:
        section["rank"] = rank
    return section


def _weight_bytes(args: argparse.Namespace, checkpoint_bytes: float | None) -> float:
    """The flag's quantization, else the checkpoint's, else --dtype (auto: the profile's 16 bits)."""
    quantization = args.quantization
    if quantization is not None:
        if quantization not in QUANTIZATION_BYTES:
            raise VllmArgError(
                "--quantization", f"'{quantization}' is not simulated (simulated: {', '.join(QUANTIZATION_BYTES)})"
            )
        return QUANTIZATION_BYTES[quantization]
    if checkpoint_bytes is not None:
        return checkpoint_bytes
    return DTYPE_BYTES[args.dtype or "auto"]


def _kv_bytes_per_token(args: argparse.Namespace, profile_bytes: int) -> int:
    """--kv-cache-dtype's bytes per element (auto: the model's dtype) times the profile's elements."""
    kv_dtype = args.kv_cache_dtype or "auto"
    element = KV_DTYPE_BYTES[kv_dtype] if kv_dtype != "auto" else int(DTYPE_BYTES[args.dtype or "auto"])
    return profile_bytes * element // PROFILE_KV_BYTES


_KV_EVENTS_KEYS = {"enable_kv_cache_events", "endpoint", "topic", "hwm"}
#: vLLM's KVEventsConfig fields that tune its publisher's buffers: accepted, no effect.
_KV_EVENTS_BUFFERS = {"buffer_steps", "max_queue_size"}


def _kv_events(config: dict[str, Any]) -> dict[str, Any] | None:
    flag = "--kv-events-config"
    unknown = set(config) - _KV_EVENTS_KEYS - _KV_EVENTS_BUFFERS - {"publisher", "replay_endpoint"}
    if unknown:
        raise VllmArgError(flag, f"unknown field(s) {', '.join(sorted(unknown))}")
    if config.get("replay_endpoint") is not None:
        raise VllmArgError(flag, "replay_endpoint: replaying past events is not simulated yet")
    publisher = config.get("publisher")
    if publisher not in (None, "zmq", "null"):
        raise VllmArgError(flag, f"publisher '{publisher}': llmsim publishes over ZMQ ('zmq') or not at all ('null')")
    if publisher == "null":
        return None
    return {k: v for k, v in config.items() if k in _KV_EVENTS_KEYS}


#: vLLM's NIXL environment (vllm/envs.py) -> models.yml's kv_transfer field, with vLLM's defaults.
_NIXL_ENV = (
    ("VLLM_NIXL_SIDE_CHANNEL_HOST", "side_channel_host", str),
    ("VLLM_NIXL_SIDE_CHANNEL_PORT", "side_channel_port", int),
    ("VLLM_NIXL_ABORT_REQUEST_TIMEOUT", "abort_request_timeout_s", float),
)


def _kv_transfer(text: str | None) -> dict[str, Any] | None:
    """``--kv-transfer-config`` with the NIXL connector, as models.yml's kv_transfer (disaggregated
    prefill/decode, docs/pd.md), its side channel and timeout from vLLM's environment variables;
    None for other connectors (kept and ignored)."""
    if text is None:
        return None
    flag = "--kv-transfer-config"
    try:
        config = _json_object(text)
    except argparse.ArgumentTypeError as exc:
        raise VllmArgError(flag, str(exc)) from None
    if config.get("kv_connector") != "NixlConnector":
        return None
    kv: dict[str, Any] = {"kv_role": config.get("kv_role"), "kv_connector": "NixlConnector"}
    if "kv_load_failure_policy" in config:
        kv["kv_load_failure_policy"] = config["kv_load_failure_policy"]
    for env, key, kind in _NIXL_ENV:
        value = os.environ.get(env)
        if value is not None:
            try:
                kv[key] = kind(value)
            except ValueError:
                raise VllmArgError(flag, f"{env}={value!r} is not a valid {kind.__name__}") from None
    return kv


def _lora(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any] | None:
    if not args.enable_lora:
        for dest, flag in (("lora_modules", "--lora-modules"), ("max_loras", "--max-loras")):
            if getattr(args, dest) is not None:
                raise VllmArgError(flag, "needs --enable-lora")
        return None
    adapters = []
    for module in args.lora_modules or ():
        base = module.get("base_model_name")
        if base is not None and base not in names:
            raise VllmArgError("--lora-modules", f"base_model_name '{base}' is not this server's model ({names[0]})")
        adapters.append({"name": module["name"], "path": module["path"]})
    lora: dict[str, Any] = {"adapters": adapters}
    if args.max_loras is not None:
        lora["max_loras"] = args.max_loras
    if args.max_cpu_loras is not None:
        lora["max_cpu_loras"] = args.max_cpu_loras
    return lora


def models_mapping(args: argparse.Namespace) -> dict[str, Any]:
    """The models.yml mapping vLLM's flags describe (one scheduler model on one simulated GPU or TP group)."""
    _refuse_parallel(args)
    if args.vllm_ignored_enable_auto_tool_choice and args.vllm_ignored_tool_call_parser is None:
        # vLLM's validate_parsed_serve_args.
        raise VllmArgError("--enable-auto-tool-choice", "requires --tool-call-parser")
    if args.enable_chunked_prefill is False:
        raise VllmArgError("--no-enable-chunked-prefill", "not simulated: llmsim's scheduler always chunks prefills")
    model_id = args.model_tag or args.vllm_model
    if model_id is None:
        raise VllmArgError("MODEL", "vLLM's flags need a model (llmsim serve MODEL ... or --model MODEL)")
    profile, checkpoint_bytes = _resolve_model(model_id)
    names = args.served_model_name or [model_id]
    profile_kv = int(builtin_model_profiles()[profile]["kv_cache"]["bytes_per_token"])
    entry: dict[str, Any] = {
        "name": names[0],
        "aliases": names[1:],
        "engine": "scheduler",
        "profile": profile,
        "hardware": args.hardware or os.environ.get("LLMSIM_HARDWARE") or DEFAULT_HARDWARE,
        "weights": {"bytes_per_parameter": _weight_bytes(args, checkpoint_bytes)},
        "kv_cache": {"bytes_per_token": _kv_bytes_per_token(args, profile_kv)},
    }
    # The schema checks them (TP against the model's heads, PP against its layers).
    for dest in ("tensor_parallel_size", "pipeline_parallel_size"):
        if getattr(args, dest) is not None:
            entry[dest] = getattr(args, dest)
    if args.max_model_len is not None and args.max_model_len != AUTO:
        entry["context_length"] = args.max_model_len
    for dest, key in (
        ("block_size", "block_size"),
        ("gpu_memory_utilization", "gpu_memory_utilization"),
        ("enable_prefix_caching", "enable_prefix_caching"),
    ):
        if getattr(args, dest) is not None:
            entry["kv_cache"][key] = getattr(args, dest)
    scheduler = {
        key: getattr(args, dest)
        for dest, key in (
            ("max_num_batched_tokens", "max_batch_tokens"),
            ("max_num_seqs", "max_num_sequences"),
            ("async_scheduling", "async_scheduling"),
        )
        if getattr(args, dest) is not None
    }
    if scheduler:
        entry["scheduler"] = scheduler
    lora = _lora(args, names)
    if lora is not None:
        entry["lora"] = lora
    if args.kv_events_config is not None:
        kv_events = _kv_events(args.kv_events_config)
        if kv_events is not None:
            entry["kv_events"] = kv_events
    kv_transfer = _kv_transfer(args.vllm_ignored_kv_transfer_config)
    if kv_transfer is not None:
        entry["kv_transfer"] = kv_transfer
    if args.enable_prompt_tokens_details is not None:
        entry["enable_prompt_tokens_details"] = args.enable_prompt_tokens_details
    if args.seed is not None:
        entry["faults"] = {"seed": args.seed}
    data_parallel = _data_parallel(args)
    if data_parallel is not None:
        entry["data_parallel"] = data_parallel
    return {"version": 1, "models": [entry]}


#: models.yml fields and the flag each comes from, for errors (longest prefix first wins).
_FIELD_FLAGS = {
    "name": "--served-model-name",
    "aliases": "--served-model-name",
    "hardware": "--hardware",
    "profile": "MODEL",
    "context_length": "--max-model-len",
    "weights": "--dtype/--quantization",
    "kv_cache.bytes_per_token": "--kv-cache-dtype",
    "kv_cache.block_size": "--block-size",
    "kv_cache.gpu_memory_utilization": "--gpu-memory-utilization",
    "scheduler.max_batch_tokens": "--max-num-batched-tokens",
    "scheduler.max_num_sequences": "--max-num-seqs",
    "lora.max_loras": "--max-loras",
    "lora.max_cpu_loras": "--max-cpu-loras",
    "lora.adapters": "--lora-modules",
    "lora": "--max-loras/--max-cpu-loras",
    "kv_events": "--kv-events-config",
    "kv_transfer": "--kv-transfer-config",
    "faults.seed": "--seed",
    "tensor_parallel_size": "--tensor-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "data_parallel": "--data-parallel-size",
}


#: models.yml words in the runtime's capacity errors, and the flags that set them.
_FIELD_WORDS = (
    ("context_length", "--max-model-len"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
)


def flag_for_field(field: str | None) -> str | None:
    """The flag a models.yml field of the built config came from (None: no single flag)."""
    if field is None:
        return None
    for key in sorted(_FIELD_FLAGS, key=len, reverse=True):
        if field == key or field.startswith((key + ".", key + "[")):
            return _FIELD_FLAGS[key]
    return None


def config_error(exc: ConfigError) -> VllmArgError:
    """A config error of the built config, as an error of the flag that set the field."""
    flag = flag_for_field(exc.field)
    if flag is None:
        # Across flags (the weights and the context against the GPU): said in the flags' words.
        message = exc.message
        for field, words in _FIELD_WORDS:
            message = message.replace(field, words)
        return VllmArgError(None, message)
    return VllmArgError(flag, exc.message)


def _fitted_context(config: ModelsConfig) -> int | None:
    """vLLM's ``--max-model-len auto``: the model's context, cut to what the KV cache holds.

    None when the weights leave no room at all (the runtime's check then says so).
    """
    model = config.models[0]
    assert model.hardware is not None
    assert model.weights is not None
    assert model.kv_cache is not None
    tp = model.tensor_parallel_size
    arch = model.architecture
    heads = arch.num_key_value_heads if arch else 0
    # Pipeline stages: the largest stage's share of the layers holds the fewest blocks (vLLM's count).
    share = 1.0
    if model.pipeline_parallel_size > 1 and arch is not None:
        share = (
            max(pipeline_stage_layers(arch.num_hidden_layers, model.pipeline_parallel_size)) / arch.num_hidden_layers
        )
    try:
        # One rank's blocks: its weight shard and its share of the KV heads (and of the layers).
        blocks = llmsim_capacity.num_kv_blocks(
            hbm_bytes=config.hardware[model.hardware].hbm_gib * llmsim_capacity.GIB,
            gpu_memory_utilization=model.kv_cache.gpu_memory_utilization,
            weight_bytes=model.weights.bytes / tp * share,
            kv_bytes_per_token=kv_bytes_per_gpu(model.kv_cache.bytes_per_token, tp, heads) * share,
            block_size=model.kv_cache.block_size,
        )
    except llmsim_capacity.CapacityError:
        return None
    # Block 0 is vLLM's null block: a request can use the others.
    return min(model.context_length, (blocks - 1) * model.kv_cache.block_size)


def build(args: argparse.Namespace) -> VllmServe:
    """Check and translate vLLM's flags. Raises :class:`VllmArgError` naming the flag at fault."""
    if args.config is not None:
        raise VllmArgError(
            "--config", "llmsim's models.yml (--config or LLMSIM_CONFIG) and vLLM's model flags are two forms: give one"
        )
    raw = models_mapping(args)
    try:
        config = validate_models_config(raw, COMMAND_LINE)
        if args.max_model_len == AUTO:
            fitted = _fitted_context(config)
            if fitted is not None:
                raw["models"][0]["context_length"] = fitted
                config = validate_models_config(raw, COMMAND_LINE)
    except ConfigError as exc:
        raise config_error(exc) from None
    ignored = []
    for name in (*IGNORED_SWITCHES, *ACCEPTED_SWITCHES, *IGNORED_OPTIONS):
        value = getattr(args, _ignored_dest(name))
        if value is not None:
            ignored.append(f"--no-{name}" if value is False else f"--{name}")
    if config.models[0].kv_transfer is not None:
        ignored.remove("--kv-transfer-config")  # simulated: not for the warning
    kv_transfer = args.vllm_ignored_kv_transfer_config
    try:
        kv_transfer_config = _json_object(kv_transfer) if kv_transfer is not None else None
    except argparse.ArgumentTypeError as exc:
        raise VllmArgError("--kv-transfer-config", str(exc)) from None
    return VllmServe(config=config, ignored=tuple(ignored), kv_transfer_config=kv_transfer_config)
