"""Real vLLM manifests (e2e/data/upstream/, stored verbatim): llmsim's vLLM parser accepts their command lines,
and the transform that runs them on this project's cluster changes only what docs/vllm-cli.md lists.

e2e/test_9_upstream_manifests.py runs the same manifests on a cluster. Expected values come from what
each manifest's flags mean to vLLM (and from the checkpoints they name), not from llmsim's output.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from e2e import upstream

from llmsim.cli import build_parser
from llmsim.commands import vllm_cli
from llmsim.engine.scheduler.params import num_kv_blocks
from llmsim.runtime import scheduler_params


def serve(flags: list[str]) -> vllm_cli.VllmServe:
    """What ``vllm serve FLAGS`` becomes on llmsim's image (its shims run ``llmsim serve FLAGS``)."""
    args = build_parser().parse_args(vllm_cli.normalize_argv(["serve", *flags]))
    return vllm_cli.build(args)


def the_container(doc: dict[str, Any]) -> dict[str, Any]:
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    found: dict[str, Any] = container
    return found


def test_production_stacks_engine_is_served_as_its_flags_say() -> None:
    deploy = upstream.deployment(upstream.load(upstream.PRODUCTION_STACK))
    served = serve(upstream.vllm_flags(upstream.container_argv(the_container(deploy))))
    model = served.config.models[0]
    assert (model.name, model.profile) == ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-0.5b")
    assert model.context_length == 16384  # --max-model-len 16384
    assert model.tensor_parallel_size == 1
    assert model.weights is not None
    assert model.weights.bytes_per_parameter == 2
    assert model.kv_cache is not None
    assert model.kv_cache.gpu_memory_utilization == 0.9  # --gpu_memory_utilization, vLLM's _ form
    assert model.kv_cache.enable_prefix_caching is False
    # CUDA graphs off: a real GPU's internals only.
    assert served.ignored == ("--enforce-eager",)


