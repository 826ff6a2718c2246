"""Subcommands of the ``llmsim`` CLI: each has ``add_parser(subparsers)`` and ``run(args)`` (``draining_server``: serve's uvicorn server)."""
