"""YAML output for humans: multi-document streams, key order kept, multi-line strings as literal blocks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Literal block style keeps an embedded models.yml readable; PyYAML falls back to quoting
    # when the text cannot be a block (e.g. trailing spaces).
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_all(objects: Sequence[dict[str, Any]]) -> str:
    """Objects as one ``---``-separated YAML stream."""
    return "".join("---\n" + yaml.dump(o, Dumper=_Dumper, sort_keys=False, width=120) for o in objects)
