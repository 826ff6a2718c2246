"""OpenAI-compatible HTTP API (FastAPI): parses requests once, streams what engines release."""
