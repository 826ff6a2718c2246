"""``llmsim serve``: check the config, then serve it with uvicorn (uvloop + httptools).

Two forms: llmsim's (``--config models.yml``) and vLLM's (``llmsim serve MODEL --max-model-len ...``,
translated by :mod:`llmsim.commands.vllm_cli`; docs/vllm-cli.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import sys

from llmsim.api.access import Access, parse_keys
from llmsim.api.fault_timeline import Replica
from llmsim.api.identity import Identity
from llmsim.api.state import DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_REQUEST_OUTPUT_TOKENS
from llmsim.commands import vllm_cli
from llmsim.errors import ConfigError
from llmsim.runtime import LoopShare, build_runtime, external_ports, load_config
from llmsim.transport import ConnectionLimits, default_max_connections, fast_path_enabled, http_setting
from llmsim.transport.limits import DEFAULT_MAX_HEADER_BYTES, DEFAULT_REQUEST_TIMEOUT_S

logger = logging.getLogger("llmsim")


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
        "--max-request-output-tokens",
        type=int,
        default=int(env("LLMSIM_MAX_REQUEST_OUTPUT_TOKENS", str(DEFAULT_MAX_REQUEST_OUTPUT_TOKENS))),
        help="requests that may produce more output tokens (prompts x n x max_tokens) get 400 "
        "(env LLMSIM_MAX_REQUEST_OUTPUT_TOKENS; default 262144)",
    )
    p.add_argument(
        "--log-level", default=env("LLMSIM_LOG_LEVEL", "info"), choices=["debug", "info", "warning", "error"]
    )
    p.add_argument(
        "--api-key",
        action="extend",
        nargs="+",
        help="key clients must send as 'Authorization: Bearer' on /v1/* (one or more, as vLLM; repeat or "
        "comma-separate; env LLMSIM_API_KEY, used only without the flag)",
    )
    p.add_argument(
        "--admin-key",
        action="append",
        help="key for /admin/*, /sleep and /wake_up (env LLMSIM_ADMIN_KEY); without one they are open only "
        "when no API key is set",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=float(env("LLMSIM_SHUTDOWN_TIMEOUT", "0")),
        help="seconds running requests get to finish after SIGTERM before they are aborted "
        "(vLLM's --shutdown-timeout; default 0: abort at once; env LLMSIM_SHUTDOWN_TIMEOUT)",
    )
    p.add_argument(
        "--max-header-bytes",
        type=int,
        default=int(env("LLMSIM_MAX_HEADER_BYTES", str(DEFAULT_MAX_HEADER_BYTES))),
        help="a request whose line and headers are larger gets 431 and a close "
        "(env LLMSIM_MAX_HEADER_BYTES; default 64 KiB)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=float(env("LLMSIM_REQUEST_TIMEOUT", str(DEFAULT_REQUEST_TIMEOUT_S))),
        help="seconds a connection gets to send a whole request (headers and body) from its opening or "
        "the request's first byte; then 408 and a close (env LLMSIM_REQUEST_TIMEOUT; default 30)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=int(env("LLMSIM_MAX_CONNECTIONS", "0")),
        help="open client connections; one more gets 503 and a close as it is accepted "
        "(env LLMSIM_MAX_CONNECTIONS; default 0: the open-file limit less 100)",
    )
    p.add_argument(
        "--no-fast-path",
        dest="fast_path",
        action="store_false",
        default=fast_path_enabled(),
        help="serve through uvicorn's own protocol, plain ASGI send and FastAPI's full stack instead of "
        "llmsim's token path (docs/transport.md; env LLMSIM_FAST_PATH=0)",
    )
    p.add_argument("--pod-name", default=env("LLMSIM_POD_NAME"), help="sent as x-llmsim-pod (env LLMSIM_POD_NAME)")
    p.add_argument(
        "--pod-namespace",
        default=env("LLMSIM_POD_NAMESPACE"),
        help="sent as x-llmsim-namespace (env LLMSIM_POD_NAMESPACE)",
    )
    p.add_argument(
        "--replica-ordinal",
        type=_optional_int,
        default=env("LLMSIM_REPLICA_ORDINAL"),
        help="this replica's ordinal in its fleet (0-based), for fault timelines that name replicas "
        "(env LLMSIM_REPLICA_ORDINAL; POST /admin/timeline/start may give it instead)",
    )
    p.add_argument(
        "--replica-count",
        type=_optional_int,
        default=env("LLMSIM_REPLICA_COUNT"),
        help="the fleet's size, for fault timeline phases that draw a count of replicas (env LLMSIM_REPLICA_COUNT)",
    )
    p.add_argument("--ssl-keyfile", help="TLS private key (PEM); with --ssl-certfile, serve HTTPS (vLLM's)")
    p.add_argument("--ssl-certfile", help="TLS certificate chain (PEM)")
    p.add_argument("--ssl-ca-certs", help="CA certificates to check client certificates against")
    p.add_argument(
        "--ssl-cert-reqs",
        type=int,
        default=int(ssl.CERT_NONE),
        help="client certificates: 0 not asked, 1 optional, 2 required (Python's ssl.CERT_*; default 0)",
    )
    vllm_cli.add_arguments(p)
    p.set_defaults(func=run)


def _optional_int(text: str) -> int | None:
    return int(text) if text.strip() else None


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if args.shutdown_timeout < 0:
        print("llmsim: --shutdown-timeout must be >= 0", file=sys.stderr)
        return 2
    if args.max_request_output_tokens < 1:
        print("llmsim: --max-request-output-tokens must be >= 1", file=sys.stderr)
        return 2
    try:
        limits = ConnectionLimits(
            max_header_bytes=args.max_header_bytes,
            request_timeout_s=args.request_timeout,
            max_connections=args.max_connections or default_max_connections(),
        )
    except ValueError as exc:
        print(f"llmsim: {exc}", file=sys.stderr)
        return 2
    # argparse runs `type` on a string default too (the environment's value).
    ordinal, count = args.replica_ordinal, args.replica_count
    if (ordinal is not None and ordinal < 0) or (count is not None and count < 1):
        print("llmsim: --replica-ordinal must be >= 0 and --replica-count >= 1", file=sys.stderr)
        return 2
    if bool(args.ssl_keyfile) != bool(args.ssl_certfile):
        print("llmsim: --ssl-keyfile and --ssl-certfile go together", file=sys.stderr)
        return 2
    checked = None
    if vllm_cli.requested(args):
        try:
            vllm = vllm_cli.build(args)
        except vllm_cli.VllmArgError as exc:
            print(f"llmsim: {exc}", file=sys.stderr)
            return 2
        checked = (vllm.config, vllm_cli.COMMAND_LINE)
        if vllm.ignored:
            logger.warning("accepted without effect on the simulation (docs/vllm-cli.md): %s", ", ".join(vllm.ignored))
    # vLLM: the flag wins over the environment variable.
    api_keys = parse_keys(args.api_key or [os.environ.get("LLMSIM_API_KEY")])
    admin_keys = parse_keys(args.admin_key or [os.environ.get("LLMSIM_ADMIN_KEY")])
    try:
        loaded = checked or load_config(args.config)
        # vLLM's --data-parallel-multi-port-external-lb: rank r of every model on port + r, one process.
        ports = external_ports(*loaded)
        share = LoopShare.create() if ports > 1 else None
        runtimes = [
            build_runtime(
                args.config,
                args.responses,
                access=Access(api_keys, admin_keys),
                identity=Identity(
                    args.pod_name,
                    args.pod_namespace,
                    inference_pod=os.environ.get("POD_NAME"),
                    inference_namespace=os.environ.get("POD_NAMESPACE"),
                    port=args.port + rank,
                ),
                max_request_bytes=args.max_request_bytes,
                max_request_output_tokens=args.max_request_output_tokens,
                fast_path=args.fast_path,
                checked_config=loaded,
                dp_rank=rank if ports > 1 else None,
                share=share,
                replica=Replica(ordinal, count),
            )
            for rank in range(ports)
        ]
    except ConfigError as exc:
        if checked is not None:
            print(f"llmsim: {vllm_cli.config_error(exc)}", file=sys.stderr)
            return 2
        print(f"llmsim: config error: {exc}", file=sys.stderr)
        return 2
    if api_keys and not admin_keys:
        logger.info("API key set and no admin key: /admin/*, /sleep and /wake_up refuse every request")
    import uvicorn

    from llmsim.commands.draining_server import DrainingServer, run_servers

    servers = []
    for rank, runtime in enumerate(runtimes):
        config = uvicorn.Config(
            runtime.app,
            host=args.host,
            port=args.port + rank,
            loop="uvloop",
            # httptools, stamping each request's arrival as its first byte is parsed, or earlier when
            # a step loop's poll saw its bytes while it held the loop (the runtime's clock is
            # MonotonicClock's time.monotonic, the stamp's timebase); a new request read while a
            # release is at hand is parsed after its pass. uvicorn's own with the fast path off.
            http=http_setting(
                runtime.arrival_watch, runtime.state.release_gate, fast_path=args.fast_path, limits=limits
            ),
            log_level=args.log_level,
            access_log=False,
            # After the drain, streams have ended or been aborted: this only bounds their last writes.
            timeout_graceful_shutdown=5,
            ssl_keyfile=args.ssl_keyfile,
            ssl_certfile=args.ssl_certfile,
            ssl_ca_certs=args.ssl_ca_certs,
            ssl_cert_reqs=args.ssl_cert_reqs,
        )
        servers.append(DrainingServer(config, runtime.state.lifecycle, args.shutdown_timeout))
    run_servers(servers)
    return 0
