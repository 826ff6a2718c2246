"""Read responses.yml (or the embedded default) into a :class:`Script`, checking everything up front.

Every problem is a :class:`~llmsim.errors.ConfigError` naming the file, the entry
(``responses[3] (id 'greet')`` or ``default``) and the field (``match.regex``), so a broken file
stops the server at startup instead of failing requests. The file's shape is
:class:`~llmsim.llm.schema.ResponsesFile` (pydantic, as models.yml's); reading and error lines are
shared with models.yml (:mod:`llmsim.errors`).

File format::

    version: 1            # optional; only 1 exists
    seed: 0               # optional; default seed of variant and synthetic choices
    responses:            # checked top to bottom, first match wins
      - id: weather       # required, unique
        match: {regex: 'weather in (?P<city>\\w+)', ignore_case: true}
        content: "It is sunny in {city}."     # or variants: [...] or synthetic: {tokens: [min, max]}
      - id: weather-tool  # an answer that calls tools (when the request offers some)
        match: {regex: 'forecast for (?P<city>\\w+)'}
        tool_calls:       # each: name, arguments (a mapping; strings are templates)
          - {name: get_weather, arguments: {city: "{city}", unit: celsius}}
      - id: as-json       # a JSON answer (what response_format json_object asks for)
        match: {starts_with: "JSON"}
        json: {answer: "{last_user_message}", ok: true}
    default:              # required: a body, no match
      content: "..."

Matches (exactly one, against the stripped last user message): ``exact`` (string or list: equal
to one), ``starts_with`` (string or list: starts with one), ``contains`` (string or list: contains
one), ``regex`` (``re.search``, not fullmatch; anchor with ``^``/``$`` for a whole-text match).
``ignore_case: true`` compares casefolded text, or compiles the regex with ``re.IGNORECASE``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llmsim.errors import ConfigError, entry_label, from_validation_error, parse_yaml, read_yaml_file
from llmsim.llm.schema import ResponsesFile
from llmsim.llm.script import Script

__all__ = ["EMBEDDED_RESPONSES", "load_responses", "parse_responses"]

EMBEDDED_RESPONSES = "<embedded>/responses.yml"


def parse_responses(text: str, file: str) -> Script:
    """Parse responses.yml text; ``file`` names it in errors. Raises :class:`ConfigError`."""
    return _compile(parse_yaml(text, file), file)


def load_responses(path: str | Path | None = None) -> Script:
    """Parse ``path``, or the embedded default script when None. Raises :class:`ConfigError`."""
    if path is None:
        text = resources.files("llmsim").joinpath("data", "responses.yml").read_text(encoding="utf-8")
        return parse_responses(text, EMBEDDED_RESPONSES)
    return _compile(read_yaml_file(path), str(path))


def _compile(raw: Any, file: str) -> Script:
    # An empty file is YAML null: report what it lacks (the default body).
    document = {} if raw is None else raw
    try:
        spec = ResponsesFile.model_validate(document)
    except ValidationError as exc:
        raise from_validation_error(file, exc, ResponsesFile, document, {"responses": "id", "default": None}) from None
    # A check across entries, which no single field's validator can see.
    seen: set[str] = set()
    for i, entry in enumerate(spec.responses):
        if entry.id in seen:
            raise ConfigError(
                file, f"duplicate id '{entry.id}'", entry=entry_label("responses", i, "id", entry.id), field="id"
            )
        seen.add(entry.id)
    return spec.compile(file)
