"""Reading OpenAI streams chunk by chunk."""

from __future__ import annotations

from llmsim.benchmark import StreamParser

ROLE = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'


def token(text: str, finish: str = "null") -> bytes:
    return (
        b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":%s}]}\n\n'
        % (text.encode(), finish.encode())
    )


USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3}}\n\n'


def test_text_chunks_are_counted_across_reads_and_usage_is_kept() -> None:
    stream = ROLE + token("Hi") + token(" there") + token("!", '"length"') + USAGE + b"data: [DONE]\n\n"
    parser = StreamParser()
    # Split in awkward places: inside an event and inside the separator.
    reads = [stream[:50], stream[50:160], stream[160:161], stream[161:]]
    counts = [parser.feed(r) for r in reads]
    assert sum(counts) == 3
    assert parser.done
    assert (parser.prompt_tokens(), parser.completion_tokens()) == (12, 3)
    assert parser.error is None


def test_completions_text_crlf_and_comments() -> None:
    parser = StreamParser()
    chunk = b'data: {"choices":[{"index":0,"text":" a","finish_reason":null}]}\r\n\r\n'
    empty = b'data: {"choices":[{"index":0,"text":"","finish_reason":"stop"}]}\r\n\r\n'
    assert parser.feed(b": keep-alive\r\n\r\n" + chunk + chunk + empty + b"data: [DONE]\r\n\r\n") == 2
    assert parser.done


def test_an_error_event_is_kept() -> None:
    parser = StreamParser()
    n = parser.feed(
        token("a")
        + b'data: {"error": {"message": "full", "type": "server_overloaded", "code": 503}}\n\ndata: [DONE]\n\n'
    )
    assert n == 1
    assert parser.error is not None
    assert parser.error["type"] == "server_overloaded"
