"""vLLM's ``vllm serve`` command line on ``llmsim serve``: argv to the models.yml it describes.

Expected values come from what each flag means to vLLM (engine/arg_utils.py, entrypoints/openai/
cli_args.py) and from the profiles' published model shapes, not from llmsim's output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmsim.cli import build_parser, main
from llmsim.commands import vllm_cli
from llmsim.config import ModelConfig
from llmsim.config.schema import DataParallel
from llmsim.runtime import scheduler_params

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
#: Llama 3.1 8B: 32 layers x 8 KV heads x head_dim 128 x 2 (K and V) elements per token.
LLAMA_KV_ELEMENTS = 32 * 8 * 128 * 2


def translate(*argv: str) -> vllm_cli.VllmServe:
    args = build_parser().parse_args(vllm_cli.normalize_argv(["serve", *argv]))
    return vllm_cli.build(args)


def model(*argv: str) -> ModelConfig:
    return translate(*argv).config.models[0]


def field(m: ModelConfig, path: str) -> Any:
    value: Any = m
    for part in path.split("."):
        value = getattr(value, part)
    return value


# (argv, models.yml field, the value vLLM's meaning of the flags gives)
MAPPING: list[tuple[list[str], str, Any]] = [
    ([LLAMA], "name", LLAMA),
    (["--model", LLAMA], "name", LLAMA),
    ([LLAMA], "profile", "llama-3.1-8b"),
    ([LLAMA], "engine", "scheduler"),
    ([LLAMA], "hardware", "h100-80gb"),
    # No --max-model-len: the model's own context (Llama 3.1: 128K).
    ([LLAMA], "context_length", 131072),
    # auto (or -1): the longest context that fits, at most the model's; Llama 3.1 8B fits whole on an H100.
    ([LLAMA, "--max-model-len", "-1"], "context_length", 131072),
    ([LLAMA, "--max-model-len", "auto"], "context_length", 131072),
    ([LLAMA, "--served-model-name", "llama"], "name", "llama"),
    # Several names: the first names the model in responses, every one is served.
    ([LLAMA, "--served-model-name", "llama", "llama-8b", LLAMA], "name", "llama"),
    ([LLAMA, "--served-model-name", "llama", "llama-8b", LLAMA], "aliases", ["llama-8b", LLAMA]),
    ([LLAMA], "aliases", []),
    ([LLAMA, "--max-model-len", "32768"], "context_length", 32768),
    ([LLAMA, "--max-model-len", "32k"], "context_length", 32000),
    ([LLAMA, "--max-model-len", "32K"], "context_length", 32768),
    ([LLAMA, "--max_model_len=4096"], "context_length", 4096),
    ([LLAMA, "--max-num-seqs", "128"], "scheduler.max_num_sequences", 128),
    ([LLAMA, "--max-num-batched-tokens", "4096"], "scheduler.max_batch_tokens", 4096),
    ([LLAMA, "--gpu-memory-utilization", "0.8"], "kv_cache.gpu_memory_utilization", 0.8),
    ([LLAMA, "--block-size", "32"], "kv_cache.block_size", 32),
    ([LLAMA], "kv_cache.enable_prefix_caching", True),
    ([LLAMA, "--enable-prefix-caching"], "kv_cache.enable_prefix_caching", True),
    ([LLAMA, "--no-enable-prefix-caching"], "kv_cache.enable_prefix_caching", False),
    ([LLAMA, "--async-scheduling"], "scheduler.async_scheduling", True),
    ([LLAMA, "--no-async-scheduling"], "scheduler.async_scheduling", False),
    ([LLAMA], "enable_prompt_tokens_details", False),
    ([LLAMA, "--enable-prompt-tokens-details"], "enable_prompt_tokens_details", True),
    ([LLAMA, "--seed", "7"], "faults.seed", 7),
    ([LLAMA, "--hardware", "a100-80gb"], "hardware", "a100-80gb"),
    # Weights: bf16 (auto for these checkpoints) 2 bytes, float32 4, fp8 1, 4-bit AWQ/GPTQ half a byte.
    ([LLAMA], "weights.bytes_per_parameter", 2.0),
    ([LLAMA, "--dtype", "bfloat16"], "weights.bytes_per_parameter", 2.0),
    ([LLAMA, "--dtype", "half"], "weights.bytes_per_parameter", 2.0),
    ([LLAMA, "--dtype", "float32"], "weights.bytes_per_parameter", 4.0),
    ([LLAMA, "--quantization", "fp8"], "weights.bytes_per_parameter", 1.0),
    ([LLAMA, "-q", "awq"], "weights.bytes_per_parameter", 0.5),
    ([LLAMA, "--quantization", "gptq"], "weights.bytes_per_parameter", 0.5),
    ([LLAMA, "-tp", "4"], "tensor_parallel_size", 4),
    ([LLAMA, "--tensor-parallel-size", "2", "-pp", "1"], "tensor_parallel_size", 2),
    ([LLAMA, "--pipeline-parallel-size", "1"], "pipeline_parallel_size", 1),
    ([LLAMA, "--pipeline-parallel-size", "2"], "pipeline_parallel_size", 2),
    ([LLAMA, "-tp", "2", "-pp", "2"], "pipeline_parallel_size", 2),
    (["meta-llama/Llama-3.1-70B-Instruct", "-tp", "4"], "weights.bytes_per_parameter", 2.0),
    (["meta-llama/Llama-3.1-405B-Instruct-FP8", "-tp", "8"], "weights.bytes_per_parameter", 1.0),
    (["mistralai/Mixtral-8x7B-Instruct-v0.1", "-tp", "2"], "weights.active_parameters_billions", 12.9),
    (["mistralai/Mixtral-8x7B-Instruct-v0.1", "-tp", "2"], "weights.experts", 8),
    (["mistralai/Mixtral-8x7B-Instruct-v0.1", "-tp", "2", "-q", "fp8"], "weights.experts_per_token", 2),
    (["RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8"], "weights.bytes_per_parameter", 1.0),
    (["RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8"], "weights.parameters_billions", 70.6),
    # KV cache: auto is the model's dtype; fp8 one byte an element.
    ([LLAMA], "kv_cache.bytes_per_token", LLAMA_KV_ELEMENTS * 2),
    ([LLAMA, "--kv-cache-dtype", "auto"], "kv_cache.bytes_per_token", LLAMA_KV_ELEMENTS * 2),
    ([LLAMA, "--kv-cache-dtype", "fp8"], "kv_cache.bytes_per_token", LLAMA_KV_ELEMENTS),
    ([LLAMA, "--kv-cache-dtype", "fp8_e5m2"], "kv_cache.bytes_per_token", LLAMA_KV_ELEMENTS),
    ([LLAMA, "--dtype", "float32"], "kv_cache.bytes_per_token", LLAMA_KV_ELEMENTS * 4),
    ([LLAMA, "--quantization", "fp8"], "kv_cache.bytes_per_token", LLAMA_KV_ELEMENTS * 2),
    # Parallel sizes of 1 are the single GPU llmsim simulates.
    ([LLAMA, "--tensor-parallel-size", "1", "-pp", "1", "-dp", "1", "--data-parallel-rank", "0"], "name", LLAMA),
    ([LLAMA], "lora", None),
    ([LLAMA], "kv_events", None),
    # vLLM's data parallelism on one node: every rank in this process.
    ([LLAMA, "-dp", "4"], "data_parallel", DataParallel(size=4, rank=None, load_balancing="internal")),
    (
        [LLAMA, "-dp", "4", "--data-parallel-size-local", "4", "--data-parallel-start-rank", "0"],
        "data_parallel",
        DataParallel(size=4, rank=None, load_balancing="internal"),
    ),
    ([LLAMA, "-dp", "4", "-dpn", "2"], "data_parallel", DataParallel(size=4, rank=2, load_balancing="external")),
    (
        [LLAMA, "-dp", "4", "--data-parallel-rank", "3", "--data-parallel-external-lb"],
        "data_parallel",
        DataParallel(size=4, rank=3, load_balancing="external"),
    ),
    (
        [LLAMA, "-dp", "2", "--data-parallel-multi-port-external-lb"],
        "data_parallel",
        DataParallel(size=2, rank=None, load_balancing="external"),
    ),
]


@pytest.mark.parametrize(("argv", "path", "expected"), MAPPING, ids=[f"{' '.join(a)}:{p}" for a, p, _ in MAPPING])
def test_a_flag_sets_the_models_yml_field_it_means(argv: list[str], path: str, expected: Any) -> None:
    assert field(model(*argv), path) == expected


def test_the_gpu_comes_from_the_environment_without_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSIM_HARDWARE", "l40s-48gb")
    assert model(LLAMA).hardware == "l40s-48gb"
    assert model(LLAMA, "--hardware", "a100-80gb").hardware == "a100-80gb"


def test_max_model_len_auto_cuts_the_context_to_the_kv_cache(capsys: pytest.CaptureFixture[str]) -> None:
    # An A100 40GB at 0.5: 20 GiB less 16.06 GB of weights, in blocks of 16 tokens x 131,072 B.
    usable = 0.5 * 40 * 2**30 - 8.03e9 * 2
    blocks = int(usable // (16 * LLAMA_KV_ELEMENTS * 2))
    argv = [LLAMA, "--hardware", "a100-40gb", "--gpu-memory-utilization", "0.5"]
    assert model(*argv, "--max-model-len", "auto").context_length == (blocks - 1) * 16
    # Without auto, vLLM refuses a model whose whole context does not fit.
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmsim: --max-model-len 131072 does not fit in the KV cache")
    assert err.endswith("raise --gpu-memory-utilization or lower --max-model-len\n")


def test_lora_modules_in_both_of_vllms_forms() -> None:
    json_form = json.dumps({"name": "b", "path": "/adapters/b", "base_model_name": LLAMA})
    lora = model(
        LLAMA, "--enable-lora", "--lora-modules", "a=/adapters/a", json_form, "--max-loras", "2", "--max-cpu-loras", "4"
    ).lora
    assert lora is not None
    assert [(a.name, a.path) for a in lora.adapters] == [("a", "/adapters/a"), ("b", "/adapters/b")]
    assert (lora.max_loras, lora.max_cpu_loras) == (2, 4)


def test_enable_lora_alone_serves_no_adapter_with_vllms_defaults() -> None:
    lora = model(LLAMA, "--enable-lora").lora
    assert lora is not None
    assert (lora.adapters, lora.max_loras, lora.max_cpu_loras) == ([], 1, None)


def test_kv_events_config_maps_to_kv_events() -> None:
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "tcp://*:5558",
        "topic": "kv@{pod_ip}@{model}",
        "hwm": 1000,
        "buffer_steps": 10000,
        "max_queue_size": 100000,
        "replay_endpoint": None,
    }
    kv_events = model(LLAMA, "--kv-events-config", json.dumps(config)).kv_events
    assert kv_events is not None
    assert (kv_events.enable_kv_cache_events, kv_events.endpoint, kv_events.topic, kv_events.hwm) == (
        True,
        "tcp://*:5558",
        "kv@{pod_ip}@{model}",
        1000,
    )
    # vLLM's null publisher publishes nothing.
    assert model(LLAMA, "--kv-events-config", '{"publisher": "null"}').kv_events is None


def test_kv_transfer_config_is_parsed_and_kept() -> None:
    config = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    served = translate(LLAMA, "--kv-transfer-config", json.dumps(config))
    assert served.kv_transfer_config == config
    assert served.ignored == ("--kv-transfer-config",)
    assert served.config.models[0].kv_transfer is None


def test_nixl_kv_transfer_config_is_simulated_with_vllms_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_NIXL_SIDE_CHANNEL_HOST", "10.1.2.3")
    monkeypatch.setenv("VLLM_NIXL_SIDE_CHANNEL_PORT", "5700")
    monkeypatch.setenv("VLLM_NIXL_ABORT_REQUEST_TIMEOUT", "120")
    config = {"kv_connector": "NixlConnector", "kv_role": "kv_producer", "kv_load_failure_policy": "recompute"}
    served = translate(LLAMA, "--kv-transfer-config", json.dumps(config))
    kv = served.config.models[0].kv_transfer
    assert kv is not None
    assert (kv.kv_role, kv.kv_load_failure_policy) == ("kv_producer", "recompute")
    assert (kv.side_channel_host, kv.side_channel_port, kv.abort_request_timeout_s) == ("10.1.2.3", 5700, 120.0)
    assert served.ignored == ()


def test_nixl_kv_transfer_config_without_a_role_names_the_flag() -> None:
    with pytest.raises(vllm_cli.VllmArgError, match="--kv-transfer-config"):
        translate(LLAMA, "--kv-transfer-config", '{"kv_connector": "NixlConnector"}')


def test_flags_of_a_real_gpus_internals_are_named_for_the_warning() -> None:
    served = translate(
        LLAMA, "--enforce-eager", "--no-trust-remote-code", "--swap-space", "4", "-O3", "--disable-log-requests"
    )
    assert served.ignored == (
        "--enforce-eager",
        "--disable-log-requests",
        "--no-trust-remote-code",
        "--swap-space",
        "--compilation-config",
    )
    assert translate(LLAMA).ignored == ()


# (argv, the flag the one-line error names, words of its reason)
REFUSED: list[tuple[list[str], str, str]] = [
    # vLLM's own check: 32 attention heads do not split over 3 GPUs.
    ([LLAMA, "--tensor-parallel-size", "3"], "--tensor-parallel-size", "must be divisible by tensor parallel size (3)"),
    # Llama 3.1 8B has 32 layers: vLLM cannot give 33 stages one each.
    ([LLAMA, "--pipeline-parallel-size", "33"], "--pipeline-parallel-size", "more pipeline stages than the model's 32"),
    ([LLAMA, "-pp", "0"], "--pipeline-parallel-size", "must be >= 1"),
    ([LLAMA, "--data-parallel-size", "0"], "--data-parallel-size", "must be >= 1"),
    ([LLAMA, "--data-parallel-rank", "1"], "--data-parallel-rank", "must be in [0, --data-parallel-size (1))"),
    ([LLAMA, "-dp", "4", "-dpl", "2"], "--data-parallel-size-local", "every rank"),
    ([LLAMA, "-dp", "4", "-dpr", "2"], "--data-parallel-start-rank", "ranks from 0"),
    ([LLAMA, "-dp", "4", "-dph"], "--data-parallel-hybrid-lb", "not simulated"),
    ([LLAMA, "-dpm"], "--data-parallel-multi-port-external-lb", "--data-parallel-size >= 2"),
    ([LLAMA, "-dp", "2", "-dpm", "-dpn", "1"], "--data-parallel-multi-port-external-lb", "no --data-parallel-rank"),
    ([LLAMA, "-dp", "2", "-dpe"], "--data-parallel-external-lb", "needs --data-parallel-rank"),
    (["acme/unknown-7b"], "MODEL", "meta-llama/Llama-3.1-8B-Instruct"),
    ([LLAMA, "--quantization", "bitsandbytes"], "--quantization", "not simulated"),
    ([LLAMA, "--served-model-name", "a", "b", "a"], "--served-model-name", "alias 'a' is already"),
    (
        [LLAMA, "--served-model-name", "a", "b", "--enable-lora", "--lora-modules", "b=/p"],
        "--lora-modules",
        "LoRA adapter 'b' has the name of a served model",
    ),
    ([LLAMA, "--lora-modules", "a=/p"], "--lora-modules", "needs --enable-lora"),
    (
        [LLAMA, "--enable-lora", "--lora-modules", '{"name": "a", "path": "/p", "base_model_name": "other"}'],
        "--lora-modules",
        "base_model_name 'other'",
    ),
    ([LLAMA, "--kv-events-config", '{"replay_endpoint": "tcp://*:5560"}'], "--kv-events-config", "replay"),
    ([LLAMA, "--kv-events-config", '{"bogus": 1}'], "--kv-events-config", "bogus"),
    ([LLAMA, "--kv-transfer-config", "not json"], "--kv-transfer-config", "invalid JSON"),
    ([LLAMA, "--enable-auto-tool-choice"], "--enable-auto-tool-choice", "requires --tool-call-parser"),
    ([LLAMA, "--no-enable-chunked-prefill"], "--no-enable-chunked-prefill", "always chunks"),
    # The config loader's checks, named by the flag.
    ([LLAMA, "--block-size", "0"], "--block-size", "greater than 0"),
    ([LLAMA, "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization", "less than or equal to 1"),
    ([LLAMA, "--max-num-seqs", "0"], "--max-num-seqs", "greater than 0"),
    ([LLAMA, "--hardware", "tpu-v9"], "--hardware", "unknown hardware 'tpu-v9'"),
    ([LLAMA, "--enable-lora", "--max-loras", "4", "--max-cpu-loras", "2"], "--max-loras/--max-cpu-loras", "must be >="),
    (["--max-model-len", "4096"], "MODEL", "need a model"),
    ([LLAMA, "--config", "models.yml"], "--config", "two forms"),
]


@pytest.mark.parametrize(("argv", "flag", "reason"), REFUSED, ids=[" ".join(a) for a, _, _ in REFUSED])
def test_what_llmsim_cannot_serve_is_refused_naming_the_flag(argv: list[str], flag: str, reason: str) -> None:
    with pytest.raises(vllm_cli.VllmArgError) as info:
        translate(*argv)
    assert info.value.flag == flag
    assert str(info.value).startswith(f"{flag}: ")
    assert reason in str(info.value)


def test_unknown_flags_are_rejected_as_argparse_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", LLAMA, "--max-model-len", "4096", "--frobnicate", "--also-unknown=1"])
    assert info.value.code == 2
    assert "error: unrecognized arguments: --frobnicate --also-unknown=1" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["a", "=/path", '{"name": "a"}', '{"name": "a", "path": "/p", "extra": 1}'])
def test_a_malformed_lora_module_is_an_argument_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", LLAMA, "--enable-lora", "--lora-modules", bad])
    assert info.value.code == 2
    assert "argument --lora-modules" in capsys.readouterr().err


def test_an_error_against_the_gpu_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # The bf16 70B checkpoint is 141 GB of weights: no single 80 GB GPU holds it.
    assert main(["serve", "meta-llama/Llama-3.1-70B-Instruct"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmsim: ")
    assert "141.20 GB" in err
    assert err.count("\n") == 1


def test_tensor_parallelism_on_a_gpu_without_a_known_interconnect_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", LLAMA, "-tp", "2", "--hardware", "l4-24gb"]) == 2
    err = capsys.readouterr().err
    assert "interconnect_bandwidth_gbps" in err
    assert err.count("\n") == 1


def test_pipeline_parallelism_on_a_gpu_without_a_known_interconnect_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", LLAMA, "-pp", "2", "--hardware", "l4-24gb"]) == 2
    err = capsys.readouterr().err
    assert "pipeline_parallel_size 2 needs hardware 'l4-24gb' to give interconnect_bandwidth_gbps" in err
    assert err.count("\n") == 1


def test_the_bf16_70b_checkpoint_serves_over_two_stages_of_two_gpus() -> None:
    # 141.2 GB of weights: 40 of 80 layers a stage, half of each on a GPU: 35.3 GB, as TP 4.
    served = translate("meta-llama/Llama-3.1-70B-Instruct", "-tp", "2", "-pp", "2", "--max-model-len", "auto")
    params = scheduler_params(served.config, "meta-llama/Llama-3.1-70B-Instruct", "command line")
    assert (params.tensor_parallel_size, params.pipeline_parallel_size) == (2, 2)
    assert params.weight_bytes_per_gpu == pytest.approx(35.3e9, rel=1e-12)
    # --max-model-len auto: the profile's 131,072 tokens fit in the 32,049 usable blocks of 16.
    assert served.config.models[0].context_length == 131_072
    # On two single-GPU stages each holds 70.6 GB of weights: (0.9 x 80 GiB - 70.6 GB) / (327,680 /
    # 2 x 16 B) = 2,559 blocks, 2,558 usable: auto cuts the context to 40,928 tokens, as vLLM would.
    one_gpu_stages = translate("meta-llama/Llama-3.1-70B-Instruct", "-pp", "2", "--max-model-len", "auto")
    assert one_gpu_stages.config.models[0].context_length == 2558 * 16


def test_the_bf16_70b_checkpoint_serves_over_two_gpus() -> None:
    # 141.2 GB of weights: 70.6 GB a GPU at TP 2, which the 72 GiB (0.9 x 80 GiB) budget holds.
    served = translate("meta-llama/Llama-3.1-70B-Instruct", "-tp", "2", "--max-model-len", "8192")
    params = scheduler_params(served.config, "meta-llama/Llama-3.1-70B-Instruct", "command line")
    assert params.tensor_parallel_size == 2
    assert params.weight_bytes_per_gpu == 70.6e9


def test_every_model_id_resolves_to_a_profile_that_serves() -> None:
    for model_id in vllm_cli.known_model_ids():
        # Weights no single 80 GB GPU holds are served over several (vLLM's usual sizes).
        big = "405" in model_id or "Mixtral" in model_id or ("70B" in model_id and "FP8" not in model_id)
        tp = 8 if "405" in model_id else 2 if big else 1
        assert translate(model_id, "-tp", str(tp)).config.models[0].name == model_id


def test_the_flags_of_llm_d_guides_are_accepted_for_the_warning() -> None:
    # Both only change a real server's internals: access logging, and the KV-cache manager of models
    # mixing attention kinds (every profile is full attention).
    served = translate(
        LLAMA, "--disable-access-log-for-endpoints=/health,/metrics", "--no-disable-hybrid-kv-cache-manager"
    )
    assert served.ignored == ("--no-disable-hybrid-kv-cache-manager", "--disable-access-log-for-endpoints")


#: The shape fields of published config.json files (each model card's), by the model they describe.
QWEN_05B_CONFIG = {"model_type": "qwen2", "num_hidden_layers": 24, "hidden_size": 896, "num_attention_heads": 14,
                   "num_key_value_heads": 2}  # fmt: skip
LLAMA_8B_CONFIG = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                   "num_key_value_heads": 8}  # fmt: skip
# Llama 2 7B's config.json as first published: no num_key_value_heads (Hugging Face's default: one per head).
LLAMA2_7B_CONFIG = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32}
# Mistral 7B has Llama 3.1 8B's shape: only model_type tells them apart.
MISTRAL_7B_CONFIG = {**LLAMA_8B_CONFIG, "model_type": "mistral"}
LLAMA_70B_CONFIG = {"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
                    "num_key_value_heads": 8}  # fmt: skip
# Qwen3-32B: head_dim 128 is its own field (not hidden_size / heads); only the four shape fields name the profile.
QWEN3_32B_CONFIG = {"model_type": "qwen3", "num_hidden_layers": 64, "hidden_size": 5120, "num_attention_heads": 64,
                    "num_key_value_heads": 8, "head_dim": 128}  # fmt: skip
# RedHatAI's FP8 checkpoint, as llm-compressor writes it.
LLAMA_70B_FP8_CONFIG = {
    **LLAMA_70B_CONFIG,
    "quantization_config": {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
    },
}


@pytest.mark.parametrize(
    ("config", "profile", "weight_bytes"),
    [
        (QWEN_05B_CONFIG, "qwen2.5-0.5b", 2.0),
        (LLAMA_8B_CONFIG, "llama-3.1-8b", 2.0),
        (LLAMA2_7B_CONFIG, "llama-2-7b", 2.0),
        (MISTRAL_7B_CONFIG, "mistral-7b", 2.0),
        (LLAMA_70B_CONFIG, "llama-3.1-70b", 2.0),
        (LLAMA_70B_FP8_CONFIG, "llama-3.1-70b-fp8", 1.0),
        (QWEN3_32B_CONFIG, "qwen3-32b", 2.0),
    ],
)
def test_a_model_directory_is_the_profile_its_config_json_describes(
    tmp_path: Path, config: dict[str, Any], profile: str, weight_bytes: float
) -> None:
    # KServe's vLLM runtime serves --model=/mnt/models, the checkpoint its storage initializer downloaded:
    # vLLM reads the directory's config.json, and so does llmsim.
    (tmp_path / "config.json").write_text(json.dumps(config))
    m = model(f"--model={tmp_path}", "--served-model-name=my-isvc", "-tp", "2")
    assert (m.profile, m.name) == (profile, "my-isvc")
    assert m.weights is not None
    assert m.weights.bytes_per_parameter == weight_bytes


def test_a_model_directory_llmsim_cannot_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(vllm_cli.VllmArgError, match=r"MODEL: .*without a config\.json"):
        translate(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA_8B_CONFIG, "num_hidden_layers": 33}))
    with pytest.raises(vllm_cli.VllmArgError, match=r"num_hidden_layers 33.*not one of llmsim's built-in profiles"):
        translate(str(tmp_path))
