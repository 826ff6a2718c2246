"""The CRD's CEL rules, each declared once: :meth:`Rule.cel` is what the API server runs, :meth:`Rule.holds` its
Python twin, which the operator runs itself (kube-apiserver < 1.25 ignores ``x-kubernetes-validations``).

A rule is one of a few shapes small enough to write both ways without a CEL interpreter. ``has()`` in CEL
and ``in`` here agree because both see the object after defaulting (the API server's, :mod:`.defaulting`).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# One fault per request: the rates may add up to 1 plus this much float rounding (as llmsim).
_ROUNDING = 1e-9


def _has(obj: Any, path: str) -> bool:
    for key in path.split("."):
        if not isinstance(obj, Mapping) or obj.get(key) is None:
            return False
        obj = obj[key]
    return True


def _get(obj: Any, path: str) -> Any:
    for key in path.split("."):
        obj = obj[key]
    return obj


@dataclass(frozen=True, slots=True)
class Rule(ABC):
    """A validation of the object it is attached to; ``message`` is what the user reads either way."""

    message: str

    @abstractmethod
    def cel(self) -> str:
        """The rule in CEL, on ``self`` (the object at the rule's node)."""

    @abstractmethod
    def holds(self, obj: Mapping[str, Any]) -> bool:
        """The rule in Python, on the same (defaulted) object."""

    def validation(self) -> dict[str, str]:
        """The ``x-kubernetes-validations`` entry."""
        return {"rule": self.cel(), "message": self.message}


@dataclass(frozen=True, slots=True)
class NotBoth(Rule):
    """At most one of two fields."""

    first: str
    second: str

    def cel(self) -> str:
        return f"!(has(self.{self.first}) && has(self.{self.second}))"

    def holds(self, obj: Mapping[str, Any]) -> bool:
        return not (_has(obj, self.first) and _has(obj, self.second))


@dataclass(frozen=True, slots=True)
class NeedsOneGroup(Rule):
    """Every field of at least one group, unless a field has another value than ``when``'s."""

    groups: Sequence[Sequence[str]]
    # (field, value): the rule applies only when the field has this value.
    when: tuple[str, str] | None = None

    def cel(self) -> str:
        def group(fields: Sequence[str]) -> str:
            text = " && ".join(f"has(self.{f})" for f in fields)
            return f"({text})" if len(fields) > 1 else text

        terms = [group(g) for g in self.groups]
        if self.when is not None:
            terms.insert(0, f"self.{self.when[0]} != '{self.when[1]}'")
        return " || ".join(terms)

    def holds(self, obj: Mapping[str, Any]) -> bool:
        if self.when is not None and (not _has(obj, self.when[0]) or _get(obj, self.when[0]) != self.when[1]):
            return True
        return any(all(_has(obj, f) for f in group) for group in self.groups)


@dataclass(frozen=True, slots=True)
class SumAtMost(Rule):
    """Numeric fields (absent: 0) add up to at most ``limit``."""

    fields: Sequence[str]
    limit: float

    def cel(self) -> str:
        total = " + ".join(f"(has(self.{f}) ? self.{f} : 0.0)" for f in self.fields)
        return f"{total} <= {self.limit + _ROUNDING!r}"

    def holds(self, obj: Mapping[str, Any]) -> bool:
        return sum(float(obj[f]) for f in self.fields if _has(obj, f)) <= self.limit + _ROUNDING


@dataclass(frozen=True, slots=True)
class Matches(Rule):
    """A string field matches a pattern and is at most ``max_length`` long."""

    field: str
    pattern: str
    max_length: int

    def cel(self) -> str:
        return f"self.{self.field}.matches('{self.pattern}') && size(self.{self.field}) <= {self.max_length}"

    def holds(self, obj: Mapping[str, Any]) -> bool:
        value = _get(obj, self.field) if _has(obj, self.field) else ""
        return bool(re.search(self.pattern, str(value))) and len(str(value)) <= self.max_length


def _has_cel(path: str) -> str:
    """CEL's presence test of a nested path, one level at a time (``has(self.a.b)`` fails when ``a`` is absent)."""
    keys = path.split(".")
    return " && ".join(f"has(self.{'.'.join(keys[: i + 1])})" for i in range(len(keys)))


@dataclass(frozen=True, slots=True)
class OnlyWhen(Rule):
    """A field set (and, with ``above``, greater than it) needs another field to have a given value."""

    field: str
    other: str
    value: str
    above: int | None = None

    def cel(self) -> str:
        limit = f" || self.{self.field} <= {self.above}" if self.above is not None else ""
        return f"!({_has_cel(self.field)}){limit} || self.{self.other} == '{self.value}'"

    def holds(self, obj: Mapping[str, Any]) -> bool:
        if not _has(obj, self.field):
            return True
        if self.above is not None and int(_get(obj, self.field)) <= self.above:
            return True
        return _has(obj, self.other) and _get(obj, self.other) == self.value


@dataclass(frozen=True, slots=True)
class ShorterWhen(Rule):
    """A string field is at most ``max_length`` long while another field is set."""

    field: str
    max_length: int
    when: str

    def cel(self) -> str:
        return f"!({_has_cel(self.when)}) || size(self.{self.field}) <= {self.max_length}"

    def holds(self, obj: Mapping[str, Any]) -> bool:
        return not _has(obj, self.when) or len(str(_get(obj, self.field))) <= self.max_length


def attach(*rules: Rule) -> dict[str, Any]:
    """Schema keys that attach ``rules`` to a node."""
    return {"x-kubernetes-validations": [r.validation() for r in rules]}


def broken_rule(schema: Mapping[str, Any], value: Any, rules: Sequence[Rule]) -> Rule | None:
    """The first of ``rules`` that ``value`` breaks where ``schema`` attaches it (depth first), else None."""
    by_cel = {r.cel(): r for r in rules}
    if isinstance(value, Mapping):
        for entry in schema.get("x-kubernetes-validations", ()):
            rule = by_cel[entry["rule"]]
            if not rule.holds(value):
                return rule
        for key, sub in schema.get("properties", {}).items():
            if key in value and (broken := broken_rule(sub, value[key], rules)) is not None:
                return broken
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            if (broken := broken_rule(schema["items"], item, rules)) is not None:
                return broken
    return None
