"""The routes routers call besides completions, in-process: render, token-in/token-out, load, SGLang's info.

And the extra body fields the P/D and DP routers add to completion requests: accepted, as vLLM accepts them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.api.response_models import (
    ErrorResponse,
    GenerateResponse,
    GenerateStreamResponse,
    GetLoadResponse,
    LoadsResponse,
    ModelInfo,
    RenderedPrompt,
    RenderedPrompts,
    ServerInfo,
)
from llmsim.runtime import Runtime
from llmsim.types import GenerationPlan, RequestId
from tests.api.app_client import app_client, runtime_of
from tests.llm.test_token_ids import write_tokenizer_json
from tests.metrics.scrape import parse

# A fast toy GPU with a prefix cache, so the plans carry the prompt ids the engine hashes.
CONFIG = """
version: 1
hardware:
  toy: {hbm_gib: 2, memory_bandwidth_gbps: 2000, peak_tflops: 400}
models:
  - name: base
    engine: scheduler
    hardware: toy
    context_length: 1024
    weights: {parameters_billions: 0.01}
    kv_cache: {bytes_per_token: 1024, block_size: 16}
    enable_prompt_tokens_details: true
"""
RESPONSES = """
version: 1
responses: []
default:
  content: "Fine, thank you."
"""
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How are you today?"}]

#: What vllm-router adds to every P/D leg (chat: also ``logprobs: false``), and sglang-router to its
#: P/D and DP bodies.
ROUTER_FIELDS: dict[str, Any] = {
    "no_stop_trim": True,
    "ignore_eos": False,
    "continue_final_message": False,
    "skip_special_tokens": True,
    "separate_reasoning": True,
    "stream_reasoning": True,
    "return_hidden_states": False,
    "include_reasoning": True,
    "min_tokens": 1,
    "max_completion_tokens": 1,
    "data_parallel_rank": 0,
    "bootstrap_host": "10.0.0.7",
    "bootstrap_port": 8998,
    "bootstrap_room": 6_917_529_027_641_081_856,
    "kv_transfer_params": {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    },
}


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    return runtime_of(tmp_path, CONFIG, RESPONSES)


@pytest.fixture
async def http(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    async with app_client(runtime) as client:
        yield client


def record_submits(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[GenerationPlan]:
    """Every plan the engine is handed from now on, in order."""
    engine = runtime.state.models["base"].engine
    seen: list[GenerationPlan] = []
    submit = engine.submit

    async def recording(plans: Sequence[GenerationPlan], arrival: float, ids: Sequence[RequestId]) -> Any:
        seen.extend(plans)
        return await submit(plans, arrival, ids)

    monkeypatch.setattr(engine, "submit", recording)
    return seen


@pytest.fixture
def submitted(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[GenerationPlan]:
    return record_submits(runtime, monkeypatch)


def sse_data(text: str) -> list[Any]:
    events = [line[len("data: ") :] for line in text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


async def test_chat_render_gives_the_ids_the_engine_hashes(
    http: httpx.AsyncClient, submitted: list[GenerationPlan]
) -> None:
    r = await http.post("/v1/chat/completions/render", json={"model": "base", "messages": MESSAGES})
    assert r.status_code == 200
    body = RenderedPrompt.model_validate(r.json())
    assert list(r.json())[:4] == ["request_id", "token_ids", "features", "sampling_params"]
    assert not submitted  # rendering queues nothing
    await http.post("/v1/chat/completions", json={"model": "base", "messages": MESSAGES})
    (plan,) = submitted
    assert plan.prompt_token_ids is not None
    assert body.token_ids == list(plan.prompt_token_ids)
    # vLLM's /tokenize renders a chat with the same template (generation prompt on, no BOS).
    tokenized = await http.post("/tokenize", json={"model": "base", "messages": MESSAGES})
    assert tokenized.json()["tokens"] == body.token_ids
    # max_tokens unset: what the context leaves, as vLLM fills it in.
    assert body.sampling_params["max_tokens"] == 1024 - len(body.token_ids)
    assert (body.model, body.stream, body.kv_transfer_params) == ("base", False, None)
    assert body.request_id.startswith("chatcmpl-")


async def test_completions_render_gives_one_body_per_prompt(
    http: httpx.AsyncClient, submitted: list[GenerationPlan]
) -> None:
    prompts = ["The quick brown fox", "jumps over"]
    r = await http.post("/v1/completions/render", json={"model": "base", "prompt": prompts, "max_tokens": 4})
    assert r.status_code == 200
    rendered = RenderedPrompts.model_validate(r.json()).root
    assert [p.sampling_params["max_tokens"] for p in rendered] == [4, 4]
    ids = await http.post("/v1/completions/render", json={"model": "base", "prompt": [5, 6, 7]})
    assert [p["token_ids"] for p in ids.json()] == [[5, 6, 7]]
    await http.post("/v1/completions", json={"model": "base", "prompt": prompts, "max_tokens": 4})
    assert [list(p.prompt_token_ids or ()) for p in submitted] == [p.token_ids for p in rendered]
    tokenized = await http.post("/tokenize", json={"model": "base", "prompt": prompts[0]})
    assert tokenized.json()["tokens"] == rendered[0].token_ids


async def test_render_errors_are_openai_shaped(http: httpx.AsyncClient) -> None:
    missing = await http.post("/v1/chat/completions/render", json={"model": "nope", "messages": MESSAGES})
    assert missing.status_code == 404
    assert missing.json()["error"]["param"] == "model"
    empty = await http.post("/v1/completions/render", json={"model": "base", "prompt": ""})
    assert empty.status_code == 400
    assert empty.json()["error"]["param"] == "prompt"
    long = await http.post("/v1/completions/render", json={"model": "base", "prompt": "word " * 2000})
    assert long.status_code == 400
    assert long.json()["error"]["param"] == "input_tokens"


async def test_generate_takes_and_gives_token_ids(http: httpx.AsyncClient, submitted: list[GenerationPlan]) -> None:
    body = {"token_ids": [11, 12, 13, 14], "sampling_params": {"max_tokens": 3, "n": 2}, "request_id": "abc"}
    r = await http.post("/inference/v1/generate", json=body)
    assert r.status_code == 200
    answer = GenerateResponse.model_validate(r.json())
    assert answer.request_id == "generate-tokens-abc"
    assert [c.index for c in answer.choices] == [0, 1]
    assert all(
        c.finish_reason == "length" and c.token_ids is not None and len(c.token_ids) == 3 for c in answer.choices
    )
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (4, 6)
    assert [p.prompt_token_ids for p in submitted] == [(11, 12, 13, 14)] * 2
    # The ids out are the ids of the tokens the engine released.
    assert answer.choices[0].token_ids == list(submitted[0].token_ids or ())
    page = parse((await http.get("/metrics")).text)
    labels = {"model_name": "base", "engine": "0"}
    # Each choice is a request on the engine, as for /v1/completions with n: 2.
    assert page.get("vllm:prompt_tokens_total", **labels) == 2 * 4
    assert page.get("vllm:generation_tokens_total", **labels) == 6


async def test_generate_streams_a_token_per_event_then_usage(http: httpx.AsyncClient) -> None:
    body = {
        "token_ids": [11, 12, 13],
        "sampling_params": {"max_tokens": 2},
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r = await http.post("/inference/v1/generate", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [GenerateStreamResponse.model_validate(e) for e in sse_data(r.text)]
    assert [len(e.choices) for e in events] == [1, 1, 0]
    assert [e.choices[0].finish_reason for e in events[:2]] == [None, "length"]
    assert all(e.choices[0].token_ids is not None and len(e.choices[0].token_ids) == 1 for e in events[:2])
    usage = events[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (3, 2, 5)


async def test_a_rendered_chat_runs_on_generate(http: httpx.AsyncClient, submitted: list[GenerationPlan]) -> None:
    rendered = (await http.post("/v1/chat/completions/render", json={"model": "base", "messages": MESSAGES})).json()
    r = await http.post("/inference/v1/generate", json=rendered)
    assert r.status_code == 200
    assert list(submitted[0].prompt_token_ids or ()) == rendered["token_ids"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"token_ids": [], "sampling_params": {}}, None),
        ({"token_ids": [10**12], "sampling_params": {}}, None),
        ({"token_ids": [1], "sampling_params": {"max_tokens": 0}}, "sampling_params.max_tokens"),
        ({"token_ids": [1], "sampling_params": {"n": 0}}, "sampling_params.n"),
        ({"token_ids": [1]}, "body.sampling_params"),
        ({"token_ids": [-1], "sampling_params": {}}, "body.token_ids.0"),
    ],
)
async def test_generate_refuses_what_vllm_refuses(http: httpx.AsyncClient, body: dict[str, Any], param: str) -> None:
    r = await http.post("/inference/v1/generate", json=body)
    assert r.status_code == 400
    error = ErrorResponse.model_validate(r.json()).error
    assert (error.param, error.code) == (param, 400)


async def test_generate_for_an_unknown_model_is_404(http: httpx.AsyncClient) -> None:
    r = await http.post("/inference/v1/generate", json={"model": "nope", "token_ids": [1], "sampling_params": {}})
    assert r.status_code == 404


async def test_get_load_and_sglang_info(http: httpx.AsyncClient) -> None:
    load = (await http.get("/get_load")).json()
    assert GetLoadResponse.model_validate(load).load == 0
    assert list(load) == ["load"]
    loads = LoadsResponse.model_validate((await http.get("/v1/loads", params={"include": "core"})).json())
    assert (loads.aggregate.total_tokens, loads.loads[0].dp_rank) == (0, 0)
    info = ServerInfo.model_validate((await http.get("/server_info")).json())
    assert (info.dp_size, info.model_path, info.context_length) == (1, "base", 1024)
    model = ModelInfo.model_validate((await http.get("/model_info")).json())
    assert (model.model_path, model.is_generation) == ("base", True)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_the_routers_extra_fields_are_accepted_and_named_in_the_log(
    http: httpx.AsyncClient, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    chat = path.endswith("chat/completions")
    shape: dict[str, Any] = {"messages": MESSAGES, "logprobs": False} if chat else {"prompt": "Hi"}
    with caplog.at_level(logging.WARNING, logger="llmsim.api"):
        r = await http.post(path, json={"model": "base", **shape, **ROUTER_FIELDS, "max_tokens": 1})
    assert r.status_code == 200
    assert r.json()["choices"][0]["finish_reason"] == "length"
    ignored = [rec.getMessage() for rec in caplog.records if "ignored" in rec.getMessage()]
    assert len(ignored) == 1
    assert "bootstrap_room" in ignored[0]
    # SGLang's data_parallel_rank is acted on (the rank a request runs on), so not named.
    assert "data_parallel_rank" not in ignored[0]


async def test_with_a_tokenizer_json_render_still_gives_the_hashed_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokenizer_json = write_tokenizer_json(tmp_path / "tokenizer.json")
    config = CONFIG.replace(
        "    enable_prompt_tokens_details: true\n",
        f"    enable_prompt_tokens_details: true\n    tokenizer: {{path: {tokenizer_json}, chat_template: chatml}}\n",
    )
    runtime = runtime_of(tmp_path, config, RESPONSES)
    seen = record_submits(runtime, monkeypatch)
    messages = [{"role": "user", "content": "Once upon a time, the river met the sea."}]
    async with app_client(runtime) as http:
        rendered = (await http.post("/v1/chat/completions/render", json={"model": "base", "messages": messages})).json()
        await http.post("/v1/chat/completions", json={"model": "base", "messages": messages})
        tokenized = (await http.post("/tokenize", json={"model": "base", "messages": messages})).json()
    (plan,) = seen
    assert rendered["token_ids"] == list(plan.prompt_token_ids or ()) == tokenized["tokens"]
