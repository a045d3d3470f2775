"""The Lease holder's node-health decision, kept where the next holder and every replica
read it (docs/design.md §4.11, "Across a leader change").

One ``coordination.k8s.io/v1`` Lease of our own in the leader-election namespace, named
``<leader-election-id>-node-health``: ``spec.holderIdentity`` is the replica that wrote it,
``spec.renewTime`` when, and the annotation :data:`~app.core.nodehealth.HEALTH_ANNOTATION`
holds ``{node name: why}`` as JSON. A Lease because the controller already may read and
write Leases in its namespace (one more ``resourceName`` in its Role), and because it is
the API's small coordination object: nothing watches it, no workload mounts it. Written by
the Lease holder only when its effective decision changed; read by the other replicas once
per health-check period (one GET each) and by a new holder when its term starts.

The same Lease carries the holder's effective settings
(:data:`~app.core.published.SETTINGS_ANNOTATION`, :meth:`LeaseHealthRecord.publish`), with
health checks on or off, for ``kubectl node-ipam preview`` (docs/design.md §8). Each
writer replaces only its own annotation, over the ``resourceVersion`` it read (a 409 is
tried again), so the two never undo each other.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from app.controller.events import micro_time
from app.core.nodehealth import HEALTH_ANNOTATION, decode_unhealthy, encode_unhealthy
from app.kube.client import ApiError, KubeAPI
from app.telemetry.logs import log_event

LOG = logging.getLogger("node_ipam_lb.nodehealth")


class LeaseHealthRecord:
    """:class:`app.controller.nodeprober.HealthRecord` on a Lease (module docstring).

    Args:
        api: the Kubernetes API.
        namespace: the leader-election namespace.
        name: the record's name (``<leader-election-id>-node-health``).
        identity: this replica's leader-election identity (``spec.holderIdentity``).
        wall_clock: epoch seconds, for ``spec.renewTime``.
    """

    def __init__(
        self,
        *,
        api: KubeAPI,
        namespace: str,
        name: str,
        identity: str,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._api = api
        self.namespace = namespace
        self.name = name
        self._identity = identity
        self._wall = wall_clock
        self._problem = ""

    def load(self) -> Mapping[str, str] | None:
        """The recorded decision (``{}`` when there is no record yet); ``None`` when the
        record cannot be read or does not parse (logged once per kind of problem)."""
        try:
            lease = self._api.read_lease(namespace=self.namespace, name=self.name)
        except ApiError as err:
            self._say(f"reading the node health record failed: {err}")
            return None
        if lease is None:
            return {}
        try:
            found = decode_unhealthy(_annotations(lease).get(HEALTH_ANNOTATION))
        except ValueError as err:
            self._say(f"the node health record does not parse: {err}")
            return None
        self._problem = ""
        return found

    def save(self, unhealthy: Mapping[str, str]) -> bool:
        """Write ``unhealthy`` (create the record, or replace it over the version read
        just before); ``False`` when a request failed (the prober tries next round)."""
        try:
            lease = self._api.read_lease(namespace=self.namespace, name=self.name)
            self._write(lease, HEALTH_ANNOTATION, encode_unhealthy(unhealthy))
        except ApiError as err:
            self._say(f"writing the node health record failed: {err}")
            return False
        log_event(
            LOG, "node health record written", lease=f"{self.namespace}/{self.name}",
            unhealthy=sorted(unhealthy)[:10], count=len(unhealthy),
        )  # fmt: skip
        self._problem = ""
        return True

    def publish(self, annotation: str, text: str) -> bool:
        """Make the record's ``annotation`` ``text`` (the effective settings,
        :mod:`app.core.published`): one GET, and a write only when the stored value differs
        (the record is created when absent; its other annotations are kept). ``True`` when
        the record holds ``text``; ``False`` when a request failed (a 409: another writer
        came first; the caller tries again)."""
        try:
            lease = self._api.read_lease(namespace=self.namespace, name=self.name)
            if lease is not None and _annotations(lease).get(annotation) == text:
                return True
            self._write(lease, annotation, text)
        except ApiError as err:
            self._say(f"writing {annotation} on the record failed: {err}")
            return False
        log_event(
            LOG, "record annotation written", lease=f"{self.namespace}/{self.name}",
            annotation=annotation, bytes=len(text.encode()),
        )  # fmt: skip
        self._problem = ""
        return True

    def _write(self, lease: dict[str, Any] | None, annotation: str, text: str) -> None:
        """Create the record, or replace it over the version read; raises :class:`ApiError`."""
        body = self._body({annotation: text}, lease)
        if lease is None:
            self._api.create_lease(namespace=self.namespace, body=body)
        else:
            self._api.replace_lease(namespace=self.namespace, name=self.name, body=body)

    def _body(self, updates: Mapping[str, str], lease: dict[str, Any] | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/name": "node-ipam-lb"},
            "annotations": {**_annotations(lease or {}), **updates},
        }
        if lease is not None:
            metadata["resourceVersion"] = (lease.get("metadata") or {}).get("resourceVersion")
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {"holderIdentity": self._identity, "renewTime": micro_time(self._wall())},
        }

    def _say(self, problem: str) -> None:
        if problem.split(":")[0] != self._problem.split(":")[0]:
            log_event(LOG, problem, level=logging.WARNING, lease=f"{self.namespace}/{self.name}")
        self._problem = problem


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata")
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return (
        {k: v for k, v in found.items() if isinstance(v, str)} if isinstance(found, Mapping) else {}
    )
