"""Response bodies with ``{name}`` placeholders, parsed and checked once at load time.

``{{`` and ``}}`` are literal braces. Only known names are substituted: user text is never passed
to ``str.format``, so braces in a prompt are copied as they are.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

__all__ = ["Template", "TemplateError"]

# A placeholder, an escaped brace, or a lone brace (an error).
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class TemplateError(ValueError):
    """A body that cannot be rendered; the message says where and how to fix it."""


class Template:
    """A parsed body: literal text interleaved with variable names."""

    __slots__ = ("_parts", "names", "source")

    def __init__(self, source: str, known: Collection[str]) -> None:
        """Parse ``source``; raise :class:`TemplateError` for a name not in ``known`` or a lone brace."""
        parts: list[tuple[bool, str]] = []  # (is_variable, literal text or name)
        literal: list[str] = []
        pos = 0
        for m in _TOKEN.finditer(source):
            literal.append(source[pos : m.start()])
            pos = m.end()
            token = m.group()
            if token in ("{{", "}}"):
                literal.append(token[0])
                continue
            name = m.group(1)
            if name is None:
                raise TemplateError(
                    f"single '{token}' at position {m.start()}; write '{token * 2}' for a literal brace"
                )
            if not _NAME.fullmatch(name):
                raise TemplateError(
                    f"invalid placeholder '{token}' at position {m.start()}; write '{{{{' and '}}}}' for literal braces"
                )
            if name not in known:
                raise TemplateError(f"unknown template variable '{name}' (known: {', '.join(sorted(known))})")
            text = "".join(literal)
            if text:
                parts.append((False, text))
            literal = []
            parts.append((True, name))
        literal.append(source[pos:])
        tail = "".join(literal)
        if tail or not parts:
            parts.append((False, tail))
        self._parts = tuple(parts)
        self.names = frozenset(name for is_var, name in parts if is_var)
        self.source = source

    @property
    def is_constant(self) -> bool:
        return not self.names

    def render(self, variables: Mapping[str, str]) -> str:
        """The body with every placeholder replaced by its value in ``variables``."""
        return "".join(variables[text] if is_var else text for is_var, text in self._parts)

    def __repr__(self) -> str:
        return f"Template({self.source!r})"
