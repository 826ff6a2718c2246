"""A reconcile that knows what exists (from the watches) writes only what differs.

The same in-memory API as test_reconciler; ``known`` is built the way the child indexes build it
(:func:`child_view` of every child), so these tests pin what a restart or a child event costs.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llmsim_operator.kube import ApiError, Kube
from llmsim_operator.reconciler import (
    ANNOTATION_APPLIED_HASH,
    ChildView,
    Options,
    child_drifted,
    child_view,
    covers,
    known_key,
    reconcile,
    stamped,
)
from tests.operator.builders import NAMESPACE, disaggregated_spec, full_spec, minimal_spec, simulator
from tests.operator.fake_kube import FakeKube

OPTIONS = Options(image="sim:test", now=lambda: "2025-01-01T00:00:00Z")
SIM = ("llmsim.io/v1alpha1", "LLMSimulator", NAMESPACE, "llama")


def known(kube: FakeKube) -> dict[str, ChildView]:
    """What the child indexes would hold for ``llama``."""
    views = (child_view(obj) for obj in kube.objects.values() if obj["kind"] != "LLMSimulator")
    return {known_key(view.kind, view.name): view for view in views if view is not None}


async def converged(spec: dict[str, Any] | None = None, **kwargs: Any) -> FakeKube:
    kube = FakeKube(**kwargs)
    kube.add(simulator(spec=spec))
    await reconcile(kube, kube.objects[SIM], OPTIONS, known(kube))
    return kube


@pytest.mark.parametrize(
    "spec", [minimal_spec(), full_spec(), disaggregated_spec()], ids=["minimal", "full", "disaggregated"]
)
async def test_a_reconcile_at_rest_makes_no_call(spec: dict[str, Any]) -> None:
    kube = await converged(spec, monitoring=True)
    before = kube.calls()
    outcome = await reconcile(kube, kube.objects[SIM], OPTIONS, known(kube))
    assert kube.calls() == before  # no apply, no delete, no status write, not even a read
    assert outcome.applied == []
    assert not outcome.changed


async def test_every_child_carries_the_hash_of_what_was_applied() -> None:
    kube = await converged(full_spec(), monitoring=True)
    for _, obj in kube.applied:
        annotations = obj["metadata"]["annotations"]
        assert annotations[ANNOTATION_APPLIED_HASH] == stamped(obj)["metadata"]["annotations"][ANNOTATION_APPLIED_HASH]
    assert len({obj["metadata"]["annotations"][ANNOTATION_APPLIED_HASH] for _, obj in kube.applied}) == 5


async def test_a_spec_change_applies_only_the_children_it_changes() -> None:
    kube = await converged()
    body = kube.objects[SIM]
    kube.add({**body, "spec": minimal_spec() | {"service": {"port": 9000}}, "metadata": {**body["metadata"]}})
    applied = len(kube.applied)
    outcome = await reconcile(kube, kube.objects[SIM], OPTIONS, known(kube))
    assert [obj["kind"] for _, obj in kube.applied[applied:]] == ["Service"]
    assert outcome.applied == ["Service"]


async def test_a_missing_child_is_applied_and_a_forced_kind_too() -> None:
    kube = await converged()
    del kube.objects[("v1", "Service", NAMESPACE, "llama")]
    applied = len(kube.applied)
    await reconcile(kube, kube.objects[SIM], OPTIONS, known(kube), force=frozenset({"ConfigMap"}))
    assert [obj["kind"] for _, obj in kube.applied[applied:]] == ["ConfigMap", "Service"]


async def test_an_unwanted_child_is_deleted_from_what_is_known_without_a_read() -> None:
    kube = await converged(full_spec(), monitoring=True)
    body = kube.objects[SIM]
    spec = full_spec()
    spec["monitoring"]["serviceMonitor"]["enabled"] = False
    kube.add({**body, "spec": spec})
    reads = kube.reads
    await reconcile(kube, kube.objects[SIM], OPTIONS, known(kube))
    assert kube.deleted == [("monitoring.coreos.com/v1", "ServiceMonitor", NAMESPACE, "llama")]
    assert kube.reads == reads


async def test_drift_is_what_the_operator_set_and_lost_not_what_the_server_added() -> None:
    kube = await converged()
    body = kube.objects[SIM]
    cm = copy.deepcopy(kube.objects[("v1", "ConfigMap", NAMESPACE, "llama-config")])
    deployment = copy.deepcopy(kube.objects[("apps/v1", "Deployment", NAMESPACE, "llama")])
    # What the API server adds: defaults, managedFields, status, other managers' labels.
    cm["metadata"]["labels"]["team"] = "a"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["terminationMessagePath"] = "/dev/termination-log"
    container["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] = "v1"
    deployment["spec"]["strategy"] = {"type": "RollingUpdate"}
    deployment["status"] = {"replicas": 1}
    assert not await child_drifted(kube, body, cm, OPTIONS)
    assert not await child_drifted(kube, body, deployment, OPTIONS)
    # What a person does.
    cm["data"]["models.yml"] = "tampered"
    container["args"] = container["args"][:-2]
    assert await child_drifted(kube, body, cm, OPTIONS)
    assert await child_drifted(kube, body, deployment, OPTIONS)


def test_covers() -> None:
    desired = {"a": 1, "b": [{"name": "x", "v": True}], "c": ["p", "q"]}
    assert covers(
        desired, {"a": 1, "b": [{"name": "y"}, {"name": "x", "v": True, "extra": 0}], "c": ["p", "q"], "d": 2}
    )
    assert not covers(desired, {"a": 1, "b": [{"name": "x", "v": 1}], "c": ["p", "q"]})  # True is not 1
    assert not covers(desired, {"a": 1, "b": [{"name": "x", "v": True}], "c": ["q", "p"]})  # order of scalars
    assert not covers(desired, {"a": 2, "b": [{"name": "x", "v": True}], "c": ["p", "q"]})
    assert not covers(desired, {"b": [{"name": "x", "v": True}], "c": ["p", "q"]})
    assert covers({"n": 2}, {"n": 2.0})


class CountingKube(Kube):
    """A Kube whose requests are answered from a table (path -> body) and counted."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.paths: list[str] = []
        super().__init__(api=None)  # type: ignore[arg-type]

    async def request(self, method: str, path: str, *, none_on_404: bool = True, **_: Any) -> dict[str, Any] | None:
        self.paths.append(f"{method} {path}")
        answer = self.answers.get(path)
        if isinstance(answer, Exception):
            raise answer
        if answer is None and not none_on_404:
            raise ApiError(404, "the server could not find the requested resource")
        return copy.deepcopy(answer) if answer is not None else None


