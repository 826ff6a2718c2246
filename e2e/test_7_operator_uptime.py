"""Last: the operator pod never restarted over the whole run (test_6 replaced it once, on purpose)."""

from __future__ import annotations

import pytest

from e2e.cluster import Cluster

pytestmark = pytest.mark.e2e


def test_operator_never_restarted(cluster: Cluster) -> None:
    pod = cluster.operator_pod()
    (status,) = pod.status.container_statuses
    assert status.ready
    assert status.restart_count == 0
    assert status.last_state.terminated is None
