"""/v1/embeddings: OpenAI's shape, deterministic unit vectors of the configured dimension, through the engine."""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmsim.api.response_models import EmbeddingResponse
from llmsim.runtime import build_runtime

CONFIG = """
version: 1
models:
  - {name: embed, engine: instant, context_length: 64, embeddings: {dimensions: 256}}
  - {name: chat, engine: instant, context_length: 64}
  - name: gpu-embed
    engine: scheduler
    hardware: h100-80gb
    context_length: 4096
    weights: {parameters_billions: 0.6}
    kv_cache: {bytes_per_token: 114688}
    embeddings: {dimensions: 32}
"""


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    (tmp_path / "models.yml").write_text(CONFIG)
    runtime = build_runtime(tmp_path / "models.yml")
    async with runtime.app.router.lifespan_context(runtime.app):
        transport = httpx.ASGITransport(app=runtime.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


async def embed(http: httpx.AsyncClient, **kw: Any) -> Any:
    r = await http.post("/v1/embeddings", json={"model": "embed", **kw})
    assert r.status_code == 200, r.text
    EmbeddingResponse.model_validate(r.json())
    return r.json()


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_shape_and_unit_vectors(http: httpx.AsyncClient) -> None:
    body = await embed(http, input=["the river", "a bridge over the river"])
    assert list(body) == ["id", "object", "created", "model", "data", "usage"]
    assert re.fullmatch(r"embd-[0-9a-f]{32}", body["id"])
    assert (body["object"], body["model"]) == ("list", "embed")
    assert [(d["index"], d["object"], len(d["embedding"])) for d in body["data"]] == [
        (0, "embedding", 256),
        (1, "embedding", 256),
    ]
    for d in body["data"]:
        assert math.fsum(x * x for x in d["embedding"]) == pytest.approx(1.0)
    # BOS + 2 tokens, BOS + 5 tokens.
    assert body["usage"] == {
        "prompt_tokens": 9,
        "total_tokens": 9,
        "completion_tokens": 0,
        "completion_tokens_details": None,
    }


async def test_one_word_is_its_hashed_features(http: httpx.AsyncClient) -> None:
    # Independently of the code: "river" -> blake2b(32 bytes); 8 x (3-byte coordinate mod 256, sign bit), normalized.
    digest = hashlib.blake2b(b"river", digest_size=32).digest()
    expected = [0.0] * 256
    for j in range(8):
        expected[int.from_bytes(digest[4 * j : 4 * j + 3], "big") % 256] += 1 if digest[4 * j + 3] & 1 else -1
    norm = math.sqrt(sum(x * x for x in expected))
    body = await embed(http, input="River", add_special_tokens=False)
    assert body["data"][0]["embedding"] == pytest.approx([x / norm for x in expected])


async def test_deterministic_and_similar_texts_point_alike(http: httpx.AsyncClient) -> None:
    texts = ["the old bridge over the river", "the old bridge over the water", "quantum chromodynamics lattice"]
    first = [d["embedding"] for d in (await embed(http, input=texts))["data"]]
    again = [d["embedding"] for d in (await embed(http, input=texts))["data"]]
    assert first == again
    assert cosine(first[0], first[1]) > 0.6 > cosine(first[0], first[2])


async def test_token_ids_and_base64(http: httpx.AsyncClient) -> None:
    ids = (await http.post("/tokenize", json={"model": "embed", "prompt": "the river"})).json()["tokens"]
    by_ids = (await embed(http, input=ids))["data"][0]["embedding"]
    by_text = (await embed(http, input="the river"))["data"][0]["embedding"]
    assert by_ids == by_text
    packed = (await embed(http, input="the river", encoding_format="base64"))["data"][0]["embedding"]
    raw = base64.b64decode(packed)
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(by_text, abs=1e-7)


async def test_without_a_model_the_first_embedding_model_answers(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/embeddings", json={"input": "x"})
    assert r.json()["model"] == "embed"


async def test_dimensions_cut_and_renormalize(http: httpx.AsyncClient) -> None:
    full = (await embed(http, input="the river bridge"))["data"][0]["embedding"]
    cut = (await embed(http, input="the river bridge", dimensions=64))["data"][0]["embedding"]
    norm = math.sqrt(sum(x * x for x in full[:64]))
    assert cut == pytest.approx([x / norm for x in full[:64]])


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        ({"input": "x", "dimensions": 257}, 400, "Model 'embed' only supports dimensions in range [1, 256], got 257."),
        ({"input": [5, 128256]}, 400, "Token id 128256 is out of vocabulary"),
        (
            # BOS, 70 words, the trailing space.
            {"input": "word " * 70},
            400,
            "This model's maximum context length is 64 tokens. However, you requested 72 tokens in the input for "
            "embedding generation. Please reduce the length of the input.",
        ),
        ({"model": "chat", "input": "x"}, 404, "The model `chat` does not support the Embeddings API."),
        ({"model": "nope", "input": "x"}, 404, "The model `nope` does not exist."),
    ],
)
async def test_refusals(http: httpx.AsyncClient, payload: dict[str, Any], status: int, message: str) -> None:
    r = await http.post("/v1/embeddings", json={"model": "embed", **payload})
    assert r.status_code == status
    assert r.json()["error"]["message"] == message


async def test_the_prompt_is_prefilled_on_the_engine(http: httpx.AsyncClient) -> None:
    body = (await http.post("/v1/embeddings", json={"model": "gpu-embed", "input": "the river " * 100})).json()
    # BOS, 100 x (the, river), the trailing space.
    assert body["usage"]["prompt_tokens"] == 202
    metrics = (await http.get("/metrics")).text

    # The scheduler ran it as a request of 202 prompt tokens that generated nothing.
    def value(name: str) -> float:
        line = next(x for x in metrics.splitlines() if x.startswith(name + "{") and 'model_name="gpu-embed"' in x)
        return float(line.rsplit(" ", 1)[1])

    assert value("vllm:request_prompt_tokens_sum") == 202
    assert value("vllm:request_generation_tokens_sum") == 0
