"""The real server process (uvicorn + uvloop + httptools) driven by real clients (openai SDK, httpx)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.metrics.scrape import Page, parse
from tests.support.server import TRANSPORTS, ServerProcess, free_port, running_server

pytestmark = pytest.mark.integration

CONFIG = """
version: 1
models:
  - name: fixed
    engine: fixed
    context_length: 2048
    latency: {ttft_overhead_ms: 200, itl_ms: 20}
  - name: instant
    engine: instant
    context_length: 2048
"""

RESPONSES = """
version: 1
seed: 7
responses:
  - id: greet
    match: {exact: "Hello!"}
    content: "Hi there, how can I help?"
  - id: pick
    match: {starts_with: "Pick"}
    variants: ["alpha one", "beta two", "gamma three", "delta four", "epsilon five"]
  - id: long
    match: {contains: "story"}
    synthetic: {tokens: [40, 40]}
default:
  content: "I am a simulator."
"""


@pytest.fixture(scope="module", params=sorted(TRANSPORTS))
def server(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """The server on each transport: the fast path, and the plain ASGI path it falls back to."""
    env = TRANSPORTS[request.param]
    with running_server(tmp_path_factory.mktemp("srv"), config=CONFIG, responses=RESPONSES, env=env) as s:
        yield s


@pytest.fixture
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


def test_chat_non_streaming_with_the_sdk(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model="instant", messages=[{"role": "user", "content": "Hello!"}])
    assert r.choices[0].message.content == "Hi there, how can I help?"
    assert r.choices[0].finish_reason == "stop"
    assert r.model == "instant"
    assert r.usage is not None
    # "Hi there, how can I help?" -> Hi | ' there' | , | ' how' | ' can' | ' I' | ' help' | ?  = 8 tokens
    assert r.usage.completion_tokens == 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8


def test_chat_streaming_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="instant",
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hello!"}]}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hi there, how can I help?"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 8


def test_completions_streaming_and_max_tokens(client: openai.OpenAI) -> None:
    r = client.completions.create(model="instant", prompt="Hello!", max_tokens=3)
    assert r.choices[0].text == "Hi there,"
    assert r.choices[0].finish_reason == "length"
    stream = client.completions.create(model="instant", prompt="Hello!", max_tokens=50, stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == "Hi there, how can I help?"


def test_n_choices_and_ignore_eos(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="instant",
        messages=[{"role": "user", "content": "Hello!"}],
        n=3,
        max_tokens=20,
        extra_body={"ignore_eos": True},
    )
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in r.choices)
    assert r.usage is not None
    assert r.usage.completion_tokens == 3 * 20
    assert all(c.message.content is not None and c.message.content.startswith("Hi there") for c in r.choices)


def test_errors_have_openai_shape(server: ServerProcess, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as nf:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert nf.value.status_code == 404
    body = nf.value.response.json()
    assert body == {
        "error": {
            "message": "The model `nope` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": "model_not_found",
        }
    }

    bad = httpx.post(server.base_url + "/v1/chat/completions", content=b"{not json", timeout=5)
    assert bad.status_code == 400
    assert set(bad.json()["error"]) == {"message", "type", "param", "code"}

    missing = httpx.post(server.base_url + "/v1/chat/completions", json={"model": "instant"}, timeout=5)
    assert missing.status_code == 400
    # vLLM's words for a body that fails its model: the HTTP phrase as type, the field's location as param.
    assert missing.json()["error"]["param"] == "body.messages"
    assert missing.json()["error"]["type"] == "Bad Request"

    with pytest.raises(openai.BadRequestError) as too_long:
        client.chat.completions.create(model="instant", messages=[{"role": "user", "content": "word " * 3000}])
    err = too_long.value.response.json()["error"]
    assert "maximum context length is 2048 tokens" in err["message"]
    assert err["param"] == "input_tokens"


def test_fixed_engine_timeline_seen_by_a_streaming_client(server: ServerProcess, client: openai.OpenAI) -> None:
    # TTFT 200 ms, ITL 20 ms (no prefill rate). How late the tokens leave on a busy machine is
    # measured by bench/bench_live_timing.py; here: the simulated timeline, and no token early.
    def histogram(page: Page, name: str) -> tuple[float, float]:
        labels = {"model_name": "fixed", "engine": "0"}
        return page.get(name + "_sum", **labels), page.get(name + "_count", **labels)

    before = parse(httpx.get(server.base_url + "/metrics", timeout=5).text)
    sent = time.monotonic()
    times = []
    stream = client.chat.completions.create(
        model="fixed", messages=[{"role": "user", "content": "tell me a story"}], stream=True
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            times.append(time.monotonic())
    after = parse(httpx.get(server.base_url + "/metrics", timeout=5).text)
    assert len(times) == 40
    # Deadlines are absolute, from the arrival: token i is due at 200 ms + i x 20 ms, never sooner.
    for i, t in enumerate(times):
        assert t - sent >= 0.200 + i * 0.020 - 1e-9, (i, t - sent)
    # The simulated latencies vLLM's histograms see: one TTFT of 200 ms, 39 gaps of 20 ms.
    for name, total, count in (
        ("vllm:time_to_first_token_seconds", 0.200, 1),
        ("vllm:inter_token_latency_seconds", 39 * 0.020, 39),
    ):
        (sum_before, count_before), (sum_after, count_after) = histogram(before, name), histogram(after, name)
        assert count_after - count_before == count
        assert sum_after - sum_before == pytest.approx(total, abs=1e-9)


def test_client_disconnect_ends_the_request_server_side(server: ServerProcess) -> None:
    body = {"model": "fixed", "messages": [{"role": "user", "content": "a story"}], "stream": True}
    with httpx.Client(base_url=server.base_url, timeout=5) as http:
        with http.stream("POST", "/v1/chat/completions", json=body) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: {") and '"content":"' in line and '"content":""' not in line:
                    # Mid-stream (inside the loop: leaving it closes the response).
                    assert http.get("/load").json() == {"server_load": 1}
                    break
            else:
                pytest.fail("no token received")
        # The stream is closed: the server must notice and free the request.
        deadline = time.monotonic() + 5
        while http.get("/load").json()["server_load"] != 0:
            assert time.monotonic() < deadline, "request still running after the client left"
            time.sleep(0.02)


def test_models_health_version(server: ServerProcess) -> None:
    models = httpx.get(server.base_url + "/v1/models", timeout=5).json()
    assert {m["id"] for m in models["data"]} == {"fixed", "instant"}
    assert all(m["max_model_len"] == 2048 for m in models["data"])
    assert httpx.get(server.base_url + "/health", timeout=5).status_code == 200
    assert "version" in httpx.get(server.base_url + "/version", timeout=5).json()


def _answers(server: ServerProcess) -> list[str]:
    out = []
    for i in range(12):
        r = httpx.post(
            server.base_url + "/v1/chat/completions",
            json={"model": "instant", "messages": [{"role": "user", "content": f"Pick a card {i}"}]},
            timeout=5,
        )
        out.append(r.json()["choices"][0]["message"]["content"])
    return out


def test_answers_are_identical_across_server_processes(server: ServerProcess, tmp_path: Path) -> None:
    first = _answers(server)
    with running_server(tmp_path, config=CONFIG, responses=RESPONSES, env={"PYTHONHASHSEED": "12345"}) as other:
        second = _answers(other)
    assert first == second
    assert len(set(first)) > 1  # the variants really vary with the text


@pytest.mark.parametrize(
    ("flag", "name", "text", "expected"),
    [
        (
            "--config",
            "models.yml",
            "models:\n  - {name: a, engine: scheduler, hardware: h100-80gb}\n",
            ["models[0] (name 'a')", "field 'kv_cache'"],
        ),
        (
            "--responses",
            "responses.yml",
            'responses:\n  - {id: bad, match: {regex: "(unclosed"}, content: x}\ndefault: {content: y}\n',
            ["responses[0] (id 'bad')", "match.regex"],
        ),
    ],
)
def test_broken_file_stops_serve_before_binding(
    tmp_path: Path, flag: str, name: str, text: str, expected: list[str]
) -> None:
    path = tmp_path / name
    path.write_text(text)
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "llmsim.cli", "serve", flag, str(path), "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert str(path) in line
    for part in expected:
        assert part in line
