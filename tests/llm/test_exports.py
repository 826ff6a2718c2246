"""llmsim.llm's public surface is exactly its __all__."""

from __future__ import annotations

import llmsim.llm


def test_all_names_exist_and_nothing_else_is_public() -> None:
    for name in llmsim.llm.__all__:
        assert hasattr(llmsim.llm, name), name
    public = {n for n in vars(llmsim.llm) if not n.startswith("_")}
    submodules = {
        "errors",
        "filler",
        "generator",
        "loader",
        "matcher",
        "prompt",
        "script",
        "stable_hash",
        "template",
        "tokenizer",
    }
    assert public - submodules == set(llmsim.llm.__all__)
