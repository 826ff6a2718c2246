"""The generator: context checks, matching, variant choice, stop, truncation, ignore_eos, synthetic."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from llmsim.llm import ContextLengthError, Generator, parse_responses
from llmsim.llm.tokenizer import count
from llmsim.types import FinishReason, GenerationRequest, Message

SCRIPT = """
seed: 5
responses:
  - id: ping
    match: {exact: ping}
    content: "pong"
  - id: count
    match: {exact: count}
    content: "one two three four"
  - id: echo
    match: {regex: '^echo (?P<what>.*)$'}
    content: "[{what}] raw=<{last_user_message}> by {model}"
  - id: pick
    match: {exact: pick}
    variants: ["red", "green", "blue"]
  - id: long
    match: {exact: long}
    synthetic: {tokens: [20, 30]}
  - id: empty
    match: {exact: ""}
    content: "nothing to say"
default:
  content: "Hi there."
"""


def generator(context_length: int = 1000) -> Generator:
    return Generator(parse_responses(SCRIPT, "t.yml"), model_name="sim-model", context_length=context_length)


def chat(text: str, **kw: Any) -> GenerationRequest:
    return GenerationRequest(model="x", messages=(Message("user", text),), **kw)


def one(request: GenerationRequest, context_length: int = 1000) -> tuple[str, FinishReason, str, int | None]:
    (plan,) = generator(context_length).generate(request)
    return "".join(plan.tokens), plan.finish_reason, plan.entry_id, plan.variant


def expected_draw(seed: int, entry_id: str, text: str, index: int) -> tuple[int, int]:
    # The formula documented in stable_hash.py, written out independently.
    message = (
        b"llmsim/v1\x00"
        + str(seed).encode()
        + b"\x00"
        + len(entry_id.encode()).to_bytes(4, "big")
        + entry_id.encode()
        + len(text.encode()).to_bytes(8, "big")
        + text.encode()
        + str(index).encode()
    )
    digest = hashlib.blake2b(message, digest_size=16).digest()
    return int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big")


# --- context length ------------------------------------------------------------------------

# "ping": 1 content token + 4 per message + 3 priming = 8 prompt tokens.
PING_PROMPT = 8


def test_prompt_longer_than_context_is_rejected_with_vllm_wording() -> None:
    with pytest.raises(ContextLengthError) as exc:
        generator(context_length=7).generate(chat("ping"))
    assert exc.value.param == "input_tokens"
    assert exc.value.message == (
        "This model's maximum context length is 7 tokens. However, your prompt contains 8 input tokens, "
        "which exceeds this limit even without any output tokens. Please reduce the length of the input prompt."
    )


def test_prompt_plus_max_tokens_over_context_is_rejected() -> None:
    with pytest.raises(ContextLengthError) as exc:
        generator(context_length=20).generate(chat("ping", max_tokens=13))
    assert exc.value.param == "max_tokens"
    assert exc.value.message == (
        "'max_tokens' or 'max_completion_tokens' is too large: 13. This model's maximum context length is 20 "
        "tokens and your request has 8 input tokens (13 > 20 - 8)."
    )
    # One fewer fits exactly.
    assert one(chat("ping", max_tokens=12), context_length=20)[0] == "pong"


def test_prompt_filling_the_context_leaves_no_output() -> None:
    (plan,) = generator(context_length=PING_PROMPT).generate(chat("ping"))
    assert plan.tokens == ()
    assert plan.finish_reason is FinishReason.LENGTH
    assert plan.prompt_tokens == PING_PROMPT


# --- matching and templates ---------------------------------------------------------------


def test_matches_last_user_message_stripped_and_renders_raw_text() -> None:
    request = GenerationRequest(
        model="x",
        messages=(Message("user", "ping"), Message("assistant", "pong"), Message("user", "  echo {a}  \n")),
    )
    text, finish, entry, variant = one(request)
    # The regex sees the stripped text; {last_user_message} is the raw one; braces copied as is.
    assert text == "[{a}] raw=<  echo {a}  \n> by sim-model"
    assert (finish, entry, variant) == (FinishReason.STOP, "echo", None)


def test_no_match_uses_default() -> None:
    assert one(chat("what?"))[:3] == ("Hi there.", FinishReason.STOP, "default")


def test_token_id_prompt_is_matched_as_empty_text() -> None:
    request = GenerationRequest(model="x", messages=(Message("user", "ping"),), prompt_token_ids=(1, 2, 3), chat=False)
    (plan,) = generator().generate(request)
    assert (plan.entry_id, plan.prompt_tokens) == ("empty", 3)


def test_system_only_conversation_matches_empty_text() -> None:
    request = GenerationRequest(model="x", messages=(Message("system", "ping"),))
    assert one(request)[2] == "empty"


# --- variants and determinism -----------------------------------------------------------------


@pytest.mark.parametrize("seed", [None, 0, 7, -3])
def test_variant_follows_the_stable_hash(seed: int | None) -> None:
    plans = generator().generate(chat(" pick ", n=4, seed=seed))
    colours = ["red", "green", "blue"]
    for index, plan in enumerate(plans):
        # The file's seed (5) unless the request gives one; the matched text is stripped.
        first, _ = expected_draw(5 if seed is None else seed, "pick", "pick", index)
        assert plan.choice_index == index
        assert plan.variant == first % 3
        assert "".join(plan.tokens) == colours[first % 3]


def test_choice_zero_is_the_single_choice_answer() -> None:
    g = generator()
    (single,) = g.generate(chat("pick", seed=11))
    first = g.generate(chat("pick", seed=11, n=3))[0]
    assert single == first


def test_variants_spread_over_seeds() -> None:
    g = generator()
    seen = {g.generate(chat("pick", seed=s))[0].variant for s in range(30)}
    assert seen == {0, 1, 2}


# --- stop, truncation ---------------------------------------------------------------------


def test_stop_cuts_at_earliest_stop_string_excluded() -> None:
    assert one(chat("count", stop=("four", "two")))[:2] == ("one ", FinishReason.STOP)


def test_stop_string_starting_before_an_earlier_found_one() -> None:
    # "three" is found first (index 8); "o t" starts at index 6 and ends inside "three".
    assert one(chat("count", stop=("three", "o t")))[:2] == ("one tw", FinishReason.STOP)


def test_stop_not_found_and_empty_stop_ignored() -> None:
    assert one(chat("count", stop=("five", "")))[:2] == ("one two three four", FinishReason.STOP)


def test_max_tokens_truncates_with_length() -> None:
    (plan,) = generator().generate(chat("count", max_tokens=2))
    assert plan.tokens == ("one", " two")
    assert plan.finish_reason is FinishReason.LENGTH
    # Exactly enough room: the natural end wins.
    assert one(chat("count", max_tokens=4))[1] is FinishReason.STOP


def test_stop_after_the_budget_is_a_length_finish() -> None:
    assert one(chat("count", max_tokens=2, stop=("four",)))[:2] == ("one two", FinishReason.LENGTH)
    # A stop string that would complete only after the budget never fires.
    assert one(chat("count", max_tokens=2, stop=("two three",)))[:2] == ("one two", FinishReason.LENGTH)
    # One that completes within the budget does.
    assert one(chat("count", max_tokens=2, stop=("e t",)))[:2] == ("on", FinishReason.STOP)


# --- ignore_eos -----------------------------------------------------------------------------


def test_ignore_eos_pads_to_exactly_max_tokens() -> None:
    (plan,) = generator().generate(chat("count", max_tokens=50, ignore_eos=True))
    assert plan.num_output_tokens == 50
    assert plan.tokens[:4] == ("one", " two", " three", " four")
    assert plan.finish_reason is FinishReason.LENGTH
    assert count("".join(plan.tokens)) == 50


def test_ignore_eos_without_max_tokens_fills_the_context() -> None:
    (plan,) = generator(context_length=100).generate(chat("ping", ignore_eos=True))
    assert plan.num_output_tokens == 100 - PING_PROMPT
    assert plan.finish_reason is FinishReason.LENGTH


def test_ignore_eos_still_honours_stop_strings() -> None:
    assert one(chat("count", max_tokens=50, ignore_eos=True, stop=("three",)))[:2] == ("one two ", FinishReason.STOP)


def test_max_tokens_none_means_rest_of_context() -> None:
    # "count" prompt: 1 + 4 + 3 = 8 tokens; 10 - 8 = 2 tokens of room.
    assert one(chat("count"), context_length=10)[:2] == ("one two", FinishReason.LENGTH)


# --- synthetic ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_synthetic_length_follows_the_stable_hash(seed: int) -> None:
    (plan,) = generator().generate(chat("long", seed=seed))
    first, _ = expected_draw(seed, "long", "long", 0)
    n = 20 + first % (30 - 20 + 1)
    assert plan.num_output_tokens == n
    assert count("".join(plan.tokens)) == n
    assert not plan.tokens[0].startswith(" ")
    assert plan.finish_reason is FinishReason.STOP
    assert plan.variant is None


def test_synthetic_truncated_by_max_tokens() -> None:
    (plan,) = generator().generate(chat("long", max_tokens=5))
    (full,) = generator().generate(chat("long"))
    assert plan.tokens == full.tokens[:5]
    assert plan.finish_reason is FinishReason.LENGTH
    # Exactly the drawn length: not cut.
    (exact,) = generator().generate(chat("long", max_tokens=full.num_output_tokens))
    assert (exact.tokens, exact.finish_reason) == (full.tokens, FinishReason.STOP)


def test_plans_carry_prompt_tokens_and_n() -> None:
    plans = generator().generate(chat("ping", n=3))
    assert [p.choice_index for p in plans] == [0, 1, 2]
    assert {p.prompt_tokens for p in plans} == {PING_PROMPT}
    assert {p.tokens for p in plans} == {("pong",)}


def test_lone_surrogate_prompt_is_served() -> None:
    assert one(chat("pick \ud800"))[2] == "default"
