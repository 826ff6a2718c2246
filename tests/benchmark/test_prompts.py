"""Prompts of exact lengths, as token ids or as chat text."""

from __future__ import annotations

import json

from llmsim.benchmark import Api, BodyBuilder, PromptShape, Shape
from llmsim.benchmark.prompts import segment_ids, segment_text
from llmsim.benchmark.workload import Role, Segment, Turn
from llmsim.llm.tokenizer import count


def test_token_ids_have_the_length_asked_and_equal_keys_give_equal_ids() -> None:
    for n in (1, 3, 4, 100, 70_000):  # 70,000 wraps around the id cycle
        assert len(segment_ids(Segment(Role.USER, (1, 2), n))) == n
    a = segment_ids(Segment(Role.USER, (5, 0), 256))
    assert a == segment_ids(Segment(Role.SYSTEM, (5, 0), 256))
    others = [segment_ids(Segment(Role.USER, (i, 0), 256)) for i in range(200)]
    # Distinct keys differ from the very first tokens: nothing for a prefix cache to share.
    assert len({tuple(ids[:3]) for ids in others}) == 200
    assert all(1000 <= t < 29000 for ids in others for t in ids)


def test_chat_text_is_one_llmsim_token_per_word() -> None:
    text = segment_text(Segment(Role.USER, (3, 1), 500))
    assert len(text.split()) == 500
    assert count(text) == 500


def test_a_completions_body_asks_for_exactly_the_output_length() -> None:
    turn = PromptShape(1000, 50, Shape.SHARED_PREFIX, system_prompt_tokens=400).turn(0, 0)
    body = json.loads(BodyBuilder("m", Api.COMPLETIONS).body(turn))
    assert len(body["prompt"]) == 1000
    assert body["prompt"][:400] == segment_ids(turn.prompt[0])
    assert (body["max_tokens"], body["ignore_eos"], body["stream"]) == (50, True, True)
    assert body["stream_options"] == {"include_usage": True}


def test_chat_messages_leave_room_for_the_template() -> None:
    turn = Turn((Segment(Role.SYSTEM, (-1, 0), 30), Segment(Role.USER, (0, 0), 40)), 5)
    builder = BodyBuilder("m", Api.CHAT, {(Role.SYSTEM, Role.USER): 11})
    system, user = json.loads(builder.body(turn))["messages"]
    assert (system["role"], user["role"]) == ("system", "user")
    assert (len(system["content"].split()), len(user["content"].split())) == (30, 29)
