"""Matching a 512-token prompt against a responses.yml with 60 regex entries, with and without the
literal prefilter (llmsim.llm.matcher).

Run: .venv/bin/python bench/bench_matcher.py  (writes bench/results/matcher.json)

The script mixes the regex styles people write: leading ``.*`` (quadratic under re.search),
``(?s)^(?P<head>.*)keyword(?P<tail>.*)$`` captures, case-insensitive phrases and anchored commands.
Two cases: a prompt that matches nothing (every entry is tried, the default answers) and one that
matches only the last entry.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import timeit
from pathlib import Path

import yaml

from llmsim.llm import count, parse_responses
from llmsim.llm.filler import filler_tokens
from llmsim.llm.matcher import Matcher

KEYWORDS = [
    "refund policy", "tracking number", "reset my password", "cancel my subscription", "shipping cost",
    "opening hours", "gift card", "loyalty points", "delivery address", "payment failed",
    "invoice copy", "warranty claim", "store locator", "price match", "return label",
    "order status", "size chart", "discount code", "account locked", "two factor",
    "data export", "delete my account", "change my email", "update billing", "late delivery",
    "damaged item", "missing parts", "bulk order", "student discount", "newsletter",
    "privacy settings", "api key", "rate limit", "webhook", "sandbox",
    "error code", "status page", "maintenance window", "sla credit", "support ticket",
    "live chat", "callback request", "phone support", "escalate", "feedback form",
    "job opening", "press contact", "partner program", "affiliate link", "reseller",
    "carbon neutral", "recycling", "accessibility", "sign language", "braille menu",
    "pet policy", "parking", "wheelchair", "allergen", "gluten free",
]  # fmt: skip

STYLES = [
    r".*{kw} (?P<arg>\w+)",
    r"(?s)^(?P<head>.*){kw}(?P<tail>.*)$",
    r"(?i)(?:please )?(?:tell me about|explain) (?:the |my )?{kw}",
    r"^/{cmd}\s+(?P<arg>.+)$",
]


def build_script() -> str:
    entries = []
    for i, kw in enumerate(KEYWORDS):
        style = STYLES[i % len(STYLES)]
        pattern = style.format(kw=kw, cmd=kw.replace(" ", "-"))
        entries.append({"id": f"r{i}", "match": {"regex": pattern}, "content": "ok"})
    return yaml.safe_dump({"responses": entries, "default": {"content": "default"}})


def build_prompt(tokens: int) -> str:
    # Filler prose contains none of the keywords, so nothing matches.
    return "".join(filler_tokens(tokens, 12345, leading_space=False))


def median_seconds(fn: object, repeats: int = 7) -> float:
    timer = timeit.Timer(fn)  # type: ignore[arg-type]
    number, _ = timer.autorange()
    return statistics.median(t / number for t in timer.repeat(repeat=repeats, number=number))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "matcher.json")
    args = p.parse_args()
    script = parse_responses(build_script(), "<bench>/responses.yml")
    naive = Matcher(script.entries, prefilter=False)
    fast = Matcher(script.entries)
    prompt = build_prompt(512)
    assert count(prompt) == 512
    # The last entry's pattern (style 3, an anchored command) fires only on this text.
    last_kw = KEYWORDS[-1].replace(" ", "-")
    hit = f"/{last_kw} {prompt}"
    cases = {}
    for name, text in (("no_match", prompt), ("last_entry_matches", hit)):
        expected = naive.match(text)
        found = fast.match(text)
        assert (expected and expected[0].id) == (found and found[0].id), name
        t_naive = median_seconds(lambda text=text: naive.match(text))
        t_fast = median_seconds(lambda text=text: fast.match(text))
        cases[name] = {
            "matched": None if found is None else found[0].id,
            "naive_ms": round(t_naive * 1e3, 4),
            "prefilter_ms": round(t_fast * 1e3, 4),
            "speedup": round(t_naive / t_fast, 1),
        }
    result = {
        "regex_entries": len(script.entries),
        "prompt_tokens": 512,
        "prompt_chars": len(prompt),
        "cases": cases,
        "method": "median of 7 timeit repeats, per call",
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{len(script.entries)} regex entries, 512-token prompt ({len(prompt)} chars)")
    for name, c in cases.items():
        print(
            f"{name:>20}: naive {c['naive_ms']:.3f} ms, prefilter {c['prefilter_ms']:.3f} ms, "
            f"{c['speedup']}x faster (matched: {c['matched']})"
        )
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
