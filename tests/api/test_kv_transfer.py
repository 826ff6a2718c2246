"""kv_transfer_params in and out, as vLLM's NIXL connector reads and writes them (docs/pd.md), and the
example pair in docs/examples/pd/ loading as a prefill and a decode replica."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from llmsim.api import kv_transfer as kv
from llmsim.api.served import KVTransferInfo
from llmsim.config import load_models_config
from llmsim.types import KVHandoff, RemotePrefill
from tests.api.app_client import app_client, runtime_of

INFO = KVTransferInfo(engine_id="e-1", host="10.0.0.7", port=5601)
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "pd"
DECODE = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_block_ids": [[3, 4, 5]],
    "remote_engine_id": "e-0",
    "remote_request_id": "cmpl-x-0",
    "remote_host": "10.0.0.6",
    "remote_port": 5600,
    "tp_size": 1,
}


def test_the_routers_prefill_leg_is_a_prefill_leg() -> None:
    # vllm-router's and the toy proxy's prefill body.
    params = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
              "remote_block_ids": None, "remote_host": None, "remote_port": None}  # fmt: skip
    assert kv.handoff(params, INFO) == KVHandoff(remote_decode=True)


def test_a_prefill_answers_params_make_a_decode_leg() -> None:
    assert kv.handoff(DECODE, INFO) == KVHandoff(
        remote_prefill=RemotePrefill("e-0", "cmpl-x-0", "10.0.0.6", 5600, (3, 4, 5))
    )
    # Older vLLM's flat list of block ids.
    flat = kv.handoff(DECODE | {"remote_block_ids": [3, 4, 5]}, INFO)
    assert flat is not None
    assert flat.remote_prefill is not None
    assert flat.remote_prefill.block_ids == (3, 4, 5)


@pytest.mark.parametrize("missing", ["remote_engine_id", "remote_request_id", "remote_host", "remote_port"])
def test_params_missing_a_remote_field_are_logged_and_served_locally(
    missing: str, caplog: pytest.LogCaptureFixture
) -> None:
    params: dict[str, Any] = {k: v for k, v in DECODE.items() if k != missing}
    with caplog.at_level(logging.WARNING, logger="llmsim.api"):
        assert kv.handoff(params, INFO) is None
    assert "Got invalid KVTransferParams" in caplog.text
    assert "This request will not utilize KVTransfer" in caplog.text


def test_without_kv_transfer_the_params_are_ignored() -> None:
    assert kv.handoff(DECODE, None) is None
    assert kv.handoff(None, INFO) is None
    assert kv.handoff({"do_remote_prefill": False, "do_remote_decode": False}, INFO) is None


def test_the_prefill_answer_has_vllms_keys_in_vllms_order() -> None:
    answer = kv.prefill_answer(INFO, "chatcmpl-r-0", (7, 8))
    assert list(answer) == [
        "do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id",
        "remote_request_id", "remote_host", "remote_port", "tp_size",
    ]  # fmt: skip
    assert answer["remote_block_ids"] == [[7, 8]]
    assert answer["remote_request_id"] == "chatcmpl-r-0"
    assert (answer["remote_host"], answer["remote_port"]) == ("10.0.0.7", 5601)


def test_the_example_pair_loads_as_a_producer_and_a_consumer() -> None:
    roles = []
    for name in ("prefill.yml", "decode.yml"):
        (model,) = load_models_config(EXAMPLES / name).models
        assert model.kv_transfer is not None
        roles.append(model.kv_transfer.kv_role)
    assert roles == ["kv_producer", "kv_consumer"]


SGLANG_BODY = {"bootstrap_host": "10.0.0.6", "bootstrap_port": 8998, "bootstrap_room": 123456789}


def test_sglang_legs_follow_the_replicas_role() -> None:
    producer = KVTransferInfo(engine_id="p", host="h", port=1, role="kv_producer")
    consumer = KVTransferInfo(engine_id="d", host="h", port=2, role="kv_consumer")
    both = KVTransferInfo(engine_id="b", host="h", port=3, role="kv_both")
    assert kv.bootstrap_handoff(SGLANG_BODY, producer) == KVHandoff(
        remote_decode=True, held_as="bootstrap_room:123456789"
    )
    assert kv.bootstrap_handoff(SGLANG_BODY, consumer) == KVHandoff(
        remote_prefill=RemotePrefill("", "bootstrap_room:123456789", "10.0.0.6", 8998, (), wait_s=kv.BOOTSTRAP_WAIT_S)
    )
    # SGLang's servers run in one mode; a kv_both replica, or a body without a room, is a whole request.
    assert kv.bootstrap_handoff(SGLANG_BODY, both) is None
    assert kv.bootstrap_handoff({"bootstrap_host": "10.0.0.6"}, consumer) is None
    assert kv.bootstrap_handoff(SGLANG_BODY, None) is None


@pytest.mark.parametrize(("role", "mode"), [("kv_producer", "prefill"), ("kv_consumer", "decode"), ("kv_both", "null")])
async def test_server_info_says_sglangs_disaggregation_mode_and_the_tp_size(
    tmp_path: Path, role: str, mode: str
) -> None:
    # SGLang's /server_info: disaggregation_mode is "prefill" or "decode" on a P/D server, "null" otherwise.
    config = (
        "version: 1\nmodels:\n  - {name: m, engine: scheduler, profile: llama-3.1-8b, hardware: h100-80gb,\n"
        f"     tensor_parallel_size: 2, kv_transfer: {{kv_role: {role}, side_channel_port: 1}}}}\n"
    )
    runtime = runtime_of(tmp_path, config, "version: 1\nresponses: []\ndefault: {content: hi}\n")
    async with app_client(runtime) as http:
        info = (await http.get("/server_info")).json()
    assert (info["disaggregation_mode"], info["tp_size"]) == (mode, 2)
