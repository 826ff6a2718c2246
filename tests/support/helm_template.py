"""A minimal ``helm template`` for our chart's templates: no helm binary exists on these machines.

It implements the Go-template subset the chart uses, with Go's and Helm's semantics: ``{{- ... -}}``
whitespace trimming; ``if``/``else``, ``with``, ``range`` (over a list, ``.`` bound to each item),
``define`` and ``include``; pipelines (``a | f b``: the value becomes the last argument);
parenthesized sub-pipelines; string and number literals; ``.Values...``, ``.Release...``,
``.Chart...``, ``.Files.Get``; and Sprig's ``default``, ``quote``, ``printf``, ``trunc``,
``trimSuffix``, ``contains``, ``join``, ``indent``, ``nindent``, ``toYaml``. Anything else raises,
so a template that starts using more fails loudly here instead of rendering wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.DOTALL)
_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+)|(?P<open>\()|(?P<close>\))|(?P<pipe>\|)|(?P<word>[^\s()|]+))'
)


class TemplateError(ValueError):
    """A construct this renderer does not implement, or a template that Helm would refuse too."""


@dataclass
class _Node:
    kind: str  # text | action | if | with | range | define
    text: str = ""
    pipeline: str = ""
    body: list[_Node] = field(default_factory=list)
    orelse: list[_Node] = field(default_factory=list)


def _lex(source: str) -> list[tuple[str, str]]:
    """[("text", ...) | ("action", ...)] with Go's trim markers applied to the neighbouring text."""
    out: list[tuple[str, str]] = []
    pos = 0
    for match in _ACTION.finditer(source):
        text = source[pos : match.start()]
        if match.group(1):
            text = text.rstrip()
        out.append(("text", text))
        out.append(("action", match.group(2).strip()))
        pos = match.end()
        if match.group(3):
            while pos < len(source) and source[pos].isspace():
                pos += 1
    out.append(("text", source[pos:]))
    return out


def _parse(tokens: list[tuple[str, str]]) -> tuple[list[_Node], dict[str, list[_Node]]]:
    defines: dict[str, list[_Node]] = {}
    root: list[_Node] = []
    stack: list[tuple[_Node | None, list[_Node]]] = [(None, root)]
    for kind, value in tokens:
        current = stack[-1][1]
        if kind == "text":
            if value:
                current.append(_Node("text", text=value))
            continue
        keyword, _, rest = value.partition(" ")
        if keyword in ("if", "with", "range", "define"):
            node = _Node(keyword, pipeline=rest.strip())
            current.append(node)
            stack.append((node, node.body))
        elif keyword == "else":
            node_or_none, _ = stack[-1]
            if node_or_none is None or rest:
                raise TemplateError(f"unsupported else: {value!r}")
            stack[-1] = (node_or_none, node_or_none.orelse)
        elif keyword == "end":
            node_or_none, _ = stack.pop()
            if node_or_none is None:
                raise TemplateError("end without a block")
            if node_or_none.kind == "define":
                defines[_unquote(node_or_none.pipeline)] = node_or_none.body
                stack[-1][1].remove(node_or_none)
        elif value.startswith("/*"):
            continue
        else:
            current.append(_Node("action", pipeline=value))
    if len(stack) != 1:
        raise TemplateError("unclosed block")
    return root, defines


def _unquote(literal: str) -> str:
    if not (literal.startswith('"') and literal.endswith('"')):
        raise TemplateError(f"expected a string literal, got {literal!r}")
    return str(bytes(literal[1:-1], "utf-8").decode("unicode_escape"))


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


def _to_yaml(value: Any) -> str:
    # Helm's toYaml: sigs.k8s.io/yaml (keys sorted), without the final newline.
    return yaml.safe_dump(value, sort_keys=True, default_flow_style=False).rstrip("\n")


def _indent(width: int, text: str) -> str:
    pad = " " * width
    return pad + text.replace("\n", "\n" + pad)


def _go_format(value: Any) -> str:
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        raise TemplateError(f"printing a {type(value).__name__} needs toYaml: {value!r}")
    return str(value)


