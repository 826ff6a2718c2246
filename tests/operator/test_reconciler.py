"""The reconcile against an in-memory API: what it applies, what it writes to status, how it fails."""

from __future__ import annotations

from typing import Any

import pytest

from llmsim_operator.reconciler import Options, ReconcileError, reconcile, refresh_status
from tests.operator.builders import NAMESPACE, full_spec, minimal_spec, simulator
from tests.operator.fake_kube import FakeKube

NOW = "2025-01-01T00:00:00Z"
OPTIONS = Options(image="sim:test", now=lambda: NOW)


def setup(spec: dict[str, Any] | None = None, **kwargs: Any) -> tuple[FakeKube, dict[str, Any]]:
    kube = FakeKube(**kwargs)
    body = kube.add(simulator(spec=spec))
    return kube, body


def conditions(kube: FakeKube) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in kube.status_of("llama", NAMESPACE)["conditions"]}


def kinds(kube: FakeKube) -> list[str]:
    return [obj["kind"] for _, obj in kube.applied]


async def test_applies_children_in_order_and_writes_status() -> None:
    kube, body = setup()
    outcome = await reconcile(kube, body, OPTIONS)
    assert outcome.problem is None
    assert kinds(kube) == ["ConfigMap", "Deployment", "Service"]
    assert {manager for manager, _ in kube.applied} == {"llmsim-operator"}
    status = kube.status_of("llama", NAMESPACE)
    assert status["observedGeneration"] == 1
    assert status["endpoint"] == "http://llama.team-a.svc:8000"
    assert status["selector"] == "app.kubernetes.io/name=llmsim,app.kubernetes.io/instance=llama"
    # llama-3.1-8b on h100-80gb: (77.31e9 B - 16.06e9 B) / (131,072 B x 16) = 29,205.9 -> 29,205 blocks
    assert status["kvCacheBlocks"] == int((80 * 2**30 * 0.9 - 8.03e9 * 2) // (131072 * 16)) == 29205
    assert conditions(kube)["Degraded"]["status"] == "False"
    assert conditions(kube)["Ready"]["reason"] == "ReplicasNotReady"


async def test_second_reconcile_changes_nothing() -> None:
    kube, body = setup()
    await reconcile(kube, body, OPTIONS)
    writes = kube.status_writes
    first = [obj for _, obj in kube.applied]
    await reconcile(kube, kube.objects[("llmsim.io/v1alpha1", "LLMSimulator", NAMESPACE, "llama")], OPTIONS)
    assert [obj for _, obj in kube.applied][3:] == first
    assert kube.status_writes == writes  # identical status: no write


async def test_invalid_spec_applies_nothing_and_reports_degraded() -> None:
    kube, body = setup({"model": {"name": "m", "profile": "nope"}})
    outcome = await reconcile(kube, body, OPTIONS)
    assert outcome.problem is not None
    assert outcome.problem[0] == "InvalidSpec"
    assert kube.applied == []
    degraded = conditions(kube)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidSpec")
    assert "unknown model profile 'nope'" in degraded["message"]


async def test_api_failure_reports_degraded_and_raises_for_a_retry() -> None:
    kube, body = setup()
    kube.fail_apply = {"Deployment"}
    with pytest.raises(ReconcileError, match="injected failure"):
        await reconcile(kube, body, OPTIONS)
    degraded = conditions(kube)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "ApplyFailed")
    kube.fail_apply = set()
    await reconcile(kube, body, OPTIONS)
    assert conditions(kube)["Degraded"]["status"] == "False"


async def test_status_write_retries_on_conflict() -> None:
    kube, body = setup()
    kube.conflicts = 2
    await reconcile(kube, body, OPTIONS)
    assert kube.status_of("llama", NAMESPACE)["observedGeneration"] == 1


async def test_responses_from_a_configmap_are_copied_into_the_config() -> None:
    kube, body = setup(minimal_spec() | {"responses": {"configMapRef": {"name": "script"}}})
    outcome = await reconcile(kube, body, OPTIONS)
    assert outcome.problem is not None
    assert outcome.problem[0] == "ResponsesNotFound"
    assert kube.applied == []
    kube.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "script", "namespace": NAMESPACE},
              "data": {"responses.yml": "version: 1\n"}})  # fmt: skip
    outcome = await reconcile(kube, body, OPTIONS)
    assert outcome.problem is None
    cm = kube.objects[("v1", "ConfigMap", NAMESPACE, "llama-config")]
    assert cm["data"]["responses.yml"] == "version: 1\n"