async def test_discovery_is_asked_once_per_group_version() -> None:
    kube = CountingKube({"/apis/policy/v1": {"resources": [{"name": "poddisruptionbudgets"}]}})
    for _ in range(3):
        assert await kube.api_exists("policy/v1", "poddisruptionbudgets")
        assert not await kube.api_exists("monitoring.coreos.com/v1", "servicemonitors")
    assert kube.discovery_calls == 2
    # Asked again only when told to (a wanted API that was not served) ...
    kube.answers["/apis/monitoring.coreos.com/v1"] = {"resources": [{"name": "servicemonitors"}]}
    assert await kube.api_exists("monitoring.coreos.com/v1", "servicemonitors", refresh=True)
    assert await kube.api_exists("monitoring.coreos.com/v1", "servicemonitors")
    assert kube.discovery_calls == 3
    # ... or after an apply answered 404 (the API went away).
    del kube.answers["/apis/policy/v1"]
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "x", "namespace": "n"}}
    with pytest.raises(ApiError):
        await kube.apply(pdb)
    assert not await kube.api_exists("policy/v1", "poddisruptionbudgets")
    assert kube.discovery_calls == 4
    # A 404 because the namespace is gone says nothing about the API.
    kube.answers["/apis/policy/v1/namespaces/n/poddisruptionbudgets/x"] = ApiError(404, 'namespaces "n" not found')
    with pytest.raises(ApiError):
        await kube.apply(pdb)
    assert not await kube.api_exists("policy/v1", "poddisruptionbudgets")
    assert kube.discovery_calls == 4


