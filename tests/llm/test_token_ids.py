"""Token ids: the regex tokenizer's stable ids and chat template, and a real tokenizer.json built here."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from llmsim.llm import Generator, HuggingFaceTokenizer, RegexTokenizer, parse_responses
from llmsim.llm.prompt import count_prompt_tokens
from llmsim.types import GenerationRequest, Message

SCRIPT = """
responses:
  - id: story
    match: {exact: tell}
    content: "Once upon a time, a river met the sea."
  - id: long
    match: {exact: long}
    synthetic: {tokens: [40, 40]}
default:
  content: "Hi there."
"""


def text_id(text: str) -> int:
    # The formula in vocabulary.py's docstring, computed independently.
    return 256 + int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") % (2**31 - 256)


def chat(*messages: tuple[str, str], **kw: object) -> GenerationRequest:
    return GenerationRequest(model="m", messages=tuple(Message(r, c) for r, c in messages), **kw)  # type: ignore[arg-type]


def test_regex_chat_prompt_ids_follow_the_template_and_count_what_usage_reports() -> None:
    gen = Generator(parse_responses(SCRIPT, "test"), model_name="m", context_length=4096, token_ids=True)
    request = chat(("system", "Be brief."), ("user", "tell"))
    (plan,) = gen.generate(request)
    # <|start_header_id|>=2 system=5 <|end_header_id|>=3 "Be" " brief" "." <|eot_id|>=4, then
    # 2 user=7 3 "tell" 4, then the reply priming 2 assistant=8 3.
    system = [2, 5, 3, text_id("Be"), text_id(" brief"), text_id("."), 4]
    user = [2, 7, 3, text_id("tell"), 4]
    expected = [*system, *user, 2, 8, 3]
    assert plan.prompt_token_ids == tuple(expected)
    assert plan.prompt_tokens == len(expected) == count_prompt_tokens(request)
    assert plan.token_ids == tuple(text_id(t) for t in plan.tokens)
    assert "".join(plan.tokens) == "Once upon a time, a river met the sea."


def test_completions_prompts_start_with_bos_and_token_id_prompts_are_taken_as_given() -> None:
    gen = Generator(parse_responses(SCRIPT, "test"), model_name="m", context_length=4096, token_ids=True)
    (plan,) = gen.generate(GenerationRequest(model="m", messages=(Message("user", "Hi you"),), chat=False))
    assert plan.prompt_token_ids == (1, text_id("Hi"), text_id(" you"))
    (plan,) = gen.generate(GenerationRequest(model="m", messages=(), prompt_token_ids=(9, 99, 999), chat=False))
    assert plan.prompt_token_ids == (9, 99, 999)


def test_ids_are_the_same_in_another_process() -> None:
    # Python's hash() is salted per process; these ids must not be.
    code = (
        "from llmsim.llm import RegexTokenizer; from llmsim.types import Message;"
        "print(RegexTokenizer().chat_prompt_ids([Message('user', 'héllo wörld 123')]))"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    here = RegexTokenizer().chat_prompt_ids([Message("user", "héllo wörld 123")])
    assert json.loads(other) == here


def test_a_conversations_next_prompt_starts_with_the_previous_prompt_and_answer() -> None:
    # What makes multi-turn chat hit the prefix cache: turn 2's prompt ids begin with turn 1's
    # prompt ids followed by turn 1's output ids (the reply priming is the assistant header).
    gen = Generator(parse_responses(SCRIPT, "test"), model_name="m", context_length=8192, token_ids=True)
    turn1 = chat(("system", "You are a storyteller."), ("user", "tell"))
    (first,) = gen.generate(turn1)
    answer = "".join(first.tokens)
    turn2 = chat(("system", "You are a storyteller."), ("user", "tell"), ("assistant", answer), ("user", "long"))
    (second,) = gen.generate(turn2)
    assert first.prompt_token_ids is not None
    assert first.token_ids is not None
    assert second.prompt_token_ids is not None
    done = first.prompt_token_ids + first.token_ids
    assert second.prompt_token_ids[: len(done)] == done
    # Filler output (a synthetic body) re-tokenizes to itself too.
    (third,) = gen.generate(turn2)
    assert third.token_ids == tuple(text_id(t) for t in third.tokens)
    assert len(third.tokens) == 40


def test_without_token_ids_plans_carry_none_and_counts_do_not_change() -> None:
    with_ids = Generator(parse_responses(SCRIPT, "test"), model_name="m", context_length=4096, token_ids=True)
    without = Generator(parse_responses(SCRIPT, "test"), model_name="m", context_length=4096)
    request = chat(("user", "tell me about rivers and the sea"), n=2, max_tokens=5, stop=("river",))
    a, b = with_ids.generate(request), without.generate(request)
    assert [p.tokens for p in a] == [p.tokens for p in b]
    assert [p.prompt_tokens for p in a] == [p.prompt_tokens for p in b]
    assert all(p.prompt_token_ids is None and p.token_ids is None for p in b)
    assert all(p.token_ids is not None and len(p.token_ids) == len(p.tokens) for p in a)


def test_regex_ids_decode_back_and_ids_outside_the_vocabulary_are_refused() -> None:
    tok = RegexTokenizer()
    ids = tok.chat_prompt_ids([Message("user", "Hello, world")])
    assert tok.decode(ids) == "<|start_header_id|>user<|end_header_id|>Hello, world<|eot_id|>" + (
        "<|start_header_id|>assistant<|end_header_id|>"
    )
    # An id inside the vocabulary that this process never made has no known text: shown by number.
    assert tok.decode([200]) == "<|token_200|>"
    with pytest.raises(ValueError, match=f"Token id {2**31} is out of vocabulary"):
        tok.decode([2**31])


# -- a real tokenizer.json, trained here on a few sentences (nothing downloaded) -----------------

CORPUS = [
    "Once upon a time, a river met the sea.",
    "The river ran to the sea, and the sea was wide.",
    "Hello there, how are you today?",
]
SPECIALS = ["<s>", "<|im_start|>", "<|im_end|>"]


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer_json(tmp_path_factory.mktemp("tok") / "tokenizer.json")


def write_tokenizer_json(path: Path) -> Path:
    """A small byte-level BPE tokenizer.json trained on :data:`CORPUS`, written to ``path``."""
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    # A BOS on completions prompts, as Llama-style post-processors add.
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok.save(str(path))
    return path


def test_a_tokenizer_json_counts_prompts_as_the_tokenizer_does(tokenizer_json: Path) -> None:
    reference = Tokenizer.from_file(str(tokenizer_json))
    gen = Generator(
        parse_responses(SCRIPT, "test"),
        model_name="m",
        context_length=4096,
        tokenizer=HuggingFaceTokenizer(tokenizer_json),
    )
    (plan,) = gen.generate(chat(("user", "tell")))
    # The chatml template rendered, then tokenized without special tokens: what a gateway
    # tokenizing the same text with the same file gets.
    rendered = "<|im_start|>user\ntell<|im_end|>\n<|im_start|>assistant\n"
    expected = reference.encode(rendered, add_special_tokens=False).ids
    assert plan.prompt_token_ids == tuple(expected)
    assert plan.prompt_tokens == len(expected)
    # The template's markers are added tokens: one id each.
    im_start = reference.token_to_id("<|im_start|>")
    assert im_start is not None
    assert expected.count(im_start) == 2
    # Output split at the tokenizer's token boundaries: pieces join to the text, ids are its ids.
    answer = "Once upon a time, a river met the sea."
    assert "".join(plan.tokens) == answer
    assert plan.token_ids == tuple(reference.encode(answer, add_special_tokens=False).ids)
    # Completions: the tokenizer's own post-processor adds <s> (vLLM's add_special_tokens default).
    (completion,) = gen.generate(GenerationRequest(model="m", messages=(Message("user", "Hello there"),), chat=False))
    assert completion.prompt_token_ids == tuple(reference.encode("Hello there").ids)
    assert completion.prompt_token_ids is not None
    assert completion.prompt_token_ids[0] == 0


def test_a_tokenizer_json_gives_exact_filler_lengths_and_decodes(tokenizer_json: Path) -> None:
    gen = Generator(
        parse_responses(SCRIPT, "test"),
        model_name="m",
        context_length=4096,
        tokenizer=HuggingFaceTokenizer(tokenizer_json),
    )
    (plan,) = gen.generate(chat(("user", "long")))
    assert len(plan.tokens) == 40
    assert plan.token_ids is not None
    assert len(plan.token_ids) == 40
    (capped,) = gen.generate(chat(("user", "tell"), max_tokens=3))
    assert capped.token_ids is not None
    assert len(capped.tokens) == len(capped.token_ids) == 3
    assert gen.detokenize(list(capped.token_ids)) == "".join(capped.tokens)


def test_a_broken_tokenizer_file_or_template_is_refused(tmp_path: Path, tokenizer_json: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="cannot load tokenizer"):
        HuggingFaceTokenizer(bad)
    with pytest.raises(ValueError, match="unknown chat_template 'jinja'"):
        HuggingFaceTokenizer(tokenizer_json, chat_template="jinja")
