"""``llmsim serve``: check the config, then serve it with uvicorn (uvloop + httptools)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from llmsim.api.state import DEFAULT_MAX_REQUEST_BYTES
from llmsim.errors import ConfigError
from llmsim.runtime import build_runtime


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("serve", help="serve the OpenAI-compatible API")
    env = os.environ.get
    p.add_argument("--config", default=env("LLMSIM_CONFIG"), help="models.yml (env LLMSIM_CONFIG; default: embedded)")
    p.add_argument(
        "--responses", default=env("LLMSIM_RESPONSES"), help="responses.yml (env LLMSIM_RESPONSES; default: embedded)"
    )
    p.add_argument("--host", default=env("LLMSIM_HOST", "127.0.0.1"), help="bind address (env LLMSIM_HOST)")
    p.add_argument("--port", type=int, default=int(env("LLMSIM_PORT", "8000")), help="port (env LLMSIM_PORT)")
    p.add_argument(
        "--max-request-bytes",
        type=int,
        default=int(env("LLMSIM_MAX_REQUEST_BYTES", str(DEFAULT_MAX_REQUEST_BYTES))),
        help="larger request bodies get 413 (env LLMSIM_MAX_REQUEST_BYTES; default 4 MiB)",
    )
    p.add_argument(
        "--log-level", default=env("LLMSIM_LOG_LEVEL", "info"), choices=["debug", "info", "warning", "error"]
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        runtime = build_runtime(args.config, args.responses, max_request_bytes=args.max_request_bytes)
    except ConfigError as exc:
        print(f"llmsim: config error: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    uvicorn.run(
        runtime.app,
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level=args.log_level,
        access_log=False,
        # Streams end when their tokens are out; don't let shutdown hang on idle keep-alives.
        timeout_graceful_shutdown=5,
    )
    return 0
