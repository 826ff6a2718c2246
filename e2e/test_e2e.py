"""An LLMSimulator in a real cluster: Ready, answers the OpenAI SDK, exposes vLLM metrics, scales, goes away.

Traffic goes through the API server's service proxy, so no port-forward or ingress is needed:
``https://<apiserver>/api/v1/namespaces/<ns>/services/<name>:http/proxy/v1/...``.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx
import kubernetes
import openai
import pytest

pytestmark = pytest.mark.e2e

client: Any = kubernetes.client
config: Any = kubernetes.config
ApiException: Any = kubernetes.client.ApiException
GROUP, VERSION, PLURAL = "llmsim.io", "v1alpha1", "llmsimulators"
NAME = "e2e-fixed"
T = TypeVar("T")


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 240.0) -> T:
    """Poll until ``fn`` returns a truthy value (a real cluster converges in seconds to minutes)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1.0)


@pytest.fixture(scope="module")
def api() -> Iterator[Any]:
    try:
        api_client = config.new_client_from_config()
        client.VersionApi(api_client).get_code()
    except Exception as exc:  # any failure here means "no cluster"
        pytest.fail(f"E2E=1 but no reachable cluster from KUBECONFIG: {exc}", pytrace=False)
    yield api_client
    api_client.close()


@pytest.fixture(scope="module")
def namespace(api: Any) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = f"llmsim-e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def simulator(api: Any, namespace: str) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LLMSimulator",
        "metadata": {"name": NAME},
        "spec": {
            "model": {"name": "e2e-model", "profile": "qwen2.5-0.5b"},
            "hardware": {"profile": "l4-24gb"},
            "engine": "scheduler",
            "replicas": 2,
            "latency": {"stepOverheadMs": 1},
        },
    }
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    def ready() -> dict[str, Any] | None:
        obj: dict[str, Any] = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME)
        conds = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
        return obj if conds.get("Ready", {}).get("status") == "True" and obj["status"]["readyReplicas"] == 2 else None

    return wait_for("the LLMSimulator to be Ready with 2 replicas", ready)


@pytest.fixture(scope="module")
def proxy_settings(api: Any, namespace: str) -> dict[str, Any]:
    """TLS settings, headers and base URL reaching the Service through the API server's proxy."""
    cfg = api.configuration
    headers = {}
    auth = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
    if auth:
        headers["authorization"] = auth if auth.startswith("Bearer ") else f"Bearer {auth}"
    return {
        "base_url": f"{cfg.host}/api/v1/namespaces/{namespace}/services/{NAME}:http/proxy",
        "verify": cfg.ssl_ca_cert or cfg.verify_ssl,
        "cert": (cfg.cert_file, cfg.key_file) if cfg.cert_file else None,
        "headers": headers,
    }


@pytest.fixture
def proxy(proxy_settings: dict[str, Any]) -> Iterator[httpx.Client]:
    """An httpx client whose base URL is the Service, through the API server's proxy."""
    with httpx.Client(timeout=30, **proxy_settings) as http:
        yield http


def test_status(simulator: dict[str, Any], namespace: str) -> None:
    status = simulator["status"]
    assert status["endpoint"] == f"http://{NAME}.{namespace}.svc:8000"
    assert status["ready"] == "2/2"
    # qwen2.5-0.5b on l4-24gb: (24 GiB x 0.9 - 0.49e9 x 2 B) / (12,288 B x 16) = 112,980.3 -> 112,980 blocks
    assert status["kvCacheBlocks"] == int((24 * 2**30 * 0.9 - 0.49e9 * 2) // (12288 * 16)) == 112980


def test_chat_completion_with_the_openai_sdk(
    simulator: dict[str, Any], proxy: httpx.Client, proxy_settings: dict[str, Any]
) -> None:
    # The SDK brings its own HTTP client class: give it the proxy's TLS settings and headers.
    sdk_http = openai.DefaultHttpxClient(
        verify=proxy_settings["verify"], cert=proxy_settings["cert"], headers=proxy_settings["headers"], timeout=30
    )
    sdk = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="unused", http_client=sdk_http)
    assert [m.id for m in sdk.models.list().data] == ["e2e-model"]
    reply = sdk.chat.completions.create(model="e2e-model", messages=[{"role": "user", "content": "ping"}])
    assert reply.choices[0].message.content == "pong"
    stream = sdk.chat.completions.create(model="e2e-model", messages=[{"role": "user", "content": "ping"}], stream=True)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == "pong"


def test_metrics_use_vllm_names_and_the_operators_capacity(simulator: dict[str, Any], proxy: httpx.Client) -> None:
    text = proxy.get("/metrics").text
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert name in text
    blocks = re.search(r'vllm:cache_config_info\{[^}]*num_gpu_blocks="(\d+)"', text)
    assert blocks is not None
    assert int(blocks.group(1)) == simulator["status"]["kvCacheBlocks"]


def test_scale_subresource_drives_the_deployment(api: Any, simulator: dict[str, Any], namespace: str) -> None:
    custom = client.CustomObjectsApi(api)
    apps = client.AppsV1Api(api)
    custom.patch_namespaced_custom_object_scale(GROUP, VERSION, namespace, PLURAL, NAME, {"spec": {"replicas": 1}})
    wait_for("the Deployment to follow", lambda: apps.read_namespaced_deployment(NAME, namespace).spec.replicas == 1)
    wait_for(
        "status.ready 1/1",
        lambda: (
            custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME)["status"]["ready"] == "1/1"
        ),
    )


def test_delete_garbage_collects_children(api: Any, simulator: dict[str, Any], namespace: str) -> None:
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME)

    def gone() -> bool:
        try:
            core.read_namespaced_service(NAME, namespace)
        except ApiException as exc:
            return bool(exc.status == 404)
        return False

    wait_for("the Service to be garbage-collected", gone)
