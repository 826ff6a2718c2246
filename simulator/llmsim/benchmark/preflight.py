"""Before a run: is the endpoint there, and does it serve the model? One request, one line of answer.

A wrong URL or model name would otherwise cost the whole run's duration and end in a table of
dashes. ``GET /v1/models`` is what OpenAI's API, vLLM, llmsim and the common gateways answer; an
endpoint without it (a 404 or 405) is let through, and a run whose every request fails still ends
in an error (see ``llmsim bench``).
"""

from __future__ import annotations

from typing import Any

import aiohttp

from llmsim.benchmark.client import Target, base_url

# Seconds the check waits for an answer: long enough for a busy server, short against a run.
PREFLIGHT_TIMEOUT_S = 10.0


async def preflight(
    http: aiohttp.ClientSession,
    target: Target,
    wait_s: float = PREFLIGHT_TIMEOUT_S,
) -> str | None:
    """Why ``target`` cannot be benchmarked, in one line; None when it can (or cannot be told).

    Parameters
    ----------
    http:
        The session the run will use.
    target:
        The endpoint and the model every request names.
    wait_s:
        Seconds to wait for ``GET /v1/models``.
    """
    url = base_url(target.url) + "/v1/models"
    headers = {"authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    try:
        async with http.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=wait_s)) as resp:
            status = resp.status
            body: Any = await resp.json(content_type=None) if status == 200 else None
    except TimeoutError:
        return f"no answer from {url} within {wait_s:g} s"
    except aiohttp.InvalidURL:
        return f"not a URL: {target.url!r} (expected http://host:port)"
    except aiohttp.ClientError as exc:
        return f"cannot reach {base_url(target.url)}: {exc}"
    except ValueError:
        return f"{url} did not answer JSON: is {base_url(target.url)} an OpenAI-compatible endpoint?"
    if status in (401, 403):
        return f"{url} answered {status}: give the endpoint's key with --api-key (or OPENAI_API_KEY)"
    if status in (404, 405):
        return None  # no model list here; the run's own errors will tell
    if status != 200:
        return f"{url} answered HTTP {status}"
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    served = [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    if target.model not in served:
        return f"model {target.model!r} is not served at {base_url(target.url)} (served: {', '.join(served) or 'none'})"
    return None
