"""Same request, same answer: across processes with different hash seeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from llmsim.llm import Generator, load_responses
from llmsim.types import GenerationRequest, Message

PROMPTS = ["hello", "Tell me a story", "something unscripted", "What is the weather in Oslo?"]

PROGRAM = """
import json, sys
from llmsim.llm import Generator, load_responses
from llmsim.types import GenerationRequest, Message
g = Generator(load_responses(), model_name="m", context_length=8192)
out = []
for text in json.loads(sys.argv[1]):
    for plan in g.generate(GenerationRequest(model="m", messages=(Message("user", text),), n=3)):
        out.append(["".join(plan.tokens), plan.variant, plan.entry_id])
print(json.dumps(out))
"""


def run(hash_seed: str) -> list[list[object]]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, json.dumps(PROMPTS)], env=env, capture_output=True, text=True, check=True
    )
    result: list[list[object]] = json.loads(done.stdout)
    return result


def test_same_answers_in_processes_with_different_hash_seeds() -> None:
    a = run("1")
    b = run("987654")
    assert a == b
    g = Generator(load_responses(), model_name="m", context_length=8192)
    here = [
        ["".join(p.tokens), p.variant, p.entry_id]
        for text in PROMPTS
        for p in g.generate(GenerationRequest(model="m", messages=(Message("user", text),), n=3))
    ]
    assert a == here
    # The prompts exercise variants and synthetic bodies, not just constants.
    assert {row[2] for row in a} >= {"greeting", "long-form", "default", "weather"}
