"""Templates: known names substituted, escaped braces, user text never formatted, typos caught."""

from __future__ import annotations

import pytest

from llmsim.llm.template import Template, TemplateError

KNOWN = {"model", "city", "last_user_message"}


def test_substitutes_known_names_and_unescapes_braces() -> None:
    t = Template("{{json}}: {model} in {city}! {{{city}}}", KNOWN)
    assert t.render({"model": "m1", "city": "Oslo"}) == "{json}: m1 in Oslo! {Oslo}"
    assert t.names == {"model", "city"}


def test_values_with_braces_are_copied_verbatim() -> None:
    t = Template("You said: {last_user_message}", KNOWN)
    assert t.render({"last_user_message": "{model} {0} {{x}}"}) == "You said: {model} {0} {{x}}"


def test_constant_template() -> None:
    t = Template("plain }} text {{", KNOWN)
    assert t.is_constant
    assert t.render({}) == "plain } text {"
    assert Template("", KNOWN).render({}) == ""


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("hello {cty}", "unknown template variable 'cty' (known: city, last_user_message, model)"),
        ("a { b", "single '{' at position 2; write '{{' for a literal brace"),
        ("a } b", "single '}' at position 2; write '}}' for a literal brace"),
        ('{"k": 1}', "invalid placeholder"),
        ("{0}", "invalid placeholder '{0}' at position 0"),
    ],
)
def test_errors(source: str, message: str) -> None:
    with pytest.raises(TemplateError) as exc:
        Template(source, KNOWN)
    assert str(exc.value).startswith(message)
