"""Token ids for the regex tokenizer: what /tokenize returns and what token-id prompts are checked against.

The regex tokenizer (:mod:`llmsim.llm.tokenizer`) has an open vocabulary (any letter run is one
token), so its ids are made, not learned, in a vocabulary of :data:`VOCAB_SIZE` ids (Llama 3's):

- a table of common tokens with fixed ids from 0: ASCII characters with and without a leading
  space, whitespace runs, digit groups, contractions, everyday words, the filler's words and the
  chat roles (each as is and capitalized, with and without a leading space). Filler text and
  much of everyday English round-trips through ids;
- chat-template special tokens (:data:`BOS`, the header and end-of-turn markers) at the top;
- every other token at a stable hash into the ids in between. Those cannot be turned back into
  text: :meth:`Vocabulary.token` renders them ``<|token_N|>``.

One token is one id, so a prompt's id count is its token count (what ``usage.prompt_tokens`` says).
NOTE: an HF tokenizer (when a model configures one) replaces all of this with real ids.
"""

from __future__ import annotations

import hashlib

from llmsim.llm.filler import WORDS

__all__ = ["BOS", "END_HEADER", "EOT", "SPECIAL_TOKENS", "START_HEADER", "VOCABULARY", "VOCAB_SIZE", "Vocabulary"]

#: Llama 3's vocabulary size (128,000 BPE tokens + 256 special tokens).
VOCAB_SIZE = 128256

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
EOT = "<|eot_id|>"
SPECIAL_TOKENS = (BOS, EOS, START_HEADER, END_HEADER, EOT)

_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# Everyday words of prompts and scripted answers, beyond the filler's (split in _table).
_COMMON_TEXT = (
    "hello hi hey thanks thank please yes no ok okay sorry what why how who whom whose when where "
    "which i me my mine you your yours he him she we us our they them is am are was be been do does "
    "did done can could would should will shall might must have has had not don doesn didn isn aren "
    "won a an the this that these those there here it its of to in on at by for with from about "
    "into and or but if so because than then as like just also only very more most some any all "
    "each tell say said ask asked answer question help know think want need make get give take see "
    "look go come use try find write read explain describe show list name repeat after me story "
    "joke weather capital country city day today tomorrow time year number word text code data "
    "model good great bad new old big small first last next other same different right left true "
    "false one two three four five six seven eight nine ten hundred thousand million "
)
_CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")
_PUNCTUATION_RUNS = ("...", "?!", "!!", '?"', '."', ',"', ").", "),", "):", '".', '",', "**", "--", "->", "==")


def _table() -> tuple[str, ...]:
    out: dict[str, None] = {}
    printable = [chr(c) for c in range(0x21, 0x7F)]
    for ch in [" ", "\n", "\t", *printable]:
        out[ch] = None
    for ch in printable:
        out[" " + ch] = None
    for n in range(2, 9):
        out[" " * n] = None
        out["\n" * n] = None
    for digits in range(1, 4):
        for value in range(10**digits):
            out[f"{value:0{digits}d}"] = None
    for c in _CONTRACTIONS:
        out[c] = None
        out[c.upper()] = None
    for p in _PUNCTUATION_RUNS:
        out[p] = None
        out[" " + p] = None
    for word in (*_ROLES, *_COMMON_TEXT.split(), *WORDS):
        for form in (word, word.capitalize()):
            out[form] = None
            out[" " + form] = None
    return tuple(out)


class Vocabulary:
    """Bidirectional token string <-> id mapping (see the module docstring)."""

    __slots__ = ("_hashed_span", "_ids", "_strings", "size")

    def __init__(self, size: int = VOCAB_SIZE) -> None:
        strings = _table()
        if len(strings) + len(SPECIAL_TOKENS) >= size:
            raise ValueError(f"vocabulary of {size} ids cannot hold {len(strings)} table tokens")
        self.size = size
        self._strings = strings
        self._ids = {s: i for i, s in enumerate(strings)}
        for j, special in enumerate(SPECIAL_TOKENS):
            self._ids[special] = self.special_id(j)
        self._hashed_span = size - len(SPECIAL_TOKENS) - len(strings)

    def special_id(self, j: int) -> int:
        return self.size - len(SPECIAL_TOKENS) + j

    def id(self, token: str) -> int:
        """The id of one token string."""
        known = self._ids.get(token)
        if known is not None:
            return known
        digest = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        return len(self._strings) + int.from_bytes(digest, "big") % self._hashed_span

    def ids(self, tokens: list[str]) -> list[int]:
        get = self._ids.get
        return [i if (i := get(t)) is not None else self.id(t) for t in tokens]

    def token(self, token_id: int) -> str:
        """The text of an id; ids of hashed tokens (and out-of-range ones) have none."""
        if 0 <= token_id < len(self._strings):
            return self._strings[token_id]
        special = token_id - (self.size - len(SPECIAL_TOKENS))
        if 0 <= special < len(SPECIAL_TOKENS):
            return SPECIAL_TOKENS[special]
        return f"<|token_{token_id}|>"


#: The vocabulary of the regex tokenizer.
VOCABULARY = Vocabulary()