def test_kserves_runtime_serves_the_checkpoint_in_its_model_directory(tmp_path: Path) -> None:
    (deploy, _service) = upstream.kserve_objects(upstream.load(upstream.KSERVE_RUNTIME)[0])
    argv = upstream.container_argv(the_container(deploy))
    assert argv[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    # The storage initializer's download, where the pod mounts it.
    shutil.copy(upstream.KSERVE_MODEL_CONFIG, tmp_path / "config.json")
    flags = [a.replace(upstream.KSERVE_MODEL_DIR, str(tmp_path)) for a in upstream.vllm_flags(argv)]
    served = serve(flags)
    model = served.config.models[0]
    assert (model.name, model.profile) == (upstream.KSERVE_ISVC, "qwen2.5-0.5b")
    assert served.ignored == ()


@pytest.mark.parametrize(
    ("manifest", "tp", "kv_role"),
    [
        pytest.param(upstream.LLM_D_DECODE, 4, "kv_both", id="decode"),
        pytest.param(upstream.LLM_D_PREFILL, 1, "kv_producer", id="prefill"),
    ],
)
def test_llm_ds_flags_are_all_known_and_its_model_is_not_simulated(manifest: Path, tp: int, kv_role: str) -> None:
    container = the_container(upstream.load(manifest)[0])
    flags = upstream.vllm_flags(upstream.container_argv(container))
    args = build_parser().parse_args(vllm_cli.normalize_argv(["serve", *flags]))  # no flag unrecognized
    # gpt-oss-120b is no built-in profile: refused, not served with another model's timing.
    with pytest.raises(vllm_cli.VllmArgError, match=re.escape(f"MODEL: unknown model '{upstream.LLM_D_MODEL}'")):
        vllm_cli.build(args)
    # Every other flag: with a simulated model in its place, P/D over NIXL, the decode on a TP-4 group.
    assert flags[0] == upstream.LLM_D_MODEL
    served = serve(["meta-llama/Llama-3.1-70B-Instruct", *flags[1:]])
    model = served.config.models[0]
    assert model.tensor_parallel_size == tp
    assert model.kv_cache is not None
    assert model.kv_cache.block_size == 128
    assert model.kv_transfer is not None
    assert (model.kv_transfer.kv_connector, model.kv_transfer.kv_role) == ("NixlConnector", kv_role)
    assert served.ignored == ("--no-disable-hybrid-kv-cache-manager", "--disable-access-log-for-endpoints")


#: Qwen3-32B's config.json (its model card's): 64 layers, 8 KV heads of head_dim 128 (config.json's own
#: head_dim, not hidden_size 5120 / 64 heads), bf16 K and V.
QWEN3_32B_KV_BYTES = 64 * 8 * 128 * 2 * 2
#: Its parameters, from config.json's shapes: untied embedding and LM head (151,936 x 5120 each), then 64
#: layers of q/k/v/o projections (64 and 8 heads of 128), q/k norms, a SwiGLU MLP (intermediate 25600)
#: and two RMSNorms, then the final norm. The model card rounds it to 32.8 B.
QWEN3_32B_PARAMETERS = (
    2 * 151936 * 5120
    + 64 * (5120 * 64 * 128 + 2 * 5120 * 8 * 128 + 64 * 128 * 5120 + 2 * 128 + 3 * 5120 * 25600 + 2 * 5120)
    + 5120
)


def test_the_parameter_count_of_qwen3_32b_is_its_model_cards() -> None:
    assert round(QWEN3_32B_PARAMETERS / 1e9, 1) == 32.8


def test_llm_ds_inference_scheduling_guide_is_served_as_its_flags_say() -> None:
    deploy = upstream.deployment(upstream.load(upstream.LLM_D_INFERENCE_SCHEDULING))
    container = the_container(deploy)
    argv = upstream.container_argv(container)
    assert argv[:2] == ["vllm", "serve"]
    served = serve(upstream.vllm_flags(argv))
    model = served.config.models[0]
    # No model swap: the guide's model is a built-in profile.
    assert (model.name, model.profile) == ("Qwen/Qwen3-32B", "qwen3-32b")
    # The chart's --tensor-parallel-size from the values' decode.parallelism.tensor: 2.
    assert model.tensor_parallel_size == 2
    # No --max-model-len: vLLM takes config.json's max_position_embeddings.
    assert model.context_length == 40960
    assert model.kv_cache is not None
    assert model.kv_cache.gpu_memory_utilization == 0.95
    assert model.kv_cache.bytes_per_token == QWEN3_32B_KV_BYTES
    assert model.weights is not None
    assert model.weights.parameters_billions == pytest.approx(QWEN3_32B_PARAMETERS / 1e9, abs=0.05)
    # Uvicorn's access log: a real server's logging only.
    assert served.ignored == ("--disable-uvicorn-access-log",)
    # On the default H100 80GB, each of the 2 ranks holds half the bf16 weights and 4 of the 8 KV heads:
    # vLLM's num_gpu_blocks = (HBM x --gpu-memory-utilization - weights a GPU) / (KV bytes a GPU x 16).
    params = scheduler_params(served.config, model.name, "command line")
    per_gpu = 0.95 * 80 * 2**30 - model.weights.parameters_billions * 1e9 * 2 / 2
    assert num_kv_blocks(params) == math.floor(per_gpu / (QWEN3_32B_KV_BYTES / 2 * 16))
    # The pod's port is the one vLLM's --port names.
    assert container["ports"][0]["containerPort"] == int(argv[argv.index("--port") + 1]) == 8000


def changed_paths(before: Any, after: Any, path: str = "") -> list[str]:
    """Every path (a.b[0].c) where ``after`` differs from ``before``."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [p for k in sorted(set(before) | set(after), key=str)
                for p in changed_paths(before.get(k), after.get(k), f"{path}.{k}")]  # fmt: skip
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [
            p for i, (b, a) in enumerate(zip(before, after, strict=True)) for p in changed_paths(b, a, f"{path}[{i}]")
        ]
    return [] if before == after else [path]


POD = r"\.spec\.template\.spec"
CONTAINER = POD + r"\.(containers|initContainers)\[\d+\]"
#: What the transform may change (docs/vllm-cli.md, "Upstream manifests"), and nothing else.
ALLOWED = [
    r"\.metadata\.namespace",
    r"\.spec\.replicas",
    CONTAINER + r"\.image",
    CONTAINER + r"\.imagePullPolicy",
    CONTAINER + r"\.resources\.(requests|limits)\.(nvidia\.com/gpu|amd\.com/gpu|cpu|memory)",
    POD + r"\.(runtimeClassName|nodeSelector|tolerations|affinity)(\..*)?",
    POD + r"\.volumes\[\d+\]\.(persistentVolumeClaim|hostPath|emptyDir)",
]


@pytest.mark.parametrize(
    "docs",
    [
        pytest.param(upstream.load(upstream.PRODUCTION_STACK), id="production-stack"),
        pytest.param(upstream.kserve_objects(upstream.load(upstream.KSERVE_RUNTIME)[0]), id="kserve"),
        pytest.param(upstream.load(upstream.LLM_D_DECODE), id="llm-d-decode"),
        pytest.param(upstream.load(upstream.LLM_D_PREFILL), id="llm-d-prefill"),
        pytest.param(upstream.load(upstream.LLM_D_INFERENCE_SCHEDULING), id="llm-d-inference-scheduling"),
    ],
)
def test_the_transform_changes_only_the_image_the_gpu_and_what_the_cluster_lacks(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        after = upstream.for_this_cluster(doc, "llmsim:e2e", "ns")
        changed = changed_paths(doc, after)
        assert [p for p in changed if not any(re.fullmatch(a, p) for a in ALLOWED)] == []
        if doc["kind"] == "Deployment":
            container = the_container(after)
            assert container["image"] == "llmsim:e2e"
            # The command line reaches the cluster as upstream wrote it.
            assert upstream.container_argv(container) == upstream.container_argv(the_container(doc))
            assert "nvidia.com/gpu" not in json.dumps(after)


def test_production_stacks_gpu_host_is_what_changes() -> None:
    doc = upstream.deployment(upstream.load(upstream.PRODUCTION_STACK))
    after = upstream.for_this_cluster(doc, "llmsim:e2e", "ns")
    pod = after["spec"]["template"]["spec"]
    assert "runtimeClassName" not in pod
    assert "affinity" not in pod
    assert the_container(after)["resources"] == {"requests": {}, "limits": {}}
    assert {v["name"]: v for v in pod["volumes"]}["vllm-storage"] == {"name": "vllm-storage", "emptyDir": {}}