async def test_a_failed_discovery_is_not_remembered() -> None:
    kube = CountingKube({"/apis/policy/v1": ApiError(0, "connection refused")})
    with pytest.raises(ApiError):
        await kube.api_exists("policy/v1", "poddisruptionbudgets")
    kube.answers["/apis/policy/v1"] = {"resources": [{"name": "poddisruptionbudgets"}]}
    assert await kube.api_exists("policy/v1", "poddisruptionbudgets")


async def test_the_status_written_last_is_fresher_than_the_watch() -> None:
    sim = {"metadata": {"namespace": "n", "name": "s", "resourceVersion": "10"}, "status": {"ready": "0/1"}}
    kube = CountingKube({"/apis/llmsim.io/v1alpha1/namespaces/n/llmsimulators/s/status": {
        "metadata": {"namespace": "n", "name": "s", "resourceVersion": "12"}, "status": {"ready": "1/1"}}})  # fmt: skip
    assert kube.fresher(sim) is sim
    await kube.replace_status({"apiVersion": "llmsim.io/v1alpha1", "kind": "LLMSimulator", **sim})
    fresh = kube.fresher(sim)
    assert (fresh["metadata"]["resourceVersion"], fresh["status"]) == ("12", {"ready": "1/1"})
    # Once the watch shows a later version, the watch wins.
    later = {**sim, "metadata": {**sim["metadata"], "resourceVersion": "13"}}
    assert kube.fresher(later) is later


async def test_switching_form_deletes_the_other_forms_deployments_and_services() -> None:
    kube = await converged(minimal_spec())
    body = kube.objects[SIM]
    pd = minimal_spec() | {"disaggregation": {}}
    kube.add({**body, "spec": pd, "metadata": {**body["metadata"]}})
    await reconcile(kube, kube.objects[SIM], OPTIONS, known(kube))
    names = {(k[1], k[3]) for k in kube.objects if k[1] in ("Deployment", "Service")}
    assert names == {(kind, f"llama-{role}") for kind in ("Deployment", "Service") for role in ("prefill", "decode")}
    kube.add({**body, "spec": minimal_spec(), "metadata": {**body["metadata"]}})
    await reconcile(kube, kube.objects[SIM], OPTIONS, known(kube))
    assert {(k[1], k[3]) for k in kube.objects if k[1] in ("Deployment", "Service")} == {
        ("Deployment", "llama"),
        ("Service", "llama"),
    }


async def test_a_child_event_as_the_operator_applied_it_needs_no_drift_check() -> None:
    path = "/apis/apps/v1/namespaces/n/deployments/d"
    owner = [{"kind": "LLMSimulator", "name": "d", "uid": "u", "controller": True}]
    applied = {"labels": {"a": "1"}, "annotations": {"h": "x"}, "ownerReferences": owner}
    kube = CountingKube({path: {"metadata": {"namespace": "n", "name": "d", "resourceVersion": "5", "generation": 2, **applied}}})  # fmt: skip
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n"}}

    def event(version: str, generation: int, **meta: Any) -> dict[str, Any]:
        return {"kind": "Deployment", "metadata": {"namespace": "n", "name": "d", "resourceVersion": version,
                                                   "generation": generation, **applied, **meta}}  # fmt: skip

    assert not kube.as_applied(event("5", 2))  # nothing applied by this process yet (e.g. after a restart)
    await kube.apply(deployment)
    assert kube.is_echo(event("5", 2))
    assert kube.as_applied(event("5", 2))
    # The controller-manager's status update: a new version, the same generation and marks.
    assert not kube.is_echo(event("6", 2))
    assert kube.as_applied(event("6", 2, annotations={"h": "x", "deployment.kubernetes.io/revision": "1"}))
    # Someone changed the spec, took a label or the owner: look for drift.
    assert not kube.as_applied(event("7", 3))
    assert not kube.as_applied(event("7", 2, labels={}))
    assert not kube.as_applied(event("7", 2, ownerReferences=[]))
