"""Kubernetes service discovery (role ``endpoints``) for a Prometheus built without it, over HTTP SD.

Debian's ``prometheus`` (2.42) leaves out Kubernetes service discovery, and no other Prometheus build
can be installed on these machines. This serves ``http_sd_configs`` target groups with the labels
Prometheus' own ``kubernetes_sd_configs`` role ``endpoints`` sets (the subset our relabel rules and
their usual variants read): one target per endpoint address and port, ready and not-ready, with
``__meta_kubernetes_namespace``, ``_service_name``, ``_service_label_<name>``, ``_endpoints_name``,
``_endpoint_port_name``, ``_endpoint_port_protocol``, ``_endpoint_ready``, ``_pod_name``. Label
names are sanitized as Prometheus does (every character outside [a-zA-Z0-9_] becomes ``_``).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from e2e.cluster import Cluster

_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


def target_groups(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    services = {s.metadata.name: s for s in cluster.core.list_namespaced_service(namespace).items}
    groups = []
    for endpoints in cluster.core.list_namespaced_endpoints(namespace).items:
        name = endpoints.metadata.name
        service_labels = {}
        if name in services:
            service_labels = {
                f"__meta_kubernetes_service_label_{_UNSAFE.sub('_', k)}": v
                for k, v in (services[name].metadata.labels or {}).items()
            }
        for subset in endpoints.subsets or []:
            addresses = [(a, "true") for a in subset.addresses or []] + [
                (a, "false") for a in subset.not_ready_addresses or []
            ]
            for address, ready in addresses:
                for port in subset.ports or []:
                    labels = {
                        "__meta_kubernetes_namespace": namespace,
                        "__meta_kubernetes_endpoints_name": name,
                        "__meta_kubernetes_service_name": name,
                        "__meta_kubernetes_endpoint_port_name": port.name or "",
                        "__meta_kubernetes_endpoint_port_protocol": port.protocol or "TCP",
                        "__meta_kubernetes_endpoint_ready": ready,
                        **service_labels,
                    }
                    if address.target_ref is not None and address.target_ref.kind == "Pod":
                        labels["__meta_kubernetes_pod_name"] = address.target_ref.name
                    groups.append({"targets": [f"{address.ip}:{port.port}"], "labels": labels})
    return groups


@contextmanager
def endpoints_discovery(cluster: Cluster, namespace: str) -> Iterator[str]:
    """Serve the namespace's endpoints as HTTP SD on a loopback port; yields the URL to poll."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(target_groups(cluster, namespace)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="endpoints-sd", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/targets"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
