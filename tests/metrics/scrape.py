"""Reading a /metrics page back with prometheus_client's own parser."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Page:
    # family name (counters without _total, as the parser names them) -> type
    types: dict[str, str]
    # (sample name, sorted label items) -> value
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float]

    def get(self, name: str, **labels: str) -> float:
        return self.values[(name, tuple(sorted(labels.items())))]

    def has(self, name: str, **labels: str) -> bool:
        return (name, tuple(sorted(labels.items()))) in self.values

    def bucket(self, name: str, le: str, model: str = "m") -> float:
        """Cumulative count of ``name`` at ``le`` for ``model``."""
        return self.get(name + "_bucket", model_name=model, engine="0", le=le)

    def names(self) -> set[str]:
        return {name for name, _ in self.values}


def parse(text: str) -> Page:
    types: dict[str, str] = {}
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in values, f"duplicate series {key}"
            values[key] = s.value
    return Page(types, values)
