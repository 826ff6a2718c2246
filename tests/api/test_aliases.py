"""A model served under several names (vLLM's --served-model-name a b ...): models.yml ``aliases``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from llmsim.config.loader import parse_models_config
from llmsim.engine import MonotonicClock
from llmsim.errors import ConfigError
from llmsim.runtime import Runtime, build_runtime
from tests.api.asgi_driver import call

CONFIG = """
version: 1
models:
  - {name: llama, aliases: [llama-8b, meta-llama/Llama-3.1-8B-Instruct], engine: instant}
  - {name: other, engine: instant}
"""


def build(tmp_path: Path) -> Runtime:
    (tmp_path / "models.yml").write_text(CONFIG)
    return build_runtime(tmp_path / "models.yml", clock=MonotonicClock(now=asyncio.get_running_loop().time))


@pytest.mark.looptime
@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_may_name_any_alias_and_is_answered_with_the_first_name(tmp_path: Path, stream: bool) -> None:
    runtime = build(tmp_path)
    for asked in ("llama", "llama-8b", "meta-llama/Llama-3.1-8B-Instruct"):
        body = {"model": asked, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": stream}
        ex = await call(runtime.app, "/v1/chat/completions", body)
        assert ex.start["status"] == 200
        first = ex.body.split(b"\n\n")[0].removeprefix(b"data: ")
        assert json.loads(first)["model"] == "llama"


@pytest.mark.looptime
async def test_v1_models_lists_every_name_in_order(tmp_path: Path) -> None:
    runtime = build(tmp_path)
    ex = await call(runtime.app, "/v1/models", None, method="GET")
    cards = json.loads(ex.body)["data"]
    assert [(c["id"], c["root"]) for c in cards] == [
        ("llama", "llama"),
        ("llama-8b", "llama"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama"),
        ("other", "other"),
    ]


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (
            "[{name: a, aliases: [b], engine: instant}, {name: b, engine: instant}]",
            r"models\[0\] \(name 'a'\): field 'aliases\[0\]': alias 'b' is already",
        ),
        ("[{name: a, aliases: [b], engine: instant}, {name: c, aliases: [b], engine: instant}]", "alias 'b'"),
        ("[{name: a, aliases: [a], engine: instant}]", "alias 'a' is already a model's name or alias"),
    ],
)
def test_names_and_aliases_share_one_namespace(models: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_models_config(f"version: 1\nmodels: {models}\n", "models.yml")
