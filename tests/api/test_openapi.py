"""/openapi.json lists every route with its request and response models."""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute

from llmsim.runtime import build_runtime

CONFIG = """
version: 1
models:
  - {name: m, engine: instant}
"""


def resolve(document: dict[str, Any], ref: str) -> dict[str, Any]:
    assert ref.startswith("#/components/schemas/")
    schema: dict[str, Any] = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return schema


def test_every_route_is_documented_with_its_models(tmp_path: Any) -> None:
    (tmp_path / "models.yml").write_text(CONFIG)
    app = build_runtime(tmp_path / "models.yml").app
    document = app.openapi()
    served = {
        (route.path, method)
        for route in app.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
        if route.include_in_schema
    }
    documented = {(path, method.upper()) for path, ops in document["paths"].items() for method in ops}
    assert documented == served
    # Every route a client calls, not only the completions:
    assert {p for p, _ in documented} >= {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/models",
        "/tokenize",
        "/detokenize",
        "/health",
        "/ping",
        "/version",
        "/load",
        "/metrics",
        "/metrics/summary",
    }
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            # POSTs with a JSON body (ping, sleep and wake_up take none: their arguments are query parameters).
            if method == "post" and path not in ("/ping", "/sleep", "/wake_up"):
                body = op["requestBody"]["content"]["application/json"]["schema"]
                refs = [b["$ref"] for b in body.get("anyOf", [body])]
                for ref in refs:
                    assert "properties" in resolve(document, ref), (path, ref)
                assert "application/json" in op["responses"]["200"]["content"]
                assert "$ref" in op["responses"]["400"]["content"]["application/json"]["schema"]
    chat = document["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
    assert set(chat) == {"application/json", "text/event-stream"}
    request = resolve(document, "#/components/schemas/ChatCompletionRequest")
    assert {"messages", "model", "tools", "tool_choice", "logprobs", "top_logprobs", "response_format"} <= set(
        request["properties"]
    )
    response = resolve(document, chat["application/json"]["schema"]["$ref"])
    assert set(response["required"]) >= {"id", "created", "model", "choices", "usage"}


def test_streamed_answers_are_event_streams_of_their_chunk_model(tmp_path: Any) -> None:
    (tmp_path / "models.yml").write_text(CONFIG)
    document = build_runtime(tmp_path / "models.yml").app.openapi()
    streams = (
        ("/v1/chat/completions", "ChatCompletionChunk"),
        ("/v1/completions", "CompletionChunk"),
        ("/inference/v1/generate", "GenerateStreamResponse"),
    )
    for path, chunk in streams:
        answer = document["paths"][path]["post"]["responses"]["200"]["content"]["text/event-stream"]
        # Event by event (OpenAPI 3.2's itemSchema): `data` is [DONE], else JSON of a chunk or an error.
        data = answer["itemSchema"]["properties"]["data"]
        assert data["if"] == {"const": "[DONE]"}
        assert data["else"]["contentMediaType"] == "application/json"
        events = [e["$ref"] for e in data["else"]["contentSchema"]["anyOf"]]
        assert events == [f"#/components/schemas/{chunk}", "#/components/schemas/ErrorResponse"]
        for ref in events:
            assert "properties" in resolve(document, ref), ref
