"""Turns a request into one :class:`GenerationPlan` per choice: what will be said, decided up front.

Steps, in order (``generate`` runs on the event loop per request, so everything that can be is
compiled at load time):

1. count prompt tokens and reject what does not fit the context (before any matching);
2. match the stripped last user message (first entry wins, else the default body);
3. per choice: pick the variant / synthetic length from a stable draw, render the template;
4. ``ignore_eos``: pad with filler up to the token budget;
5. tokenize, truncate to the budget, then cut at the earliest ``stop`` string (excluded) found in
   what is left.

With ``token_ids=True`` (runtime.py asks when the engine has a prefix cache or publishes KV
events) each plan also carries the prompt's token ids - the chat template's tokens included, so
``len(prompt_token_ids) == prompt_tokens`` - and its output tokens' ids; engines hash them into
prefix-cache blocks. A Hugging Face tokenizer always produces ids (it counts by tokenizing).

finish_reason is ``length`` when the budget cut the output or ``ignore_eos`` filled it, else
``stop``. The budget is ``max_tokens``, or ``context_length - prompt_tokens`` when None.
NOTE: as in vLLM, ``ignore_eos`` ignores only the end of the scripted text: a stop string still
ends the output (finish_reason ``stop``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from llmsim.llm.embedding import embed
from llmsim.llm.errors import ContextLengthError, ResponseFormatError
from llmsim.llm.matcher import Matcher
from llmsim.llm.prompt import count_prompt_tokens, prompt_token_ids
from llmsim.llm.script import NO_GROUPS, Body, Content, Entry, JsonAnswer, Script, Synthetic, ToolCalls
from llmsim.llm.stable_hash import ChoiceHash
from llmsim.llm.tokenizer import RegexTokenizer, Tokenizer, Tokens
from llmsim.llm.tool_calls import hermes_text, render_tool_calls
from llmsim.types import FinishReason, GenerationPlan, GenerationRequest, Message, ToolCall, ToolCallDelta, ToolChoice

__all__ = ["Generator"]


def last_user_message(messages: Sequence[Message]) -> str:
    """Content of the last ``user`` message, "" when there is none."""
    for message in reversed(messages):
        if message.role == "user":
            return message.content
    return ""


def _stop_at(text: str, stop: Sequence[str]) -> int:
    """Index of the earliest occurrence of any stop string, -1 when none occurs."""
    cut = -1
    for s in stop:
        if not s:
            continue  # an empty stop string would end every output before it starts
        # Only an occurrence starting before the current cut can win.
        at = text.find(s, 0, cut + len(s) - 1 if cut >= 0 else len(text))
        if at >= 0:
            cut = at
    return cut


class Generator:
    """Decides what one served model says.

    Parameters
    ----------
    script:
        The parsed responses file (:func:`llmsim.llm.load_responses`).
    model_name:
        Served model name, the ``{model}`` template variable.
    context_length:
        Maximum prompt + output tokens (vLLM's ``max_model_len``).
    tokenizer:
        The model's tokenizer (default: the built-in regex tokenizer).
    token_ids:
        Put token ids in the plans (prompt and outputs) for the engine's prefix cache.
    """

    __slots__ = ("_ids", "_matcher", "context_length", "model_name", "script", "tokenizer")

    def __init__(
        self,
        script: Script,
        *,
        model_name: str,
        context_length: int,
        tokenizer: Tokenizer | None = None,
        token_ids: bool = False,
    ) -> None:
        if context_length < 1:
            raise ValueError(f"context_length must be >= 1, got {context_length}")
        self.script = script
        self.model_name = model_name
        self.context_length = context_length
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else RegexTokenizer()
        # The regex tokenizer counts without building ids; any other one counts by tokenizing.
        self._ids = token_ids or not isinstance(self.tokenizer, RegexTokenizer)
        self._matcher = Matcher(script.entries)

    def prompt_token_ids(self, request: GenerationRequest) -> tuple[int, ...]:
        """The prompt's token ids as the engine sees them (``/tokenize``): template tokens included."""
        return prompt_token_ids(request, self.tokenizer)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """Text of token ids (``/detokenize``); ValueError("Token id N is out of vocabulary")."""
        return self.tokenizer.decode(token_ids)

    def token_strings(self, token_ids: Sequence[int]) -> list[str]:
        """Each id's token string (``/tokenize`` with ``return_token_strs``)."""
        return self.tokenizer.id_to_token(token_ids)

    # Token ids (/tokenize, /detokenize, token-id prompts, echo) from the model's tokenizer.

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def tokenize_text(self, text: str, *, add_special_tokens: bool = True) -> tuple[list[str], list[int]]:
        """A completions prompt's token strings and ids (BOS first by default): as many as its ``prompt_tokens``."""
        return self.tokenizer.text_prompt(text, add_special_tokens=add_special_tokens)

    def tokenize_chat(
        self,
        messages: Sequence[Message],
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        add_special_tokens: bool = False,
    ) -> tuple[list[str], list[int]]:
        """A chat prompt's token strings and ids through the chat template: as many as its ``prompt_tokens`` by default."""
        return self.tokenizer.chat_prompt(
            messages,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            add_special_tokens=add_special_tokens,
        )

    def embedding_plan(self, prompt_tokens: int) -> GenerationPlan:
        """An embedding request's plan: its prompt is prefilled, nothing is generated. Raises :class:`ContextLengthError`."""
        if prompt_tokens > self.context_length:
            raise ContextLengthError.embedding_too_long(self.context_length, prompt_tokens)
        return GenerationPlan(
            prompt_tokens=prompt_tokens, tokens=(), finish_reason=FinishReason.STOP, entry_id="embedding"
        )

    def embed(self, tokens: Sequence[str], dimensions: int, keep: int | None = None) -> list[float]:
        """The deterministic embedding of an input's tokens (:mod:`llmsim.llm.embedding`)."""
        return embed(tokens, dimensions, keep)

    def match(self, text: str) -> tuple[Entry, Mapping[str, str]]:
        """The entry answering a (stripped) user message and its template variables."""
        found = self._matcher.match(text)
        return found if found is not None else (self.script.default, NO_GROUPS)

    def generate(self, request: GenerationRequest) -> tuple[GenerationPlan, ...]:
        """One plan per choice (``request.n``). Raises :class:`ContextLengthError`."""
        with_ids = self._ids
        prompt_ids: tuple[int, ...] | None = None
        regex = isinstance(self.tokenizer, RegexTokenizer)
        if regex or not with_ids:
            # Counted without building ids (the regex tokenizer's template has fixed costs), so a
            # prompt far past the context is refused before anything else is spent on it.
            prompt_tokens = count_prompt_tokens(request)
        else:
            prompt_ids = prompt_token_ids(request, self.tokenizer)
            prompt_tokens = len(prompt_ids)
        context = self.context_length
        if prompt_tokens > context:
            raise ContextLengthError.prompt_too_long(context, prompt_tokens)
        if with_ids and prompt_ids is None:
            prompt_ids = prompt_token_ids(request, self.tokenizer)
        max_tokens = request.max_tokens
        if max_tokens is not None and prompt_tokens + max_tokens > context:
            raise ContextLengthError.max_tokens_too_large(context, prompt_tokens, max_tokens)
        budget = context - prompt_tokens if max_tokens is None else max_tokens

        raw = "" if request.prompt_token_ids is not None else last_user_message(request.messages)
        key = raw.strip()
        entry, groups = self.match(key)
        variables = {**groups, "last_user_message": raw, "model": self.model_name}
        seed = self.script.seed if request.seed is None else request.seed
        hasher = ChoiceHash(seed, entry.id, key)
        tokenizer = self.tokenizer
        # Renders and tokenizations shared by choices that say the same thing.
        encoded: dict[str, Tokens] = {}
        body = entry.body
        calls = _tool_calls(body, request, variables)
        deltas: tuple[ToolCallDelta | None, ...] = ()
        if calls:
            call_tokens, deltas = render_tool_calls(calls)
            call_out: Tokens = (call_tokens, tokenizer.ids_of_tokens(call_tokens) if with_ids else None)

        plans = []
        for index in range(request.n):
            choice_draw, filler_draw = hasher.draw(index)
            variant: int | None = None
            if calls:
                out = call_out
            elif isinstance(body, Synthetic):
                if request.json_output:
                    raise ResponseFormatError.not_json(entry.id)
                n = body.min_tokens + choice_draw % (body.max_tokens - body.min_tokens + 1)
                # One past the budget is enough to know it was cut; skip building the rest.
                out = tokenizer.filler(min(n, budget + 1), filler_draw, leading_space=False, with_ids=with_ids)
            else:
                if isinstance(body, Content):
                    text = body.template.render(variables)
                elif isinstance(body, JsonAnswer):
                    text = body.value.render(variables)
                elif isinstance(body, ToolCalls):
                    # Tools not offered (or tool_choice "none"): the calls are plain text, unparsed.
                    text = hermes_text([ToolCall(c.name, c.arguments.render(variables)) for c in body.calls])[0]
                else:
                    variant = choice_draw % len(body.templates)
                    text = body.templates[variant].render(variables)
                cached = encoded.get(text)
                if cached is None:
                    if request.json_output and not isinstance(body, JsonAnswer) and not _is_json(text):
                        raise ResponseFormatError.not_json(entry.id)
                    cached = encoded[text] = tokenizer.split(text, with_ids)
                out = cached
            full = out[0]
            (tokens, ids), finish = self._finish(out, budget, request, filler_draw >> 32)
            # Calls cut short (max_tokens, a stop string) or padded (ignore_eos) do not parse: plain text.
            intact = bool(calls) and finish is FinishReason.STOP and tokens == full
            plans.append(
                GenerationPlan(
                    prompt_tokens=prompt_tokens,
                    tokens=tokens,
                    finish_reason=finish,
                    entry_id=entry.id,
                    variant=variant,
                    choice_index=index,
                    tool_calls=calls if intact else (),
                    tool_deltas=deltas if intact else (),
                    prompt_token_ids=prompt_ids,
                    token_ids=ids,
                    lora_name=request.lora_name,
                )
            )
        return tuple(plans)

    def _finish(
        self, out: Tokens, budget: int, request: GenerationRequest, pad_draw: int
    ) -> tuple[Tokens, FinishReason]:
        """Pad (ignore_eos), truncate to the budget, cut at a stop string; with the finish reason."""
        tokens, ids = out
        with_ids = ids is not None
        if request.ignore_eos and len(tokens) < budget:
            pad, pad_ids = self.tokenizer.filler(
                budget - len(tokens), pad_draw, leading_space=bool(tokens), with_ids=with_ids
            )
            tokens += pad
            if ids is not None and pad_ids is not None:
                ids += pad_ids
        truncated = len(tokens) > budget
        if truncated:
            tokens = tokens[:budget]
            if ids is not None:
                ids = ids[:budget]
        # Stop strings are looked for in the text actually generated, as vLLM does: one that would
        # only complete after the budget never fires.
        if request.stop:
            text = "".join(tokens)
            cut = _stop_at(text, request.stop)
            if cut >= 0:
                return self.tokenizer.split(text[:cut], with_ids), FinishReason.STOP
        if truncated or request.ignore_eos:
            return (tokens, ids), FinishReason.LENGTH
        return (tokens, ids), FinishReason.STOP


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _tool_calls(body: Body, request: GenerationRequest, variables: Mapping[str, str]) -> tuple[ToolCall, ...]:
    """The calls an answer makes, given what the request offers and forces.

    ``auto``: the entry's scripted calls (none for another body). ``required``: those, else a call
    of the first offered tool with no arguments. A named tool: the entry's call of it, else a call
    of it with no arguments. ``parallel_tool_calls: false`` keeps the first call.
    """
    choice = request.tool_choice
    if choice is ToolChoice.NONE:
        return ()
    scripted: tuple[ToolCall, ...] = ()
    if isinstance(body, ToolCalls):
        scripted = tuple(ToolCall(c.name, c.arguments.render(variables)) for c in body.calls)
    if choice is ToolChoice.NAMED:
        name = request.named_tool or ""
        calls = tuple(c for c in scripted if c.name == name) or (ToolCall(name, "{}"),)
    elif choice is ToolChoice.REQUIRED:
        calls = scripted or (ToolCall(request.tools[0], "{}"),)
    else:
        calls = scripted
    return calls if request.parallel_tool_calls else calls[:1]
