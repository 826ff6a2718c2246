"""Disaggregated prefill/decode through the real vllm-router: two prefill replicas (kv_producer), two
decode replicas (kv_consumer), ``vllm-router --vllm-pd-disaggregation`` in front, the openai SDK as
the client.

What must hold, from vLLM's NIXL hand-off (docs/pd.md): every request is answered; the prefill
replicas together count every prompt token once (vllm:prompt_tokens_total), and the decode replicas
count every one as pulled (vllm:prompt_tokens_by_source{source="external_kv_transfer"}); the
expected total is computed here from the prompts with the tokenizer itself (the ``tokenizers``
library on the servers' tokenizer.json). Afterwards no block is held on either side. A prefill leg
nobody pulls keeps its blocks until abort_request_timeout_s, then frees them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import httpx
import openai
import pytest
from tokenizers import Tokenizer

from tests.llm.test_token_ids import write_tokenizer_json
from tests.support.server import ServerProcess, free_port, running_process, running_server
from tests.support.vllm_router import router_binary

pytestmark = pytest.mark.integration

MODEL = "m"
ABORT_TIMEOUT_S = 2
CONFIG = """
version: 1
models:
  - name: m
    engine: scheduler
    profile: llama-3.1-8b
    hardware: h100-80gb
    context_length: 4096
    tokenizer: {{path: {tokenizer}, chat_template: chatml}}
    kv_transfer: {{kv_role: {role}, side_channel_port: {side_port}, abort_request_timeout_s: {timeout}}}
