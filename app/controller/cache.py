"""The in-memory cluster state the informers keep: slim views only (docs/design.md §5).

:class:`ClusterCache` holds :class:`~app.core.views.NodeView`, :class:`~app.core.views.ServiceView`
and :class:`~app.core.views.EndpointSliceView` objects, never full API objects, keyed like
client-go's ``MetaNamespaceKeyFunc`` (``name`` for Nodes, ``namespace/name`` otherwise),
with an index of EndpointSlices by ``namespace/<kubernetes.io/service-name>``. Informer
threads write, workers and the web layer read; every method is thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from app.core.nodeindex import NodeIndex
from app.core.views import EndpointSliceView, NodeView, ServiceView
from app.kube.client import Kind

KINDS: tuple[Kind, ...] = ("nodes", "services", "endpointslices")

View = Any
"""A NodeView, ServiceView or EndpointSliceView (the store of each kind holds one type)."""

Change = tuple[str, View | None, View | None]
"""``(key, old view or None, new view or None)`` as one informer update produced it."""


def service_key(namespace: str, name: str) -> str:
    """Return the work-queue key ``namespace/name`` of a Service."""
    return f"{namespace}/{name}"


class ClusterCache:
    """Thread-safe store of the three watched kinds; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stores: dict[Kind, dict[str, View]] = {kind: {} for kind in KINDS}
        self._slices_by_service: dict[str, dict[str, EndpointSliceView]] = {}
        self._synced: set[Kind] = set()
        self._nodes_snapshot: list[NodeView] | None = None
        self._node_index: NodeIndex | None = None

    @property
    def synced(self) -> bool:
        """True after the first full list of all three kinds has been stored."""
        with self._lock:
            return len(self._synced) == len(KINDS)

    def kind_synced(self, kind: Kind) -> bool:
        """True after the first full list of ``kind`` has been stored."""
        with self._lock:
            return kind in self._synced

    def nodes(self) -> list[NodeView]:
        """All Nodes. The list is shared between callers until the next Node change:
        treat it as read-only (it is rebuilt, not mutated, when Nodes change)."""
        with self._lock:
            if self._nodes_snapshot is None:
                self._nodes_snapshot = list(self._stores["nodes"].values())
            return self._nodes_snapshot

    def node_index(self) -> NodeIndex:
        """All Nodes as a :class:`~app.core.nodeindex.NodeIndex` for
        :func:`app.core.nodeipam.select`: one per Node snapshot, shared by every caller
        until the next Node change, so Services sharing a selector share one selector pass
        over the Nodes (the index memoises it). Read-only, like :meth:`nodes`."""
        with self._lock:
            if self._node_index is not None:
                return self._node_index
        snapshot = self.nodes()
        index = NodeIndex(snapshot)
        with self._lock:
            if self._nodes_snapshot is snapshot:
                self._node_index = index
        return index

    def service(self, namespace: str, name: str) -> ServiceView | None:
        """The Service ``namespace/name``, or ``None`` when it is not (or no longer) known."""
        with self._lock:
            view: ServiceView | None = self._stores["services"].get(service_key(namespace, name))
            return view

    def services(self) -> list[ServiceView]:
        """All Services (a new list)."""
        with self._lock:
            return list(self._stores["services"].values())

    def endpoint_slices(self, namespace: str, service_name: str) -> list[EndpointSliceView]:
        """EndpointSlices in ``namespace`` labelled ``kubernetes.io/service-name=service_name``."""
        with self._lock:
            index = self._slices_by_service.get(service_key(namespace, service_name))
            return list(index.values()) if index else []

    def get(self, kind: Kind, key: str) -> View | None:
        """The view stored under ``key`` for ``kind``, or ``None``."""
        with self._lock:
            return self._stores[kind].get(key)

    def put(self, kind: Kind, key: str, view: View) -> View | None:
        """Store ``view`` under ``key``; return the view it replaced (``None``: new)."""
        with self._lock:
            old = self._stores[kind].get(key)
            self._stores[kind][key] = view
            self._after_change_locked(kind, key, old, view)
            return old

    def delete(self, kind: Kind, key: str) -> View | None:
        """Remove ``key``; return the removed view (``None``: it was not there)."""
        with self._lock:
            old = self._stores[kind].pop(key, None)
            if old is not None:
                self._after_change_locked(kind, key, old, None)
            return old

    def replace(self, kind: Kind, views: Mapping[str, View]) -> list[Change]:
        """Make ``views`` the whole content for ``kind`` (after a full list) and mark it synced.

        Returns the changes against the previous content: new keys, keys whose view differs
        and keys that disappeared (``new`` is ``None``), as a re-list in client-go's
        ``DeltaFIFO.Replace`` reports them, so handlers see deletions missed during a gap.
        """
        with self._lock:
            previous = self._stores[kind]
            changes: list[Change] = [
                (key, previous.get(key), view)
                for key, view in views.items()
                if previous.get(key) != view
            ]
            changes.extend((key, old, None) for key, old in previous.items() if key not in views)
            self._stores[kind] = dict(views)
            if kind == "endpointslices":
                self._slices_by_service = {}
                for key, view in views.items():
                    self._index_slice_locked(key, None, view)
            elif kind == "nodes":
                self._nodes_snapshot = None
                self._node_index = None
            self._synced.add(kind)
            return changes

    def _after_change_locked(
        self, kind: Kind, key: str, old: View | None, new: View | None
    ) -> None:
        if kind == "nodes":
            self._nodes_snapshot = None
            self._node_index = None
        elif kind == "endpointslices":
            self._index_slice_locked(key, old, new)

    def _index_slice_locked(
        self, key: str, old: EndpointSliceView | None, new: EndpointSliceView | None
    ) -> None:
        if old is not None and old.service_name is not None:
            owner = service_key(old.namespace, old.service_name)
            index = self._slices_by_service.get(owner)
            if index is not None:
                index.pop(key, None)
                if not index:
                    del self._slices_by_service[owner]
        if new is not None and new.service_name is not None:
            owner = service_key(new.namespace, new.service_name)
            self._slices_by_service.setdefault(owner, {})[key] = new
