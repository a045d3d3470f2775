"""Kubernetes objects that tests and benchmarks both build."""

from __future__ import annotations

import time
from typing import Any


def event_body(namespace: str, name: str, index: int) -> dict[str, Any]:
    """An ``IPsAssigned`` ``events.k8s.io/v1`` Event like the recorder's."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{time.time_ns() + index:x}", "namespace": namespace},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "node-ipam-lb",
        "reportingInstance": "bench",
        "action": "AssignIPs",
        "reason": "IPsAssigned",
        "note": "assigned 192.0.2.1",
        "type": "Normal",
        "regarding": {"apiVersion": "v1", "kind": "Service", "namespace": namespace, "name": name},
    }


def node_address_pool(name: str, **spec: Any) -> dict[str, Any]:
    """A ``NodeAddressPool`` (``node-ipam-lb.io/v1alpha1``) called ``name`` with ``spec``."""
    return {
        "apiVersion": "node-ipam-lb.io/v1alpha1",
        "kind": "NodeAddressPool",
        "metadata": {"name": name},
        "spec": spec,
    }
