"""logprobs (chat and completions) and echo (completions): vLLM's shapes, deterministic values."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.api.response_models import ChatCompletionChunk, ChatCompletionResponse, CompletionChunk, CompletionResponse
from llmsim.runtime import build_runtime

CONFIG = """
version: 1
models:
  - {name: m, engine: instant, context_length: 256}
"""

RESPONSES = """
version: 1
responses:
  - id: greet
    match: {exact: "Hello!"}
    content: "Hi there, how can I help?"
default:
  content: "I am a simulator."
"""

ANSWER = ["Hi", " there", ",", " how", " can", " I", " help", "?"]


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    runtime = build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml")
    transport = httpx.ASGITransport(app=runtime.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def events(body: str) -> list[Any]:
    data = [line[len("data: ") :] for line in body.split("\n\n") if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(e) for e in data[:-1]]


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "Hello!"}], **kw}


def expected_logprob(token: str, position: int) -> float:
    # The documented formula (llm/logprobs.py), computed here independently.
    digest = hashlib.blake2b(position.to_bytes(8, "big") + token.encode(), digest_size=16).digest()
    return math.log(0.5 + 0.5 * int.from_bytes(digest[:8], "big") / 2**64)


async def test_chat_logprobs_shape_and_values(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat(logprobs=True, top_logprobs=3))
    body = r.json()
    ChatCompletionResponse.model_validate(body)
    content = body["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in content] == ANSWER
    for position, entry in enumerate(content):
        assert entry["logprob"] == pytest.approx(expected_logprob(entry["token"], position), abs=1e-12)
        assert entry["bytes"] == list(entry["token"].encode())
        top = entry["top_logprobs"]
        assert len(top) == 3
        assert (top[0]["token"], top[0]["logprob"]) == (entry["token"], entry["logprob"])
        values = [t["logprob"] for t in top]
        assert values == sorted(values, reverse=True)
        assert len(set(values)) == 3
        assert len({t["token"] for t in top}) == 3
        assert sum(math.exp(v) for v in values) < 1
    again = await http.post("/v1/chat/completions", json=chat(logprobs=True, top_logprobs=3))
    assert again.json()["choices"][0]["logprobs"] == body["choices"][0]["logprobs"]


async def test_chat_logprobs_without_top_and_absent_when_not_asked(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat(logprobs=True))
    assert all(e["top_logprobs"] == [] for e in r.json()["choices"][0]["logprobs"]["content"])
    plain = await http.post("/v1/chat/completions", json=chat())
    assert plain.json()["choices"][0]["logprobs"] is None


async def test_streamed_chat_logprobs_are_the_whole_ones_split_per_chunk(http: httpx.AsyncClient) -> None:
    whole = (await http.post("/v1/chat/completions", json=chat(logprobs=True, top_logprobs=2))).json()
    r = await http.post("/v1/chat/completions", json=chat(logprobs=True, top_logprobs=2, stream=True))
    chunks = events(r.text)
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
    assert chunks[0]["choices"][0]["logprobs"] is None  # the role chunk
    streamed = [c["choices"][0]["logprobs"]["content"] for c in chunks[1:]]
    assert all(len(s) == 1 for s in streamed)
    assert [s[0] for s in streamed] == whole["choices"][0]["logprobs"]["content"]
    assert [c["choices"][0]["delta"]["content"] for c in chunks[1:]] == ANSWER
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_completion_logprobs(http: httpx.AsyncClient) -> None:
    for k, entries in ((0, 1), (1, 1), (4, 4)):
        r = await http.post("/v1/completions", json={"model": "m", "prompt": "Hello!", "logprobs": k, "max_tokens": 20})
        body = r.json()
        CompletionResponse.model_validate(body)
        lp = body["choices"][0]["logprobs"]
        assert lp["tokens"] == ANSWER
        # text_offset: where each token starts in the text.
        assert lp["text_offset"] == [0, 2, 8, 9, 13, 17, 19, 24]
        assert [len(d) for d in lp["top_logprobs"]] == [entries] * len(ANSWER)
        for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
            assert top[token] == value == max(top.values())


async def test_streamed_completion_logprobs_offsets_run_on(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/completions", json={"model": "m", "prompt": "Hello!", "logprobs": 2, "stream": True})
    chunks = events(r.text)
    for c in chunks:
        CompletionChunk.model_validate(c)
    assert [c["choices"][0]["logprobs"]["text_offset"] for c in chunks] == [[0], [2], [8], [9], [13], [17], [19], [24]]


async def test_echo_says_the_prompt_back(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/completions", json={"model": "m", "prompt": "Hello!", "echo": True, "max_tokens": 20})
    body = r.json()
    assert body["choices"][0]["text"] == "Hello!Hi there, how can I help?"
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 11, "completion_tokens": 8}
    only = await http.post("/v1/completions", json={"model": "m", "prompt": "Hello!", "echo": True, "max_tokens": 0})
    choice = only.json()["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == ("Hello!", "length")
    assert only.json()["usage"]["completion_tokens"] == 0


async def test_echo_with_logprobs_scores_the_prompt_but_its_first_token(http: httpx.AsyncClient) -> None:
    payload = {"model": "m", "prompt": "Hello!", "echo": True, "logprobs": 1, "max_tokens": 2}
    lp = (await http.post("/v1/completions", json=payload)).json()["choices"][0]["logprobs"]
    # The prompt with its BOS (as vLLM echoes prompt token ids), then the answer.
    assert lp["tokens"] == ["<|begin_of_text|>", "Hello", "!", "Hi", " there"]
    assert lp["token_logprobs"][0] is None
    assert lp["top_logprobs"][0] is None
    assert all(v is not None for v in lp["token_logprobs"][1:])
    assert lp["text_offset"] == [0, 17, 22, 23, 25]


async def test_streamed_echo_comes_with_the_first_token(http: httpx.AsyncClient) -> None:
    payload = {"model": "m", "prompt": "Hello!", "echo": True, "stream": True, "n": 2, "max_tokens": 2}
    chunks = events((await http.post("/v1/completions", json=payload)).text)
    by_choice: dict[int, list[str]] = {0: [], 1: []}
    for c in chunks:
        by_choice[c["choices"][0]["index"]].append(c["choices"][0]["text"])
    assert by_choice == {0: ["Hello!Hi", " there"], 1: ["Hello!Hi", " there"]}
    only = {"model": "m", "prompt": "Hello!", "echo": True, "stream": True, "max_tokens": 0}
    chunks = events((await http.post("/v1/completions", json=only)).text)
    assert [(c["choices"][0]["text"], c["choices"][0]["finish_reason"]) for c in chunks] == [("Hello!", "length")]


async def test_echo_of_token_ids_is_their_text(http: httpx.AsyncClient) -> None:
    ids = (await http.post("/tokenize", json={"prompt": "the river", "add_special_tokens": False})).json()["tokens"]
    r = await http.post("/v1/completions", json={"model": "m", "prompt": ids, "echo": True, "max_tokens": 1})
    assert r.json()["choices"][0]["text"] == "the riverI"


@pytest.mark.parametrize(
    ("path", "extra", "message", "param"),
    [
        (
            "/v1/chat/completions",
            {"top_logprobs": 2},
            "when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)",
            "top_logprobs",
        ),
        (
            "/v1/chat/completions",
            {"logprobs": True, "top_logprobs": -2},
            "`top_logprobs` must be a positive value or -1. (parameter=top_logprobs, value=-2)",
            "top_logprobs",
        ),
        (
            "/v1/chat/completions",
            {"logprobs": True, "top_logprobs": "x"},
            "`top_logprobs` must be an integer. (parameter=top_logprobs, value=x)",
            "top_logprobs",
        ),
        (
            "/v1/chat/completions",
            {"logprobs": True, "top_logprobs": 21},
            "Requested sample logprobs of 21, which is greater than max allowed: 20 (parameter=logprobs, value=21)",
            "logprobs",
        ),
        (
            "/v1/completions",
            {"logprobs": 21},
            "Requested sample logprobs of 21, which is greater than max allowed: 20 (parameter=logprobs, value=21)",
            "logprobs",
        ),
        (
            "/v1/completions",
            {"logprobs": -1},
            "Requested sample logprobs of 128256, which is greater than max allowed: 20 (parameter=logprobs, value=128256)",
            "logprobs",
        ),
    ],
)
async def test_logprobs_vllm_refuses(
    http: httpx.AsyncClient, path: str, extra: dict[str, Any], message: str, param: str
) -> None:
    base = chat() if path == "/v1/chat/completions" else {"model": "m", "prompt": "Hello!"}
    r = await http.post(path, json={**base, **extra})
    assert r.status_code == 400
    assert r.json() == {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}
