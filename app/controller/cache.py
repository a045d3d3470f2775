"""The in-memory cluster state the informers keep: slim views only (docs/design.md §5).

:class:`ClusterCache` holds :class:`~app.core.views.NodeView`, :class:`~app.core.views.ServiceView`,
:class:`~app.core.views.EndpointSliceView` and :class:`~app.core.views.PodView` (Pods that
hold node ports only) objects, never full API objects, keyed like client-go's
``MetaNamespaceKeyFunc`` (``name`` for Nodes, ``namespace/name`` otherwise), with an index
of EndpointSlices by ``namespace/<kubernetes.io/service-name>`` and the port index of
Services and Pods (docs/design.md §4.9). Informer threads write, workers and the web layer
read; every method is thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from app.core.nodeindex import NodeIndex
from app.core.nodeipam import is_managed
from app.core.options import SelectionSettings
from app.core.pools import NO_POOL_SET, Pool, PoolSet
from app.core.ports import PortIndex, PortKey
from app.core.views import EndpointSliceView, NamespaceView, NodeView, PodView, ServiceView
from app.kube.client import Kind

KINDS: tuple[Kind, ...] = (
    "nodes",
    "services",
    "endpointslices",
    "pods",
    "namespaces",
    "nodeaddresspools",
)
"""The watched kinds; of the ``pods`` only those that hold a node port are stored (a
``hostNetwork: true`` Pod's ``containerPort``, another Pod's ``hostPort``:
app.controller.controller.host_pod_view; with ``host-port-pods`` off the informer lists the
``hostNetwork: true`` ones only, app.kube.client.pod_field_selector). ``namespaces``: their
labels only (what NodeAddressPools' ``namespaceSelectors`` match); ``nodeaddresspools``:
:class:`~app.core.pools.Pool` s (docs/design.md §4.13; no CRD installed: none)."""

View = Any
"""A NodeView, ServiceView, EndpointSliceView or PodView (the store of each kind holds one
type)."""

Change = tuple[str, View | None, View | None]
"""``(key, old view or None, new view or None)`` as one informer update produced it."""


def service_key(namespace: str, name: str) -> str:
    """Return the work-queue key ``namespace/name`` of a Service."""
    return f"{namespace}/{name}"


class ClusterCache:
    """Thread-safe store of the four watched kinds (:data:`KINDS`); see the module docstring.

    It also keeps the port index of docs/design.md §4.9 (:class:`~app.core.ports.PortIndex`),
    updated with every Service and port-holding Pod it stores; ``selection`` decides which
    Services are managed there (default: the default settings)."""

    def __init__(self, selection: SelectionSettings | None = None) -> None:
        settings = selection if selection is not None else SelectionSettings()
        self._ports = PortIndex(lambda view: is_managed(view, settings)[0])
        self._lock = threading.Lock()
        self._stores: dict[Kind, dict[str, View]] = {kind: {} for kind in KINDS}
        self._slices_by_service: dict[str, dict[str, EndpointSliceView]] = {}
        self._synced: set[Kind] = set()
        self._nodes_snapshot: list[NodeView] | None = None
        self._node_index: NodeIndex | None = None
        self._pool_set: PoolSet | None = None

    @property
    def synced(self) -> bool:
        """True after the first full list of every kind of :data:`KINDS` has been stored
        (the Pods included: port ownership must not be decided without them)."""
        with self._lock:
            return len(self._synced) == len(KINDS)

    def unsynced(self) -> tuple[Kind, ...]:
        """The kinds of :data:`KINDS` whose first full list has not been stored yet, in
        that order: what ``/readyz`` says it waits for (a first List of every Pod takes
        about a minute at 150,000 Pods, bench/README.md §11)."""
        with self._lock:
            return tuple(kind for kind in KINDS if kind not in self._synced)

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

    def pools(self) -> PoolSet:
        """Every NodeAddressPool as a :class:`~app.core.pools.PoolSet`, shared by every
        caller until the next change of a pool, or of a namespace's labels while pools
        exist (decisions compare it by identity: app.core.decision.Snapshot.pools)."""
        with self._lock:
            if self._pool_set is None:
                pools: list[Pool] = list(self._stores["nodeaddresspools"].values())
                self._pool_set = PoolSet(pools) if pools else NO_POOL_SET
            return self._pool_set

    def pool_views(self) -> list[Pool]:
        """Every stored NodeAddressPool view (a new list), each the newest: its status
        fields (``generation``, ``accepted``) are the last ones seen, which those of
        :meth:`pools` need not be (a change of status alone keeps the PoolSet)."""
        with self._lock:
            return list(self._stores["nodeaddresspools"].values())

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        """The labels of namespace ``name`` (``None``: not known)."""
        with self._lock:
            view: NamespaceView | None = self._stores["namespaces"].get(name)
        return None if view is None else dict(view.labels)

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
            if kind == "services":
                for key, old, new in changes:
                    self._ports.put_service(key, old, new)
            elif kind == "pods":
                for key, old, new in changes:
                    self._ports.put_pod(key, old, new)
            elif kind == "endpointslices":
                self._slices_by_service = {}
                for key, view in views.items():
                    self._index_slice_locked(key, None, view)
            elif kind == "nodes":
                self._nodes_snapshot = None
                self._node_index = None
            elif changes and kind in ("nodeaddresspools", "namespaces"):
                self._pool_set = None
            self._synced.add(kind)
            return changes

    def _after_change_locked(
        self, kind: Kind, key: str, old: View | None, new: View | None
    ) -> None:
        if kind == "services":
            self._ports.put_service(key, old, new)
        elif kind == "pods":
            self._ports.put_pod(key, old, new)
        elif kind == "nodes":
            self._nodes_snapshot = None
            self._node_index = None
        elif kind == "endpointslices":
            self._index_slice_locked(key, old, new)
        elif (kind == "nodeaddresspools" and old != new) or (
            kind == "namespaces" and self._pool_set and old != new
        ):
            # A pool's view equal to the last one changed in status alone (its Accepted
            # condition, metadata.generation: compare=False), a namespace's in something
            # but its labels: the PoolSet (and every memoised decision) stays.
            self._pool_set = None

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

    # Port index (docs/design.md §4.9): app.core.ports.PortLookup, under the cache's lock.

    def claimants(self, key: PortKey) -> list[ServiceView]:
        """The managed Services with port ``key`` (``(protocol, port)``)."""
        with self._lock:
            return self._ports.claimants(key)

    def fixed(self, key: PortKey) -> list[tuple[ServiceView, tuple[str, ...]]]:
        """Services holding ``key`` on fixed addresses (another class's ingress,
        ``spec.externalIPs``), with those addresses."""
        with self._lock:
            return self._ports.fixed(key)

    def node_port_holders(self, key: PortKey) -> list[tuple[ServiceView, str]]:
        """Services with ``key`` as an allocated nodePort or healthCheckNodePort."""
        with self._lock:
            return self._ports.node_port_holders(key)

    def pods(self, key: PortKey) -> list[PodView]:
        """Pods holding ``key`` on their node (a host-network ``containerPort`` or a
        ``hostPort``)."""
        with self._lock:
            return self._ports.pods(key)

    def port_version(self) -> int:
        """The port index's ``version`` (:class:`app.core.ports.PortIndex`): changes
        whenever what any Service or Pod blocks changes."""
        with self._lock:
            return self._ports.version

    def related(self, ports: Iterable[PortKey]) -> set[str]:
        """Keys of the managed Services with one of ``ports`` (whose ownership a change
        to something holding one of them can alter)."""
        with self._lock:
            return self._ports.related(ports)
