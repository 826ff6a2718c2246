"""Each CEL rule shape and its Python twin: the CEL text, and what the twin accepts."""

from __future__ import annotations

from typing import Any

import pytest

from llmsim_operator.rules import Matches, NeedsOneGroup, NotBoth, OnlyWhen, ShorterWhen, SumAtMost, attach, broken_rule

NOT_BOTH = NotBoth("a or b", "a", "b")
GROUPS = NeedsOneGroup("p, or x and y", [["p"], ["x", "y"]], when=("engine", "scheduler"))
SUM = SumAtMost("too much", ["a", "b"], 1.0)
NAME = Matches("bad name", "metadata.name", "^[a-z]+$", 5)
ONLY = OnlyWhen("dp needs scheduler", "dp.size", "engine", "scheduler", above=1)
SHORT = ShorterWhen("short when pd", "metadata.name", 3, "spec.pd")


def test_cel_texts() -> None:
    assert NOT_BOTH.cel() == "!(has(self.a) && has(self.b))"
    assert GROUPS.cel() == "self.engine != 'scheduler' || has(self.p) || (has(self.x) && has(self.y))"
    assert SUM.cel() == "(has(self.a) ? self.a : 0.0) + (has(self.b) ? self.b : 0.0) <= 1.000000001"
    assert NAME.cel() == "self.metadata.name.matches('^[a-z]+$') && size(self.metadata.name) <= 5"
    assert ONLY.cel() == "!(has(self.dp) && has(self.dp.size)) || self.dp.size <= 1 || self.engine == 'scheduler'"
    assert SHORT.cel() == "!(has(self.spec) && has(self.spec.pd)) || size(self.metadata.name) <= 3"
    assert attach(NOT_BOTH) == {"x-kubernetes-validations": [{"rule": NOT_BOTH.cel(), "message": "a or b"}]}


@pytest.mark.parametrize(
    ("rule", "obj", "holds"),
    [
        (NOT_BOTH, {}, True),
        (NOT_BOTH, {"a": 1}, True),
        (NOT_BOTH, {"a": 1, "b": 0}, False),
        (NOT_BOTH, {"a": 1, "b": None}, True),  # null is absent, as after the API server's pruning
        (GROUPS, {"engine": "fixed"}, True),
        (GROUPS, {"engine": "scheduler"}, False),
        (GROUPS, {"engine": "scheduler", "p": "x"}, True),
        (GROUPS, {"engine": "scheduler", "x": 1}, False),
        (GROUPS, {"engine": "scheduler", "x": 1, "y": 2}, True),
        (SUM, {}, True),
        (SUM, {"a": 0.1, "b": 0.9}, True),
        (SUM, {"a": 0.1, "b": 0.2, "c": 5}, True),
        (SUM, {"a": 0.5, "b": 0.6}, False),
        (NAME, {"metadata": {"name": "abc"}}, True),
        (NAME, {"metadata": {"name": "abcdef"}}, False),
        (NAME, {"metadata": {"name": "a-b"}}, False),
        (ONLY, {"engine": "fixed"}, True),
        (ONLY, {"engine": "fixed", "dp": {"size": 1}}, True),
        (ONLY, {"engine": "fixed", "dp": {"size": 2}}, False),
        (ONLY, {"engine": "scheduler", "dp": {"size": 2}}, True),
        (SHORT, {"metadata": {"name": "abcd"}, "spec": {}}, True),
        (SHORT, {"metadata": {"name": "abcd"}, "spec": {"pd": {}}}, False),  # {} is present, as for CEL
        (SHORT, {"metadata": {"name": "abcd"}, "spec": {"pd": {"x": 1}}}, False),
        (SHORT, {"metadata": {"name": "abc"}, "spec": {"pd": {"x": 1}}}, True),
    ],
)
def test_python_twins(rule: Any, obj: dict[str, Any], holds: bool) -> None:
    assert rule.holds(obj) is holds


def test_broken_rule_walks_the_schema_where_the_rules_are_attached() -> None:
    schema = {
        "type": "object",
        "properties": {
            "one": {"type": "object", **attach(NOT_BOTH)},
            "many": {"type": "array", "items": {"type": "object", **attach(SUM)}},
        },
    }
    rules = [NOT_BOTH, SUM]
    assert broken_rule(schema, {"one": {"a": 1}, "many": [{"a": 1}]}, rules) is None
    assert broken_rule(schema, {"one": {"a": 1, "b": 1}}, rules) is NOT_BOTH
    assert broken_rule(schema, {"many": [{"a": 0.2}, {"a": 0.7, "b": 0.7}]}, rules) is SUM
    # A rule at a node the object does not have is not run (as the API server).
    assert broken_rule(schema, {"a": 1, "b": 1}, rules) is None
