"""vLLM's /tokenize and /detokenize: request and response shapes, counts that agree with usage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.api.response_models import DetokenizeResponse, TokenizeResponse
from llmsim.llm.vocabulary import VOCABULARY
from llmsim.runtime import build_runtime

CONFIG = """
version: 1
models:
  - {name: first, engine: instant, context_length: 512}
  - {name: second, engine: instant, context_length: 1024}
"""

BOS, SH, EH, EOT = "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    (tmp_path / "models.yml").write_text(CONFIG)
    runtime = build_runtime(tmp_path / "models.yml")
    transport = httpx.ASGITransport(app=runtime.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


async def test_tokenize_a_prompt(http: httpx.AsyncClient) -> None:
    r = await http.post(
        "/tokenize", json={"model": "second", "prompt": "Hello world, 2026!", "return_token_strs": True}
    )
    assert r.status_code == 200
    body = r.json()
    TokenizeResponse.model_validate(body)
    # BOS, then the regex tokenizer's split: Hello | ' world' | , | ' ' | 202 | 6 | !
    strs = [BOS, "Hello", " world", ",", " ", "202", "6", "!"]
    assert list(body) == ["count", "max_model_len", "tokens", "token_strs"]
    assert body["count"] == 8
    assert body["max_model_len"] == 1024
    assert body["token_strs"] == strs
    assert body["tokens"] == [VOCABULARY.id(s) for s in strs]
    # BOS sits at the top of Llama 3's 128,256 ids, among the 5 special tokens.
    assert body["tokens"][0] == 128256 - 5


async def test_without_special_tokens_and_token_strs_null(http: httpx.AsyncClient) -> None:
    r = await http.post("/tokenize", json={"prompt": "Hello world", "add_special_tokens": False})
    body = r.json()
    assert body["count"] == 2
    assert body["token_strs"] is None
    assert body["max_model_len"] == 512  # no model: the first served one, as vLLM


async def test_tokenize_chat_messages_through_the_template(http: httpx.AsyncClient) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    r = await http.post("/tokenize", json={"model": "first", "messages": messages, "return_token_strs": True})
    body = r.json()
    expected = [SH, "system", EH, "Be", " brief", ".", EOT, SH, "user", EH, "Hi", EOT, SH, "assistant", EH]
    assert body["token_strs"] == expected
    assert body["count"] == 15
    no_prompt = await http.post("/tokenize", json={"messages": messages, "add_generation_prompt": False})
    assert no_prompt.json()["count"] == 12


@pytest.mark.parametrize(
    ("path", "payload", "tokenize"),
    [
        (
            "/v1/completions",
            {"prompt": "The quick brown fox, 12345 times."},
            {"prompt": "The quick brown fox, 12345 times."},
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "What is llmsim?"}, {"role": "assistant", "content": "A sim."}]},
            {"messages": [{"role": "user", "content": "What is llmsim?"}, {"role": "assistant", "content": "A sim."}]},
        ),
    ],
)
async def test_count_is_what_usage_reports(
    http: httpx.AsyncClient, path: str, payload: dict[str, Any], tokenize: dict[str, Any]
) -> None:
    used = await http.post(path, json={"model": "first", "max_tokens": 1, **payload})
    counted = await http.post("/tokenize", json={"model": "first", **tokenize})
    assert counted.json()["count"] == used.json()["usage"]["prompt_tokens"]


async def test_detokenize_inverts_tokenize(http: httpx.AsyncClient) -> None:
    text = "The river and the bridge, 42 of them."
    ids = (await http.post("/tokenize", json={"prompt": text, "add_special_tokens": False})).json()["tokens"]
    r = await http.post("/detokenize", json={"model": "first", "tokens": ids})
    assert r.status_code == 200
    assert r.json() == {"prompt": text}
    DetokenizeResponse.model_validate(r.json())


async def test_detokenize_refuses_what_is_no_token(http: httpx.AsyncClient) -> None:
    negative = await http.post("/detokenize", json={"tokens": [1, -1]})
    assert negative.status_code == 400
    err = negative.json()["error"]
    assert (err["type"], err["param"]) == ("Bad Request", "body.tokens.1")
    assert err["message"].startswith("1 validation error:\n  {'type': 'greater_than_equal'")
    too_big = await http.post("/detokenize", json={"tokens": [128256]})
    assert too_big.status_code == 400
    assert too_big.json()["error"]["message"] == "Token id 128256 is out of vocabulary"


async def test_tokenize_errors(http: httpx.AsyncClient) -> None:
    unknown = await http.post("/tokenize", json={"model": "nope", "prompt": "x"})
    assert unknown.status_code == 404
    both = await http.post(
        "/tokenize", json={"messages": [{"role": "user", "content": "x"}], "continue_final_message": True}
    )
    assert both.status_code == 400
    assert both.json()["error"] == {
        "message": "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    text = await http.post("/tokenize", content=b'{"prompt": "x"}', headers={"content-type": "text/plain"})
    assert text.status_code == 400
    assert "Unsupported Media Type" in text.json()["error"]["message"]
