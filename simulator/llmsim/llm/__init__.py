"""The generator decides *what* is said: prompt token counts and ids, scripted responses, truncation.

It never deals with time, HTTP or metrics.
"""

from llmsim.llm.errors import ContextLengthError
from llmsim.llm.generator import Generator
from llmsim.llm.hf_tokenizer import HuggingFaceTokenizer
from llmsim.llm.loader import EMBEDDED_RESPONSES, load_responses, parse_responses
from llmsim.llm.prompt import count_prompt_tokens, prompt_token_ids
from llmsim.llm.script import Script
from llmsim.llm.tokenizer import RegexTokenizer, Tokenizer, count, encode

__all__ = [
    "EMBEDDED_RESPONSES",
    "ContextLengthError",
    "Generator",
    "HuggingFaceTokenizer",
    "RegexTokenizer",
    "Script",
    "Tokenizer",
    "count",
    "count_prompt_tokens",
    "encode",
    "load_responses",
    "parse_responses",
    "prompt_token_ids",
]
