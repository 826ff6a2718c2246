"""The ``llmsim`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from llmsim import __version__
from llmsim.commands import bench, calibrate, check, plan, serve, verdict
from llmsim.commands.vllm_cli import normalize_argv


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmsim", description=__doc__)
    parser.add_argument("--version", action="version", version=f"llmsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve.add_parser(sub)
    check.add_parser(sub)
    plan.add_parser(sub)
    calibrate.add_parser(sub)
    bench.add_parser(sub)
    verdict.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        argv = normalize_argv(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
