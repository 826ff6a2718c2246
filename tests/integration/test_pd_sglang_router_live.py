"""SGLang's P/D hand-off through the real sglang-router: one prefill replica (kv_producer), one decode
replica (kv_consumer), ``sglang-router launch --pd-disaggregation`` sending both legs at once with
``bootstrap_host/port/room`` (the bootstrap port: the prefill replica's side channel).

As for vLLM's hand-off (test_pd_router_live.py): every request answered, the prefill replica counts
each prompt once, the decode replica pulls each prompt whole (expected totals from the prompts with
the tokenizer itself), and no block stays held on either side.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import openai
import pytest
from tokenizers import Tokenizer

from tests.integration.test_pd_router_live import (
    CHATS,
    CONFIG,
    MODEL,
    PROMPTS,
    _chatml_tokens,
    _metrics,
    _until_freed,
    _value,
)
from tests.llm.test_token_ids import write_tokenizer_json
from tests.support.server import ServerProcess, free_port, running_process, running_server
from tests.support.vllm_router import router_binary

pytestmark = pytest.mark.integration


@dataclass
class Pair:
    prefill: ServerProcess
    decode: ServerProcess
    router_url: str
    tokenizer: Tokenizer


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("sglang-pd")
    tokenizer_path = write_tokenizer_json(root / "tokenizer.json")
    with ExitStack() as stack:
        ports = {"kv_producer": free_port(), "kv_consumer": free_port()}
        servers = {}
        for role, side_port in ports.items():
            where = root / role
            where.mkdir()
            config = CONFIG.format(tokenizer=tokenizer_path, role=role, side_port=side_port, timeout=480)
            servers[role] = stack.enter_context(running_server(where, config=config))
        prefill, decode = servers["kv_producer"], servers["kv_consumer"]
        port = free_port()
        args = [
            router_binary("sglang-router"),
            "launch",
            "--pd-disaggregation",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        # The prefill worker's bootstrap port: where decode legs find its blocks (its side channel).
        args += ["--prefill", prefill.base_url, str(ports["kv_producer"]), "--decode", decode.base_url]
        args += ["--policy", "round_robin", "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
        url = f"http://127.0.0.1:{port}"
        stack.enter_context(running_process(args, root / "router.log", url + "/health", name="sglang-router"))
        yield Pair(prefill, decode, url, Tokenizer.from_file(str(tokenizer_path)))


def test_both_legs_at_once_meet_by_their_room(pair: Pair) -> None:
    client = openai.OpenAI(base_url=pair.router_url + "/v1", api_key="none", max_retries=0, timeout=60)
    expected = 0
    for i, prompt in enumerate(PROMPTS[:6]):
        expected += len(pair.tokenizer.encode(prompt).ids)
        if i % 2:
            stream = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, stream=True)
            text = "".join(c.choices[0].text for c in stream if c.choices)
        else:
            text = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6).choices[0].text
        assert text
    for i, content in enumerate(CHATS):
        expected += _chatml_tokens(pair.tokenizer, content)
        messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": content}]
        if i % 2:
            chunks = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, stream=True)
            said = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            answer = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5)
            said = answer.choices[0].message.content or ""
        assert said

    _until_freed([pair.prefill, pair.decode])
    prefill_page, decode_page = _metrics(pair.prefill), _metrics(pair.decode)
    assert _value(prefill_page, "vllm:prompt_tokens_total", model_name=MODEL) == expected
    pulled = _value(decode_page, "vllm:prompt_tokens_by_source_total", model_name=MODEL, source="external_kv_transfer")
    assert pulled == expected
    # An SGLang prefill server computes one token, whatever max_tokens the body says.
    legs = len(PROMPTS[:6]) + len(CHATS)
    assert _value(prefill_page, "vllm:generation_tokens_total", model_name=MODEL) == legs