async def test_service_monitor_only_when_the_api_exists() -> None:
    kube, body = setup(full_spec())
    outcome = await reconcile(kube, body, OPTIONS)
    assert "ServiceMonitor" not in kinds(kube)
    assert [w[0] for w in outcome.warnings] == ["ServiceMonitorUnavailable"]

    kube, body = setup(full_spec(), monitoring=True)
    outcome = await reconcile(kube, body, OPTIONS)
    assert kinds(kube)[-2:] == ["ServiceMonitor", "PodDisruptionBudget"]
    assert outcome.warnings == []


async def test_disabling_the_service_monitor_deletes_ours_only() -> None:
    kube, body = setup(full_spec(), monitoring=True)
    await reconcile(kube, body, OPTIONS)
    spec = full_spec()
    spec["monitoring"]["serviceMonitor"]["enabled"] = False
    body = kube.add({**body, "spec": spec})
    await reconcile(kube, body, OPTIONS)
    assert kube.deleted == [("monitoring.coreos.com/v1", "ServiceMonitor", NAMESPACE, "llama")]

    # A same-named ServiceMonitor someone else made is left alone.
    kube.add({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
              "metadata": {"name": "llama", "namespace": NAMESPACE}, "spec": {}})  # fmt: skip
    await reconcile(kube, body, OPTIONS)
    assert len(kube.deleted) == 1


async def test_handing_replicas_to_an_autoscaler_keeps_their_value() -> None:
    kube, body = setup(minimal_spec() | {"replicas": 4})
    await reconcile(kube, body, OPTIONS)
    deployment = ("apps/v1", "Deployment", NAMESPACE, "llama")
    assert kube.objects[deployment]["spec"]["replicas"] == 4

    body = kube.add({**body, "spec": minimal_spec() | {"replicas": 4, "autoscaling": {"external": True}}})
    await reconcile(kube, body, OPTIONS)
    assert kube.objects[deployment]["spec"]["replicas"] == 4  # not reset to 1
    managers = [m for m, obj in kube.applied if obj["kind"] == "Deployment"]
    assert managers == ["llmsim-operator", "llmsim-operator-handover", "llmsim-operator"]

    kube.objects[deployment]["spec"]["replicas"] = 7  # the autoscaler scales
    await reconcile(kube, body, OPTIONS)
    assert kube.objects[deployment]["spec"]["replicas"] == 7
    assert "replicas" not in kube.applied[-2][1]["spec"]  # the operator's Deployment apply


async def test_deployment_refresh_updates_counts_and_keeps_degraded() -> None:
    kube, body = setup()
    await reconcile(kube, body, OPTIONS)
    dep = await kube.get("apps/v1", "Deployment", NAMESPACE, "llama")
    assert dep is not None
    dep["metadata"]["generation"] = 1
    dep["status"] = {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1,
                     "availableReplicas": 1}  # fmt: skip
    await refresh_status(kube, NAMESPACE, "llama", dep, OPTIONS)
    status = kube.status_of("llama", NAMESPACE)
    assert (status["readyReplicas"], status["ready"]) == (1, "1/1")
    assert conditions(kube)["Ready"]["status"] == "True"
    assert conditions(kube)["Progressing"]["reason"] == "RolloutComplete"
    assert conditions(kube)["Degraded"]["reason"] == "Reconciled"


async def test_a_simulator_being_deleted_is_left_to_the_garbage_collector() -> None:
    kube, body = setup()
    body["metadata"]["deletionTimestamp"] = NOW
    outcome = await reconcile(kube, body, OPTIONS)
    assert kube.applied == []
    assert outcome.status is None


async def test_refresh_of_a_deleted_simulator_is_a_no_op() -> None:
    kube = FakeKube()
    assert await refresh_status(kube, NAMESPACE, "gone", None, OPTIONS) is None


@pytest.mark.parametrize(("policy_v1", "api_version"), [(True, "policy/v1"), (False, "policy/v1beta1")])
async def test_pod_disruption_budget_follows_the_replicas(policy_v1: bool, api_version: str) -> None:
    spec = minimal_spec() | {"replicas": 3, "podDisruptionBudget": {"enabled": True}}
    kube, body = setup(spec, policy_v1=policy_v1)
    await reconcile(kube, body, OPTIONS)
    pdb = ("PodDisruptionBudget", api_version)
    assert [(o["kind"], o["apiVersion"]) for _, o in kube.applied][-1] == pdb
    assert kube.objects[(api_version, "PodDisruptionBudget", NAMESPACE, "llama")]["spec"]["maxUnavailable"] == 1
    # Scaled down to one pod: the budget would only block drains, so the operator removes its own.
    body = kube.add({**body, "spec": spec | {"replicas": 1}})
    await reconcile(kube, body, OPTIONS)
    assert kube.deleted == [(api_version, "PodDisruptionBudget", NAMESPACE, "llama")]
