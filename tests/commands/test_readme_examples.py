"""The README's responses.yml example is valid and matches as it says."""

from __future__ import annotations

from pathlib import Path

from llmsim.llm import parse_responses
from llmsim.llm.matcher import Matcher

README = Path(__file__).resolve().parents[2] / "README.md"


def yaml_after(heading: str) -> str:
    text = README.read_text()
    section = text[text.index(heading) :]
    start = section.index("```yaml") + len("```yaml")
    return section[start : section.index("```", start)]


def test_the_readme_responses_yml_example_is_valid() -> None:
    script = parse_responses(yaml_after("### responses.yml"), "README.md")
    assert [e.id for e in script.entries] == ["weather", "story"]
    found = Matcher(script.entries).match("What is the weather in Paris?")
    assert found is not None
    assert found[0].id == "weather"
    assert Matcher(script.entries).match("Hello") is None  # the default answers