class Chart:
    """A chart directory: Chart.yaml, values.yaml, templates/, files for .Files.Get."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.meta: dict[str, Any] = yaml.safe_load((path / "Chart.yaml").read_text())
        self.default_values: dict[str, Any] = yaml.safe_load((path / "values.yaml").read_text())
        self.defines: dict[str, list[_Node]] = {}
        self.templates: dict[str, list[_Node]] = {}
        for template in sorted((path / "templates").iterdir()):
            nodes, defines = _parse(_lex(template.read_text()))
            self.defines.update(defines)
            if not template.name.startswith("_"):
                self.templates[template.name] = nodes

    def render(
        self, values: dict[str, Any] | None = None, release: str = "llmsim-operator", namespace: str = "llmsim-system"
    ) -> dict[str, str]:
        """Template file name -> rendered text, with ``values`` merged over values.yaml."""
        root = {
            "Values": _merge(self.default_values, values or {}),
            "Release": {"Name": release, "Namespace": namespace, "Service": "Helm"},
            "Chart": {
                "Name": self.meta["name"],
                "Version": self.meta["version"],
                "AppVersion": self.meta["appVersion"],
            },
            "Files": {"Get": lambda name: (self.path / name).read_text()},
        }
        return {name: self._run(nodes, root, root) for name, nodes in self.templates.items()}

    def manifests(self, values: dict[str, Any] | None = None, **release: str) -> list[dict[str, Any]]:
        """Every object the chart's templates render (NOTES.txt aside)."""
        out: list[dict[str, Any]] = []
        for name, text in self.render(values, **release).items():
            if name.endswith((".yaml", ".yml")):
                out += [doc for doc in yaml.safe_load_all(text) if doc]
        return out

    # -- evaluation -------------------------------------------------------------------------------

    def _run(self, nodes: list[_Node], dot: Any, root: dict[str, Any]) -> str:
        out = []
        for node in nodes:
            if node.kind == "text":
                out.append(node.text)
            elif node.kind == "action":
                out.append(_go_format(self._pipeline(node.pipeline, dot, root)))
            elif node.kind == "if":
                branch = node.body if _truthy(self._pipeline(node.pipeline, dot, root)) else node.orelse
                out.append(self._run(branch, dot, root))
            elif node.kind == "with":
                value = self._pipeline(node.pipeline, dot, root)
                out.append(self._run(node.body, value, root) if _truthy(value) else self._run(node.orelse, dot, root))
            elif node.kind == "range":
                items = self._pipeline(node.pipeline, dot, root) or []
                if not isinstance(items, list):
                    raise TemplateError(f"range over a {type(items).__name__} is not implemented")
                out.extend(self._run(node.body, item, root) for item in items)
            else:
                raise TemplateError(f"unexpected {node.kind}")
        return "".join(out)

    def _pipeline(self, source: str, dot: Any, root: dict[str, Any]) -> Any:
        tokens: list[tuple[str | None, str]] = [
            (m.lastgroup, m.group(m.lastgroup)) for m in _TOKEN.finditer(source) if m.lastgroup
        ]
        value, rest = self._commands(tokens, dot, root)
        if rest:
            raise TemplateError(f"unbalanced parentheses in {source!r}")
        return value

    def _commands(self, tokens: list[tuple[str | None, str]], dot: Any, root: dict[str, Any]) -> tuple[Any, list[Any]]:
        value: Any = _NOTHING
        while tokens and tokens[0][0] != "close":
            args: list[Any] = []
            while tokens and tokens[0][0] not in ("pipe", "close"):
                kind, text = tokens.pop(0)
                if kind == "open":
                    sub, tokens = self._commands(tokens, dot, root)
                    if not tokens or tokens[0][0] != "close":
                        raise TemplateError("missing )")
                    tokens = tokens[1:]
                    args.append(sub)
                elif kind == "str":
                    args.append(_unquote(text))
                elif kind == "num":
                    args.append(int(text))
                elif text.startswith(".") or text == "$":
                    args.append(_field(root if text.startswith("$") else dot, text.lstrip("$")))
                else:
                    args.append(_Function(text))
            if value is not _NOTHING:
                args.append(value)
            value = self._call(args, dot, root)
            if tokens and tokens[0][0] == "pipe":
                tokens = tokens[1:]
        return value, tokens

    def _call(self, args: list[Any], dot: Any, root: dict[str, Any]) -> Any:
        head, *rest = args
        if isinstance(head, _Function):
            if head.name == "include":
                name, data = rest
                return self._run(self.defines[name], data, root)
            function = _FUNCTIONS.get(head.name)
            if function is None:
                raise TemplateError(f"function {head.name!r} is not implemented")
            return function(*rest)
        if callable(head):
            return head(*rest)
        if rest:
            raise TemplateError(f"{head!r} is not a function")
        return head


_NOTHING = object()


@dataclass(frozen=True)
class _Function:
    name: str


def _field(value: Any, path: str) -> Any:
    for part in [p for p in path.split(".") if p]:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "default": lambda fallback, value=None: value if _truthy(value) else fallback,
    "quote": lambda value: '"' + _go_format(value).replace("\\", "\\\\").replace('"', '\\"') + '"',
    "printf": lambda fmt, *values: re.sub(r"%[sdv]", "{}", fmt).format(*(_go_format(v) for v in values)),
    "trunc": lambda n, text: text[:n],
    "trimSuffix": lambda suffix, text: text[: -len(suffix)] if suffix and text.endswith(suffix) else text,
    "contains": lambda needle, text: needle in text,
    "join": lambda sep, items: sep.join(_go_format(i) for i in items or []),
    "indent": _indent,
    "nindent": lambda width, text: "\n" + _indent(width, text),
    "toYaml": _to_yaml,
}
