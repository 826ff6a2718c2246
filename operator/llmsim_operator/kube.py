"""A small async Kubernetes client returning plain dicts: server-side apply, get, delete, status.

NOTE: kubernetes_asyncio supplies what is hard (kubeconfig and in-cluster auth, token refresh,
TLS); its generic ``call_api`` carries any path, so one code path serves core, apps and custom
resources and the operator never converts between dicts and generated model classes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from llmsim_operator.conventions import FIELD_MANAGER

Object = dict[str, Any]

_PLURALS = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "Deployment": "deployments",
    "ServiceMonitor": "servicemonitors",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "LLMSimulator": "llmsimulators",
    "InferencePool": "inferencepools",
    "InferenceObjective": "inferenceobjectives",
}
_REQUEST_TIMEOUT = 30.0
#: API requests of the operator's own client in flight at once (and its connection pool). Beyond
#: that, reconciles queue here, where waiting costs a coroutine: thousands of resumes at once
#: otherwise wait for a pooled connection inside the request timeout (TimeoutError), draw 429s
#: from the API server's in-flight limit, and hold their responses and retries in memory.
MAX_IN_FLIGHT = 64

logger = logging.getLogger(__name__)


class ApiError(Exception):
    """A failed API call. ``status`` is the HTTP status, 0 for a transport failure."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message

    @property
    def conflict(self) -> bool:
        return self.status == 409


class KubeApi(Protocol):
    """What the reconciler needs from the API server (the tests substitute a fake)."""

    async def apply(self, obj: Object, *, field_manager: str = FIELD_MANAGER) -> Object: ...

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Object | None: ...

    async def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str) -> None: ...

    async def replace_status(self, obj: Object) -> Object: ...

    async def api_exists(self, group_version: str, plural: str, *, refresh: bool = False) -> bool: ...


