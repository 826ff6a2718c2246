"""``llmsim check``: parse and wire the config and responses without serving (for CI and operators)."""

from __future__ import annotations

import argparse
import os
import sys

from llmsim.errors import ConfigError
from llmsim.runtime import build_runtime


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("check", help="validate models.yml and responses.yml, then exit")
    p.add_argument("--config", default=os.environ.get("LLMSIM_CONFIG"))
    p.add_argument("--responses", default=os.environ.get("LLMSIM_RESPONSES"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        runtime = build_runtime(args.config, args.responses)
    except ConfigError as exc:
        print(f"llmsim: config error: {exc}", file=sys.stderr)
        return 2
    for name, served in runtime.state.models.items():
        print(f"{name}: {served.info}")
    return 0
