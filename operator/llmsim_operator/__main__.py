"""``python -m llmsim_operator`` is ``llmsim-operator``."""

from llmsim_operator.cli import main

raise SystemExit(main())
