"""schemathesis on every route of the app, in-process, with every check schemathesis has.

Every operation in /openapi.json (the runtime LoRA and dev-mode routes switched on, the control
endpoints included: what a generated call to /sleep or PUT /admin/faults changes is undone after
it), positive and negative data, and schemathesis' checks beyond conformance: negative data
rejected, unsupported methods answered 405 with Allow, ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from schemathesis.checks import positive_data_acceptance

from llmsim.config.schema import FaultState
from llmsim.runtime import build_runtime
from tests.hostile.app import RESPONSES
from tests.support.schema_fuzz import CONFIG, fuzz, name_served_models, operations

EXAMPLES_PER_OPERATION = 10


def _no_crash(message: str) -> Any:
    raise AssertionError(f"a generated call reached the crash fault: {message}")


def test_every_route_with_every_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "1")
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    (tmp_path / "models.yml").write_text(CONFIG)
    (tmp_path / "responses.yml").write_text(RESPONSES)
    runtime = build_runtime(tmp_path / "models.yml", tmp_path / "responses.yml", crash=_no_crash)
    state = runtime.state
    schema = schemathesis.openapi.from_asgi("/openapi.json", runtime.app)
    name_served_models(schema)
    ops = operations(schema)
    paths = {op.path for op in ops}
    assert {"/admin/faults", "/sleep", "/v1/load_lora_adapter", "/reset_prefix_cache", "/metrics/summary"} <= paths

    def run(case: schemathesis.Case[Any]) -> None:
        try:
            # NOTE: positive_data_acceptance expects a 2xx for any valid-looking body; a model name
            # that is not served is valid JSON Schema and a correct 404.
            case.call_and_validate(excluded_checks=[positive_data_acceptance])
        finally:
            # Undo what a control endpoint changed, so the next case meets a serving replica.
            state.lifecycle.wake_up(None)
            for served in state.models.values():
                served.faults.configure(FaultState())
            for name, base in list(state.lora_adapters.items()):
                del state.models[base].lora_adapters[name]
                state.models[base].engine.remove_lora(name)
                del state.lora_adapters[name]

    fuzz(ops, run, EXAMPLES_PER_OPERATION)