async def load_configuration(kubeconfig: str | None = None) -> k8s_client.Configuration:
    """Credentials: ``kubeconfig`` if given, else the in-cluster service account, else $KUBECONFIG / ~/.kube/config.

    Both the operator's client and kopf's own connection (see handlers.login) come from here.
    """
    configuration = k8s_client.Configuration()
    if kubeconfig is None:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return configuration
        except k8s_config.ConfigException:
            pass
    await k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return configuration


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """REST path of a namespaced object (or its collection when ``name`` is None)."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{_PLURALS[kind]}"
    return f"{path}/{name}" if name is not None else path


class Kube:
    """:class:`KubeApi` over kubernetes_asyncio."""

    def __init__(self, api: k8s_client.ApiClient) -> None:
        self._api = api
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        # Discovery, once per process: group version -> the resources it serves (empty: not served).
        self._served: dict[str, frozenset[str]] = {}
        # One discovery at a time: a thousand reconciles starting together ask once, not a thousand times.
        self._discovery = asyncio.Lock()
        #: Discovery requests made (the tests count them).
        self.discovery_calls = 0
        # The last status this process wrote per object (resourceVersion and status; a few hundred, LRU):
        # fresher than the watch for a moment after each write, which spares a conflict and a read.
        self._written: OrderedDict[tuple[str, str], Object] = OrderedDict()
        # What this process's last apply left on each object (kind, namespace, name): its
        # resourceVersion, generation and our labels, annotations and owners (LRU, a few hundred
        # bytes each). A watch event that shows no more than that is the echo of our own write or a
        # status update: no drift to look for, so the child's manifest need not be rendered.
        self._applied: OrderedDict[tuple[str, str, str], tuple[Any, Any, Object]] = OrderedDict()

    @classmethod
    async def connect(cls, kubeconfig: str | None = None) -> Kube:
        configuration = await load_configuration(kubeconfig)
        configuration.connection_pool_maxsize = MAX_IN_FLIGHT
        return cls(k8s_client.ApiClient(configuration))

    async def close(self) -> None:
        await self._api.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        none_on_404: bool = True,
    ) -> Object | None:
        """One API call; returns the decoded body, None on 404 (unless told not to). Raises :class:`ApiError`."""
        try:
            async with self._in_flight:
                result: Object = await self._api.call_api(
                    path,
                    method,
                    query_params=query or [],
                    header_params={"Accept": "application/json", "Content-Type": content_type},
                    body=body,
                    response_types_map={200: "object", 201: "object", 202: "object"},
                    auth_settings=["BearerToken"],
                    _return_http_data_only=True,
                    _request_timeout=_REQUEST_TIMEOUT,
                )
        except k8s_client.ApiException as exc:
            if exc.status == 404 and none_on_404:
                return None
            raise ApiError(int(exc.status or 0), _message(exc.body) or str(exc.reason)) from None
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ApiError(0, f"{type(exc).__name__}: {exc}") from None
        except RuntimeError as exc:
            # aiohttp's "Session is closed": a timer still running while the operator shuts down.
            raise ApiError(0, str(exc)) from None
        return result

    async def apply(self, obj: Object, *, field_manager: str = FIELD_MANAGER) -> Object:
        """Server-side apply (force: the operator owns what it sends, and takes it back from others)."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        query = [("fieldManager", field_manager), ("force", "true")]
        try:
            result = await self.request(
                "PATCH", path, body=obj, query=query, content_type="application/apply-patch+yaml", none_on_404=False
            )
        except ApiError as exc:
            if exc.status == 404 and not namespace_gone(exc):
                # The API itself is not served (any more): ask discovery again next time.
                self.forget_api(obj["apiVersion"])
            raise
        if result is None:  # not reached: none_on_404=False raises instead
            raise ApiError(404, f"{obj['kind']} {meta['namespace']}/{meta['name']}: not found")
        if field_manager == FIELD_MANAGER:
            applied = result.get("metadata") or {}
            key = (str(obj["kind"]), str(meta["namespace"]), str(meta["name"]))
            self._applied[key] = (applied.get("resourceVersion"), applied.get("generation"), _marks(applied))
            self._applied.move_to_end(key)
            while len(self._applied) > _APPLIED_KEPT:
                self._applied.popitem(last=False)
        return result

    def is_echo(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is exactly what this process's last apply of it returned (same resourceVersion)."""
        meta = obj.get("metadata") or {}
        record = self._applied.get((str(obj.get("kind")), str(meta.get("namespace")), str(meta.get("name"))))
        return record is not None and meta.get("resourceVersion") == record[0]

    def as_applied(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` (a watch event's object) is as this process's last apply of it left it,
        but for its status and what others added: the same resourceVersion, or the same generation
        (no spec change) with our labels, annotations and owner references intact."""
        meta = obj.get("metadata") or {}
        record = self._applied.get((str(obj.get("kind")), str(meta.get("namespace")), str(meta.get("name"))))
        if record is None:
            return False
        version, generation, marks = record
        if meta.get("resourceVersion") == version:
            return True
        if generation is None or meta.get("generation") != generation:
            return False
        live = _marks(meta)
        return (
            all(live["labels"].get(k) == v for k, v in marks["labels"].items())
            and all(live["annotations"].get(k) == v for k, v in marks["annotations"].items())
            and live["ownerReferences"] == marks["ownerReferences"]
        )

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Object | None:
        return await self.request("GET", object_path(api_version, kind, namespace, name))

    async def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str) -> None:
        """Delete if it still is the object with ``uid`` (never a same-named successor)."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        await self.request("DELETE", object_path(api_version, kind, namespace, name), body=body)

    async def replace_status(self, obj: Object) -> Object:
        """PUT the status subresource; ``metadata.resourceVersion`` makes it fail (409) on a concurrent write."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]) + "/status"
        result = await self.request("PUT", path, body=obj)
        if result is None:
            raise ApiError(404, f"{obj['kind']} {meta['namespace']}/{meta['name']} is gone")
        key = (str(meta["namespace"]), str(meta["name"]))
        self._written[key] = {
            "resourceVersion": result["metadata"].get("resourceVersion"),
            "status": result.get("status"),
        }
        self._written.move_to_end(key)
        while len(self._written) > _WRITTEN_KEPT:
            self._written.popitem(last=False)
        return result

    def fresher(self, obj: Object) -> Object:
        """``obj`` (an LLMSimulator as the watch last showed it), with the status this process wrote
        since, if any (then with that write's resourceVersion)."""
        meta = obj.get("metadata") or {}
        written = self._written.get((str(meta.get("namespace")), str(meta.get("name"))))
        if written is None or not _newer(written.get("resourceVersion"), meta.get("resourceVersion")):
            return obj
        return {**obj, "metadata": {**meta, "resourceVersion": written["resourceVersion"]}, "status": written["status"]}

    async def can_list(self, api_version: str, kind: str, namespace: str | None = None) -> None:
        """List one object of ``kind`` (in ``namespace``, or cluster-wide), as kopf's watch does.

        Raises :class:`ApiError` when the API is not served or the credentials may not list it.
        """
        if namespace is not None:
            path = object_path(api_version, kind, namespace)
        else:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            path = f"{base}/{_PLURALS[kind]}"
        if await self.request("GET", path, query=[("limit", "1")]) is None:
            raise ApiError(404, f"{api_version} {_PLURALS[kind]} is not served")

    async def api_exists(self, group_version: str, plural: str, *, refresh: bool = False) -> bool:
        """Whether the API server serves ``plural`` in ``group_version`` (e.g. monitoring.coreos.com/v1).

        Asked once per process and group version; ``refresh`` asks again (after a failure that
        suggests the answer changed: a 404 from that API, or a wanted API that was not served).
        A failed discovery is not cached.
        """
        if refresh or group_version not in self._served:
            known = self._served.get(group_version)
            async with self._discovery:
                # Unless another task (re)discovered it while this one waited.
                if self._served.get(group_version) is known or group_version not in self._served:
                    self.discovery_calls += 1
                    listing = await self.request("GET", f"/apis/{group_version}")
                    names = frozenset(str(r.get("name")) for r in (listing or {}).get("resources", []))
                    self._served[group_version] = names
                    logger.info("API discovery: %s serves %d resources", group_version, len(names))
        return plural in self._served[group_version]

    def forget_api(self, group_version: str) -> None:
        """Drop the cached discovery of ``group_version`` (an apply to it answered 404)."""
        self._served.pop(group_version, None)


_WRITTEN_KEPT = 512
#: Children whose last apply is remembered (about 300 bytes each: 5,000 LLMSimulators' four children).
_APPLIED_KEPT = 20_000


def _marks(meta: Mapping[str, Any]) -> Object:
    return {
        "labels": dict(meta.get("labels") or {}),
        "annotations": dict(meta.get("annotations") or {}),
        "ownerReferences": list(meta.get("ownerReferences") or []),
    }


def _newer(a: Any, b: Any) -> bool:
    """Whether resourceVersion ``a`` is later than ``b`` (etcd revisions; opaque ones never are)."""
    return str(a).isdigit() and (not str(b).isdigit() or int(str(a)) > int(str(b)))


def namespace_gone(exc: ApiError) -> bool:
    """Whether ``exc`` says the object's namespace is being deleted or is gone (nothing to repair there)."""
    return (exc.status == 403 and "being terminated" in exc.message) or (
        exc.status == 404 and "namespaces" in exc.message and "not found" in exc.message
    )


def _message(body: Any) -> str:
    """The ``message`` of a Kubernetes Status body."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        status = json.loads(body)
    except (TypeError, ValueError):
        return str(body or "")
    return str(status.get("message", "")) if isinstance(status, dict) else str(body)
