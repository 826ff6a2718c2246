"""The floor of the token path: a bare uvicorn (uvloop + httptools) SSE server with no simulator.

``POST /v1/chat/completions`` answers ``max_tokens`` chunks of the same size as llmsim's, one
every ``--itl`` seconds on absolute deadlines, each written in its own event-loop turn (one timer
and one task wake-up per token, the plainest way a Python server streams). What this process
spends per token is what any Python SSE server spends; bench_live_timing.py compares llmsim's
cost against it, measured in the same run.

    python bench/floor_server.py --port 8200 --itl 0.008
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

CHUNK = (
    b'data: {"id":"chatcmpl-00000000000000000000000000000000","object":"chat.completion.chunk",'
    b'"created":1700000000,"model":"llama-3.1-8b","choices":[{"index":0,"delta":{"content":" token"},'
    b'"logprobs":null,"finish_reason":null}]}\n\n'
)
_DONE = b"data: [DONE]\n\n"
_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
_JSON_HEADERS = [(b"content-type", b"application/json")]


def make_app(itl: float) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/health":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body)
        n = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
        # Clients that calibrate their prompts (llmsim bench) read usage: words plus a template's 7.
        words = sum(len(str(m.get("content", "")).split()) for m in request.get("messages", []))
        usage = {"prompt_tokens": words + 7, "completion_tokens": n, "total_tokens": words + 7 + n}
        if not request.get("stream"):
            answer = json.dumps({"choices": [{"index": 0, "message": {"content": ""}}], "usage": usage}).encode()
            await send({"type": "http.response.start", "status": 200, "headers": _JSON_HEADERS})
            await send({"type": "http.response.body", "body": answer})
            return
        await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
        start = time.monotonic()
        for i in range(n):
            delay = start + (i + 1) * itl - time.monotonic()
            await asyncio.sleep(delay if delay > 0 else 0)
            await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
        tail = _DONE
        if (request.get("stream_options") or {}).get("include_usage"):
            tail = b'data: {"choices":[],"usage":' + json.dumps(usage).encode() + b"}\n\n" + _DONE
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--itl", type=float, default=0.008)
    args = p.parse_args()
    import uvicorn

    uvicorn.run(
        make_app(args.itl),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
