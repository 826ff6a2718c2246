"""Tests of llmsim.metrics.

All of them are sync on purpose: looptime 0.9's pytest hook asks the event-loop policy for a loop on
every sync test, which on Python 3.11 creates one nobody closes; an async test after it then ends
the session with ResourceWarnings (errors here). The ASGI endpoints go through Starlette's TestClient.
"""
