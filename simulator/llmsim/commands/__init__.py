"""Subcommands of the ``llmsim`` CLI: each module has ``add_parser(subparsers)`` and ``run(args)``."""
