"""An in-memory KubeApi: enough server-side-apply behaviour to test the reconciler without a cluster.

It models what the reconciler relies on: apply creates or replaces the applied fields, a field
dropped by its only manager is removed (the replicas handover), resourceVersion preconditions on
status writes, and injected failures.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from llmsim_operator.kube import ApiError, Object

Key = tuple[str, str, str, str]


def key(obj: Object) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])


class FakeKube:
    def __init__(self, *, monitoring: bool = False, policy_v1: bool = True) -> None:
        self.objects: dict[Key, Object] = {}
        self.monitoring = monitoring
        # policy/v1 PodDisruptionBudgets (Kubernetes >= 1.21); else only policy/v1beta1.
        self.policy_v1 = policy_v1
        # Other optional APIs served: (group version, plural).
        self.served: set[tuple[str, str]] = set()
        self.applied: list[tuple[str, Object]] = []
        self.deleted: list[Key] = []
        self.status_writes = 0
        self.reads = 0
        # Inject: kinds whose apply fails; number of status writes to answer with 409.
        self.fail_apply: set[str] = set()
        self.conflicts = 0
        # Managers owning a Deployment's spec.replicas, per object.
        self.replica_owners: dict[Key, set[str]] = {}
        self._versions = itertools.count(100)
        self._uids = itertools.count(1)

    def add(self, obj: Object) -> Object:
        stored = copy.deepcopy(obj)
        stored["metadata"].setdefault("uid", f"uid-{next(self._uids)}")
        stored["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[key(stored)] = stored
        return stored

    async def apply(self, obj: Object, *, field_manager: str = "llmsim-operator") -> Object:
        if obj["kind"] in self.fail_apply:
            raise ApiError(500, f"injected failure applying {obj['kind']}")
        self.applied.append((field_manager, copy.deepcopy(obj)))
        k = key(obj)
        live = self.objects.get(k)
        new = copy.deepcopy(obj)
        if live is not None:
            new["metadata"]["uid"] = live["metadata"]["uid"]
            new["status"] = live.get("status", {})
        if obj["kind"] == "Deployment":
            self._apply_replicas(k, live, new, field_manager)
        stored = self.add(new)
        return copy.deepcopy(stored)

    def _apply_replicas(self, k: Key, live: Object | None, new: Object, manager: str) -> None:
        owners = self.replica_owners.setdefault(k, set())
        if "replicas" in new["spec"]:
            owners.add(manager)
        else:
            owners.discard(manager)
        if live is not None and "template" not in new["spec"]:
            # A partial apply (the handover): everything else stays as it is.
            replicas = new["spec"]["replicas"]
            new.clear()
            new.update(copy.deepcopy(live))
            new["spec"]["replicas"] = replicas
        elif "replicas" not in new["spec"]:
            # Kept while another manager owns it; else removed, then defaulted to 1 by the API server.
            new["spec"]["replicas"] = live["spec"]["replicas"] if live is not None and owners else 1
        new["metadata"]["managedFields"] = [
            {"manager": m, "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}} for m in sorted(owners)
        ]

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Object | None:
        self.reads += 1
        obj = self.objects.get((api_version, kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    async def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str) -> None:
        k = (api_version, kind, namespace, name)
        if k in self.objects and self.objects[k]["metadata"]["uid"] == uid:
            del self.objects[k]
            self.deleted.append(k)

    async def replace_status(self, obj: Object) -> Object:
        k = key(obj)
        live = self.objects.get(k)
        if live is None:
            raise ApiError(404, "gone")
        if self.conflicts:
            self.conflicts -= 1
            live["metadata"]["resourceVersion"] = str(next(self._versions))  # someone else wrote
            raise ApiError(409, "the object has been modified")
        if obj["metadata"]["resourceVersion"] != live["metadata"]["resourceVersion"]:
            raise ApiError(409, "the object has been modified")
        self.status_writes += 1
        live["status"] = copy.deepcopy(obj["status"])
        live["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(live)

    async def api_exists(self, group_version: str, plural: str, *, refresh: bool = False) -> bool:
        if (group_version, plural) == ("policy/v1", "poddisruptionbudgets"):
            return self.policy_v1
        if (group_version, plural) in self.served:
            return True
        return self.monitoring and (group_version, plural) == ("monitoring.coreos.com/v1", "servicemonitors")

    def calls(self) -> tuple[int, int, int, int]:
        """(applies, deletes, status writes, reads) so far."""
        return len(self.applied), len(self.deleted), self.status_writes, self.reads

    def status_of(self, name: str, namespace: str) -> dict[str, Any]:
        status: dict[str, Any] = self.objects[("llmsim.io/v1alpha1", "LLMSimulator", namespace, name)].get("status", {})
        return status
