"""kopf settings, CLI options and the package's public surface."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest

import llmsim_operator
from llmsim_operator.cli import _parser, options_from_args
from llmsim_operator.handlers import CHILDREN, RESPONSES_REFS, SIMULATORS, backoff, needs_reconcile, register
from llmsim_operator.options import OperatorOptions
from llmsim_operator.settings import CHILD_SELECTORS, configure


def test_configure_uses_own_prefix_timeouts_and_standalone() -> None:
    settings = kopf.OperatorSettings()
    configure(settings, OperatorOptions(identity="pod-1"))
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert settings.persistence.progress_storage.prefix == "llmsim.io"
    assert isinstance(settings.persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert settings.persistence.diffbase_storage.prefix == "llmsim.io"
    assert settings.persistence.finalizer == "llmsim.io/finalizer"
    assert settings.watching.server_timeout == 300
    assert settings.watching.client_timeout is not None
    assert settings.watching.client_timeout > settings.watching.server_timeout
    assert settings.peering.standalone is True
    assert settings.posting.level == logging.WARNING
    assert settings.posting.reporting_component == "llmsim-operator"
    assert settings.posting.reporting_instance == "pod-1"


def test_peering_is_opt_in() -> None:
    settings = kopf.OperatorSettings()
    configure(settings, OperatorOptions(peering="llmsim"))
    assert (settings.peering.standalone, settings.peering.mandatory, settings.peering.name) == (False, True, "llmsim")


def test_run_arguments() -> None:
    args = _parser().parse_args(["run", "-n", "a", "-n", "b", "--liveness", "http://0.0.0.0:8080/healthz"])
    options = options_from_args(args)
    assert options.namespaces == ("a", "b")
    assert options.all_namespaces is False
    assert options.liveness == "http://0.0.0.0:8080/healthz"
    assert options.peering is None
    assert options_from_args(_parser().parse_args(["run"])).all_namespaces is True


def test_namespace_and_all_namespaces_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["run", "-n", "a", "--all-namespaces"])


def test_backoff_doubles_up_to_five_minutes() -> None:
    assert [backoff(r) for r in range(8)] == [5, 10, 20, 40, 80, 160, 300, 300]


def test_register_watches_children_and_polls_nothing() -> None:
    registry = kopf.OperatorRegistry()
    register(registry, OperatorOptions())
    assert {h.id for h in registry._activities.get_all_handlers()} == {"login", "connect", "disconnect", "api"}
    # No change handler (kopf would store a diff-base annotation per change), no timer or daemon:
    # nothing runs per object unless an event arrives, and nothing asks for a finalizer.
    assert list(registry._changing.get_all_handlers()) == []
    assert list(registry._spawning.get_all_handlers()) == []
    indexes = {h.id for h in registry._indexing.get_all_handlers()}
    assert indexes == {SIMULATORS, RESPONSES_REFS} | {index_id for _, index_id in CHILDREN}
    watchers = {h.id for h in registry._watching.get_all_handlers()}
    assert watchers == {f"{index_id}-changed" for _, index_id in CHILDREN} | {
        "responses-changed",
        "reconcile",
        "inference-crds",
    }


def test_a_reconcile_is_needed_for_an_unobserved_spec_or_a_failed_apply() -> None:
    def sim(generation: int, status: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"generation": generation}, "status": status}

    def degraded(reason: str) -> dict[str, Any]:
        return {"type": "Degraded", "status": "True" if reason != "Reconciled" else "False", "reason": reason}

    assert needs_reconcile(sim(1, {}))  # never reconciled
    assert needs_reconcile(sim(2, {"observedGeneration": 1}))  # a newer spec
    assert not needs_reconcile(sim(2, {"observedGeneration": 2, "conditions": [degraded("Reconciled")]}))
    assert needs_reconcile(sim(2, {"observedGeneration": 2, "conditions": [degraded("ApplyFailed")]}))
    # An invalid spec is reported and waits for the next spec: reconciling again would say the same.
    assert not needs_reconcile(sim(2, {"observedGeneration": 2, "conditions": [degraded("InvalidSpec")]}))


def test_children_are_watched_by_label_on_the_server_side() -> None:
    settings = kopf.OperatorSettings()
    configure(settings, OperatorOptions())
    selectors = dict(settings.watching.label_selectors.items())
    assert set(selectors.values()) == {"app.kubernetes.io/managed-by=llmsim-operator"}
    assert len(selectors) == len(CHILD_SELECTORS) == len(CHILDREN) - 1  # ConfigMaps: all (responses refs)
    assert {selector for selector, _ in CHILDREN[1:]} == set(CHILD_SELECTORS)


def test_exports() -> None:
    for name in llmsim_operator.__all__:
        assert hasattr(llmsim_operator, name), name
    public = {
        n
        for n in vars(llmsim_operator)
        if not n.startswith("_") and not isinstance(getattr(llmsim_operator, n), type(llmsim_operator))
    }
    assert public <= set(llmsim_operator.__all__)
