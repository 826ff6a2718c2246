"""vLLM's development-mode routes that touch the prefix cache: ``POST /reset_prefix_cache``.

Served only when ``VLLM_SERVER_DEV_MODE=1`` (vLLM's switch; runtime.py adds the route). Answers
``{"success": bool}``: resetting fails while a request holds KV blocks (vLLM's
``BlockPool.reset_prefix_cache``); on success every model's cache forgets its blocks and
publishes ``AllBlocksCleared`` with its next step's KV events.
"""

from __future__ import annotations

import json
import os

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmsim.api.state import ApiState

__all__ = ["DEV_MODE_SWITCH", "dev_mode", "dev_routes"]

DEV_MODE_SWITCH = "VLLM_SERVER_DEV_MODE"


def dev_mode() -> bool:
    return os.environ.get(DEV_MODE_SWITCH, "0").strip() == "1"


def dev_routes(state: ApiState) -> list[Route]:
    async def reset_prefix_cache(request: Request) -> Response:
        # Every model is tried (one busy model does not keep the others' caches).
        results = [served.engine.reset_prefix_cache() for served in state.models.values()]
        return Response(json.dumps({"success": all(results)}), media_type="application/json")

    return [Route("/reset_prefix_cache", reset_prefix_cache, methods=["POST"])]
