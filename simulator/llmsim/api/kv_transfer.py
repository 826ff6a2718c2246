"""vLLM's ``kv_transfer_params`` (NIXL connector) in and out: which leg of a disaggregated
prefill/decode pair a request is, and the parameters a prefill answer hands to its decode leg.

Read from vLLM's ``NixlConnectorScheduler`` (``update_state_after_alloc``, ``request_finished``)
and ``toy_proxy_server.py``; differences are listed in docs/pd.md.
"""

from __future__ import annotations

import logging
from typing import Any

from llmsim.api.served import KVTransferInfo
from llmsim.types import KVHandoff, RemotePrefill

logger = logging.getLogger("llmsim.api")

#: What a decode leg's params must name for a pull (vLLM checks these four keys).
REMOTE_FIELDS = ("remote_engine_id", "remote_request_id", "remote_host", "remote_port")

PREFILL_LEG = KVHandoff(remote_decode=True)

#: How long an SGLang decode leg waits for its room's prefill to hold the blocks.
BOOTSTRAP_WAIT_S = 300.0
#: SGLang's hand-off fields (sglang-router adds them to both legs).
BOOTSTRAP_FIELDS = ("bootstrap_host", "bootstrap_port", "bootstrap_room")


def bootstrap_handoff(extra: dict[str, Any] | None, info: KVTransferInfo | None) -> KVHandoff | None:
    """SGLang's hand-off (sglang-router ``--pd-disaggregation``): both legs carry ``bootstrap_host``,
    ``bootstrap_port`` and ``bootstrap_room`` and arrive at once; the replica's ``kv_role`` says
    which leg it serves (SGLang's ``--disaggregation-mode``). The prefill leg holds its blocks
    under its room; the decode leg asks ``bootstrap_host:bootstrap_port`` (the prefill replica's
    side channel) for them, waiting until they are there. None: not such a request, or a
    ``kv_both`` replica (SGLang's servers are one mode or the other)."""
    if extra is None or info is None or info.role == "kv_both":
        return None
    room, host, port = extra.get("bootstrap_room"), extra.get("bootstrap_host"), extra.get("bootstrap_port")
    if not isinstance(room, int) or isinstance(room, bool):
        return None
    held_as = f"bootstrap_room:{room}"
    if info.role == "kv_producer":
        return KVHandoff(remote_decode=True, held_as=held_as)
    if not isinstance(host, str) or not isinstance(port, int) or isinstance(port, bool):
        logger.warning("bootstrap_room %s without a usable bootstrap_host/bootstrap_port: prefilled here", room)
        return None
    return KVHandoff(remote_prefill=RemotePrefill("", held_as, host, port, (), wait_s=BOOTSTRAP_WAIT_S))


def _block_ids(value: Any) -> tuple[int, ...] | None:
    """``remote_block_ids``: one list per KV-cache group (vLLM now; llmsim has one group) or a
    flat list (older vLLM); None when neither."""
    if isinstance(value, list) and value and all(isinstance(g, list) for g in value):
        value = value[0]
    if not isinstance(value, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in value):
        return None
    return tuple(value)


def handoff(params: dict[str, Any] | None, info: KVTransferInfo | None) -> KVHandoff | None:
    """The request's leg, or None: a whole request (no params, a model without kv_transfer, or
    params that cannot be used, which vLLM logs and serves locally)."""
    if params is None or info is None:
        return None
    if params.get("do_remote_decode"):
        return PREFILL_LEG
    if not params.get("do_remote_prefill"):
        return None
    blocks = _block_ids(params.get("remote_block_ids"))
    engine_id, request_id = params.get("remote_engine_id"), params.get("remote_request_id")
    host, port = params.get("remote_host"), params.get("remote_port")
    if (
        not blocks
        or not isinstance(engine_id, str)
        or not isinstance(request_id, str)
        or not isinstance(host, str)
        or not isinstance(port, int)
        or isinstance(port, bool)
    ):
        # vLLM's own warning (update_state_after_alloc); the prompt is then prefilled here.
        logger.warning("Got invalid KVTransferParams: %s. This request will not utilize KVTransfer", params)
        return None
    return KVHandoff(remote_prefill=RemotePrefill(engine_id, request_id, host, port, blocks))


def prefill_answer(info: KVTransferInfo, request_id: str, block_ids: tuple[int, ...]) -> dict[str, Any]:
    """A prefill answer's top-level ``kv_transfer_params``, in vLLM's order (``request_finished``)."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [list(block_ids)],
        "remote_engine_id": info.engine_id,
        "remote_request_id": request_id,
        "remote_host": info.host,
        "remote_port": info.port,
        "tp_size": info.tp_size,
    }