"""
# Distinct first words: no prompt shares a first block with another, so a decode replica never
# finds a prompt in its own prefix cache and pulls every token.
PROMPTS = [
    f"{word} river ran to the sea, and the sea was wide. Once upon a time, a river met the sea {i}."
    for i, word in enumerate(["Once", "The", "Hello", "River", "Sea", "Time", "Wide", "How", "Today", "Upon"])
]
CHATS = ["Hello there, how are you today?", "The river met the sea. Once upon a time?"]


@dataclass
class Fleet:
    prefill: list[ServerProcess]
    decode: list[ServerProcess]
    router_url: str
    tokenizer: Tokenizer


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("pd")
    tokenizer_path = write_tokenizer_json(root / "tokenizer.json")
    with ExitStack() as stack:

        def start(role: str, name: str) -> ServerProcess:
            config = CONFIG.format(tokenizer=tokenizer_path, role=role, side_port=free_port(), timeout=ABORT_TIMEOUT_S)
            where = root / name
            where.mkdir()
            return stack.enter_context(running_server(where, config=config))

        prefill = [start("kv_producer", f"p{i}") for i in range(2)]
        decode = [start("kv_consumer", f"d{i}") for i in range(2)]
        port = free_port()
        args = [router_binary("vllm-router"), "--host", "127.0.0.1", "--port", str(port), "--vllm-pd-disaggregation"]
        for p in prefill:
            args += ["--prefill", p.base_url]
        for d in decode:
            args += ["--decode", d.base_url]
        # Its own metrics on a free port too (the default one may be taken on a shared machine).
        args += ["--policy", "round_robin", "--log-level", "warning"]
        args += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
        url = f"http://127.0.0.1:{port}"
        stack.enter_context(running_process(args, root / "router.log", url + "/health", name="vllm-router"))
        yield Fleet(prefill, decode, url, Tokenizer.from_file(str(tokenizer_path)))


def _metrics(server: ServerProcess) -> str:
    return httpx.get(server.base_url + "/metrics", timeout=5).text


def _value(page: str, name: str, **labels: str) -> float:
    """The sample of ``name`` with ``labels`` (among others) on a /metrics page."""
    for line in page.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not on the page")


def _kv_usage(server: ServerProcess) -> float:
    return _value(_metrics(server), "vllm:kv_cache_usage_perc", model_name=MODEL)


def _until_freed(servers: list[ServerProcess], bound_s: float = 30.0) -> None:
    """Poll (bounded) until no block is held on any of ``servers``."""
    deadline = time.monotonic() + bound_s
    while any(_kv_usage(s) != 0.0 for s in servers):
        assert time.monotonic() < deadline, [(s.base_url, _kv_usage(s)) for s in servers]
        time.sleep(0.1)


def _chatml_tokens(tokenizer: Tokenizer, content: str) -> int:
    # The chatml template with the generation prompt, as a HF chat template renders it.
    text = f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def test_every_request_through_the_router_is_answered_and_counted_once(fleet: Fleet) -> None:
    client = openai.OpenAI(base_url=fleet.router_url + "/v1", api_key="none", max_retries=0, timeout=60)
    expected = 0
    for i, prompt in enumerate(PROMPTS):
        expected += len(fleet.tokenizer.encode(prompt).ids)
        if i % 2:
            stream = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, stream=True)
            text = "".join(c.choices[0].text for c in stream if c.choices)
        else:
            completion = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6)
            text = completion.choices[0].text
            assert completion.usage is not None
            assert completion.usage.prompt_tokens == len(fleet.tokenizer.encode(prompt).ids)
        assert text
    for i, content in enumerate(CHATS):
        expected += _chatml_tokens(fleet.tokenizer, content)
        messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": content}]
        if i % 2:
            chunks = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, stream=True)
            said = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            said = (
                client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5).choices[0].message.content
                or ""
            )
        assert said

    _until_freed([*fleet.prefill, *fleet.decode])
    prefill_pages = [_metrics(s) for s in fleet.prefill]
    decode_pages = [_metrics(s) for s in fleet.decode]
    assert sum(_value(p, "vllm:prompt_tokens_total", model_name=MODEL) for p in prefill_pages) == expected
    pulled = sum(
        _value(p, "vllm:prompt_tokens_by_source_total", model_name=MODEL, source="external_kv_transfer")
        for p in decode_pages
    )
    assert pulled == expected
    # Nothing was computed twice: each decode leg recomputed only its last prompt token.
    legs = len(PROMPTS) + len(CHATS)
    local = sum(
        _value(p, "vllm:prompt_tokens_by_source_total", model_name=MODEL, source="local_compute") for p in decode_pages
    )
    assert local == legs
    # Both sides count the requests: one token of "length" per prefill leg.
    assert sum(_value(p, "vllm:request_success_total", finished_reason="length") for p in prefill_pages) == legs


def test_a_prefill_leg_nobody_pulls_is_freed_at_the_abort_timeout(fleet: Fleet) -> None:
    server = fleet.prefill[0]
    _until_freed([server])
    body = {
        "model": MODEL,
        "prompt": PROMPTS[0] + " and nobody reads it",
        "max_tokens": 1,
        "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False},
    }
    answer = httpx.post(server.base_url + "/v1/completions", json=body, timeout=30).json()
    params = answer["kv_transfer_params"]
    assert params["do_remote_prefill"] is True
    assert params["remote_block_ids"][0]
    # Held after the answer: the blocks wait for a pull that never comes ...
    assert _kv_usage(server) > 0
    # ... until the abort timeout frees them (polled, bounded well past the timeout).
    _until_freed([server], bound_s=ABORT_TIMEOUT_S + 30)
    # A decode leg arriving after that fails, as vLLM's default kv_load_failure_policy does.
    late = httpx.post(
        fleet.decode[0].base_url + "/v1/completions",
        json={"model": MODEL, "prompt": body["prompt"], "max_tokens": 3, "kv_transfer_params": params},
        timeout=30,
    )
    assert late.status_code == 500
    assert late.json()["error"]["message"] == "Internal server error"
    _until_freed([fleet.decode[0]])


def test_a_client_leaving_mid_pull_frees_both_sides(fleet: Fleet) -> None:
    prefill, decode = fleet.prefill[1], fleet.decode[1]
    prompt = PROMPTS[3] + " who leaves early"
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}
    params = httpx.post(prefill.base_url + "/v1/completions", json=body, timeout=30).json()["kv_transfer_params"]
    assert _kv_usage(prefill) > 0
    # A long answer, abandoned after its first chunk: the decode side aborts, the prefill side
    # was released when the pull completed.
    leg = {"model": MODEL, "prompt": prompt, "max_tokens": 2000, "stream": True, "kv_transfer_params": params}
    with httpx.stream("POST", decode.base_url + "/v1/completions", json=leg, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                break
    _until_freed([prefill, decode])


def _log_has(server: ServerProcess, pattern: str) -> bool:
    return re.search(pattern, server.log()) is not None


def test_invalid_params_are_logged_and_prefilled_locally(fleet: Fleet) -> None:
    decode = fleet.decode[0]
    prompt = PROMPTS[5] + " without its prefill"
    leg = {"model": MODEL, "prompt": prompt, "max_tokens": 2, "kv_transfer_params": {"do_remote_prefill": True}}
    answer = httpx.post(decode.base_url + "/v1/completions", json=leg, timeout=30)
    assert answer.status_code == 200
    assert answer.json()["usage"]["prompt_tokens"] == len(fleet.tokenizer.encode(prompt).ids)
    assert _log_has(decode, r"Got invalid KVTransferParams")
