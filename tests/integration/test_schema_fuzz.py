"""schemathesis against the real server, from its own /openapi.json.

About 500 requests (~30 s here), through uvicorn, uvloop and httptools as users run it. Checks:
no 5xx, every response's status, content type and body as documented (response-schema
conformance). Every route and every check, in-process, is tests/hostile/test_schema_fuzz.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.schema_fuzz import CONFIG, fuzz, name_served_models, operations
from tests.support.server import ServerProcess, running_server

pytestmark = pytest.mark.integration

EXAMPLES_PER_OPERATION = 20
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("fuzz"), config=CONFIG) as s:
        yield s


def test_no_server_errors_and_responses_conform_to_the_schema(server: ServerProcess) -> None:
    schema = schemathesis.openapi.from_url(server.base_url + "/openapi.json")
    name_served_models(schema)
    # Not the control endpoints: a generated PUT /admin/faults may arm a crash, and /sleep would
    # put the server to sleep for the rest of the run (the in-process run resets them after each call).
    ops = operations(schema, lambda op: not op.path.startswith("/admin/") and op.path not in ("/sleep", "/wake_up"))
    assert len(ops) >= 14

    def run(case: schemathesis.Case[Any]) -> None:
        case.call_and_validate(checks=CHECKS, timeout=10)

    fuzz(ops, run, EXAMPLES_PER_OPERATION)
