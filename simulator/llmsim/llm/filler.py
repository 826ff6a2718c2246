"""Deterministic filler prose whose tokenization is known in advance.

At import a fixed LCG writes one long cycle of sentences (~8k tokens) from a word list. Every
filler token is one tokenizer token: a word with a leading space (``" river"``, ``" The"``), or
``","`` / ``"."`` right after a word; so the joined text re-tokenizes into exactly these tokens.
A request's filler is a slice of the cycle starting at a sentence picked by a stable draw, which
makes it a tuple slice (C speed) rather than a Python loop per token.
"""

from __future__ import annotations

__all__ = ["CYCLE", "SENTENCE_STARTS", "WORDS", "filler_tokens"]

# Common English words: ASCII letters only, so " word" is one letter-run token.
_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her it an were are which this be "
    "or has had not first one their its new after who they have two been other when there all "
    "during into school time may years more most only over city some world would where later up "
    "such used many can state about national out known university united then made season after "
    "team three several between both under early however while government since well until part "
    "area each four before age being river through against album north second game including house "
    "group system south life film local series public number because city high east west then very "
    "music work long place family station these small large name around light water garden morning "
    "evening road bridge market village letter story model token answer question window mountain "
    "valley forest ocean island harbor engine signal pattern reason simple quiet bright gentle "
    "careful steady common final open clear green yellow silver golden ancient modern little great "
    "young old warm cold early late soft hard quick slow still often never always almost perhaps "
    "together along across behind beyond within without toward among above below near far here"
)
#: The filler's words, lower case, each once.
WORDS = tuple(dict.fromkeys(_WORD_TEXT.split()))

_CYCLE_MIN_TOKENS = 8192
_MASK64 = (1 << 64) - 1


def _build_cycle() -> tuple[tuple[str, ...], tuple[int, ...]]:
    # Knuth's MMIX LCG; the high bits are the well-mixed ones.
    state = 0x853C49E6748FEA9B

    def nxt(bound: int) -> int:
        nonlocal state
        state = (state * 6364136223846793005 + 1442695040888963407) & _MASK64
        return (state >> 33) % bound

    lower = tuple(" " + w for w in WORDS)
    capital = tuple(" " + w.capitalize() for w in WORDS)
    tokens: list[str] = []
    starts: list[int] = []
    while len(tokens) < _CYCLE_MIN_TOKENS:
        starts.append(len(tokens))
        length = 6 + nxt(13)
        tokens.append(capital[nxt(len(capital))])
        for i in range(1, length):
            # A comma only between two words, never doubled, never before the full stop.
            if i < length - 1 and nxt(8) == 0:
                tokens.append(",")
            tokens.append(lower[nxt(len(lower))])
        tokens.append(".")
    return tuple(tokens), tuple(starts)


#: The filler cycle: sentences of words with leading spaces, commas and full stops, ending in ".".
#: Because it ends with "." and starts with " Word", wrapping around keeps the tokenization.
CYCLE, SENTENCE_STARTS = _build_cycle()


def filler_tokens(n: int, draw: int, *, leading_space: bool = True) -> tuple[str, ...]:
    """``n`` filler tokens starting at the sentence picked by ``draw``.

    With ``leading_space=False`` the first token loses its space (text that starts a response).
    """
    if n <= 0:
        return ()
    start = SENTENCE_STARTS[draw % len(SENTENCE_STARTS)]
    end = start + n
    size = len(CYCLE)
    if end <= size:
        out = CYCLE[start:end]
    else:
        rest = end - size
        out = CYCLE[start:] + CYCLE * (rest // size) + CYCLE[: rest % size]
    if not leading_space:
        out = (out[0][1:], *out[1:])
    return out
