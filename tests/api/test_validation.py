"""Bodies vLLM refuses are refused here too, with vLLM 0.34's status, type, param and text.

Expected bodies are vLLM's, as captured from its error handlers (notes/vllm-api-faults.md §8) or
written from its messages in ``SamplingParams`` and the request models; none is llmsim's output
copied back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.runtime import build_runtime

CONFIG = """
version: 1
models:
  - {name: instant, engine: instant, context_length: 256}
"""


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    (tmp_path / "models.yml").write_text(CONFIG)
    runtime = build_runtime(tmp_path / "models.yml")
    transport = httpx.ASGITransport(app=runtime.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": "instant", "messages": [{"role": "user", "content": "hi"}], **kw}


def completion(**kw: Any) -> dict[str, Any]:
    return {"model": "instant", "prompt": "hi", **kw}


def error(message: str, err_type: str, param: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": 400}}


async def test_temperature_that_is_not_a_number(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat(temperature="hot"))
    assert r.status_code == 400
    assert r.json() == error(
        "1 validation error:\n  {'type': 'float_parsing', 'loc': 'body.temperature', 'msg': 'Input should be a "
        "valid number, unable to parse string as a number', 'input': 'hot'}",
        "Bad Request",
        "body.temperature",
    )


async def test_a_numeric_string_is_a_number_as_in_vllm(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat(temperature="0.5"))
    assert r.status_code == 200


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)"),
        (2.5, "temperature must be in [0, 2], got 2.5. (parameter=temperature, value=2.5)"),
        ("inf", "temperature must be a finite number, got inf. (parameter=temperature, value=inf)"),
    ],
)
async def test_temperature_out_of_range(http: httpx.AsyncClient, value: Any, message: str) -> None:
    r = await http.post("/v1/completions", json=completion(temperature=value))
    assert r.status_code == 400
    assert r.json() == error(message, "BadRequestError", "temperature")


@pytest.mark.parametrize(
    ("field", "message", "param"),
    [
        ({"top_p": 0}, "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)", "top_p"),
        ({"presence_penalty": 2.1}, "presence_penalty must be in [-2, 2], got 2.1.", None),
        ({"frequency_penalty": -2.1}, "frequency_penalty must be in [-2, 2], got -2.1.", None),
        ({"repetition_penalty": 0}, "repetition_penalty must be greater than zero, got 0.0.", None),
        ({"min_p": -0.1}, "min_p must be in [0, 1], got -0.1.", None),
        ({"top_k": -2}, "top_k must be 0 (disable), or at least 1, got -2.", None),
        (
            {"max_completion_tokens": -1},
            "max_tokens must be at least 1, got -1. (parameter=max_tokens, value=-1)",
            "max_tokens",
        ),
        ({"min_tokens": 5, "max_tokens": 4}, "min_tokens must be less than or equal to max_tokens=4, got 5.", None),
        ({"stop": ["done", ""]}, "stop cannot contain an empty string.", None),
        (
            {"stream_options": {"include_usage": True}},
            "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
            "stream_options",
        ),
    ],
)
async def test_sampling_parameters_vllm_refuses(
    http: httpx.AsyncClient, field: dict[str, Any], message: str, param: str | None
) -> None:
    r = await http.post("/v1/chat/completions", json=chat(**field))
    assert r.status_code == 400
    assert r.json() == error(message, "BadRequestError", param)


async def test_seed_outside_int64(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", json=chat(seed=2**63))
    assert r.status_code == 400
    assert r.json() == error(
        "1 validation error:\n  {'type': 'less_than_equal', 'loc': 'body.seed', 'msg': 'Input should be less than "
        "or equal to 9223372036854775807', 'input': '9223372036854775808', 'ctx': {'le': 9223372036854775807}}",
        "Bad Request",
        "body.seed",
    )
    assert (await http.post("/v1/chat/completions", json=chat(seed=-(2**63)))).status_code == 200


@pytest.mark.parametrize("prompt", [[[]], []])
async def test_empty_token_prompt(http: httpx.AsyncClient, prompt: Any) -> None:
    r = await http.post("/v1/completions", json=completion(prompt=prompt))
    assert r.status_code == 400
    assert r.json() == error("The decoder prompt cannot be empty", "BadRequestError", None)


@pytest.mark.parametrize("prompt", [None, ""])
async def test_missing_prompt(http: httpx.AsyncClient, prompt: Any) -> None:
    r = await http.post("/v1/completions", json=completion(prompt=prompt))
    assert r.status_code == 400
    assert r.json() == error(
        "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)", "BadRequestError", "prompt"
    )


async def test_negative_token_id(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/completions", json=completion(prompt=[1, -2]))
    assert r.status_code == 400
    err = r.json()["error"]
    # Every branch of vLLM's prompt union fails: list[int] at item 1, list[list[int]] at items 0 and 1, str, list[str] twice.
    assert err["message"].startswith(
        "6 validation errors:\n  {'type': 'greater_than_equal', 'loc': 'body.prompt.1', 'msg': 'Input should be "
        "greater than or equal to 0', 'input': '-2', 'ctx': {'ge': 0}}\n  {'type': 'list_type', 'loc': "
        "'body.prompt.0', 'msg': 'Input should be a valid list', 'input': '1'}"
    )
    assert (err["type"], err["param"]) == ("Bad Request", "body.prompt.1")


@pytest.mark.parametrize("prompt", [[5, 2**31], [[1], [2**31 + 7, 3]]])
async def test_token_id_out_of_vocabulary(http: httpx.AsyncClient, prompt: Any) -> None:
    # The regex tokenizer's ids run from 0 to 2**31 - 1 (llm/vocabulary.py).
    r = await http.post("/v1/completions", json=completion(prompt=prompt))
    assert r.status_code == 400
    top = max(max(p) if isinstance(p, list) else p for p in prompt)
    assert r.json() == error(f"Token id {top} is out of vocabulary", "BadRequestError", None)
    assert (await http.post("/v1/completions", json=completion(prompt=[0, 2**31 - 1]))).status_code == 200


UNSUPPORTED = error(
    "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed", "Bad Request", None
)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
async def test_body_without_json_content_type(http: httpx.AsyncClient, path: str, content_type: str | None) -> None:
    body = chat() if path == "/v1/chat/completions" else completion()
    headers = {} if content_type is None else {"content-type": content_type}
    r = await http.post(path, content=httpx.Response(200, json=body).content, headers=headers)
    assert r.status_code == 400
    assert r.json() == UNSUPPORTED
    ok = await http.post(path, json=body, headers={"content-type": "Application/JSON; charset=utf-8"})
    assert ok.status_code == 200


async def test_malformed_json_is_reported_at_its_byte_offset(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/chat/completions", content=b'{"model": }', headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json() == error(
        "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.10', 'msg': 'JSON decode error', "
        "'input': '<dict of 0 items>', 'ctx': {'error': 'Expecting value'}}",
        "Bad Request",
        "body.10",
    )


async def test_user_message_without_content_is_accepted_as_vllm_does(http: httpx.AsyncClient) -> None:
    # Often listed among the cases vLLM refuses; vLLM 0.34 accepts it (its custom message
    # param requires only `role`; a missing content renders as empty), so llmsim does too.
    r = await http.post("/v1/chat/completions", json={"model": "instant", "messages": [{"role": "user"}]})
    assert r.status_code == 200


async def test_405_names_the_allowed_methods(http: httpx.AsyncClient) -> None:
    pairs = (
        ("/v1/completions", "POST"),
        ("/v1/chat/completions", "POST"),
        ("/v1/models", "GET"),
        ("/tokenize", "POST"),
    )
    for path, allow in pairs:
        r = await http.put(path)
        assert r.status_code == 405
        assert r.headers["allow"] == allow
        assert r.json()["error"]["code"] == 405
