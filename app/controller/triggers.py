"""Which Service keys a watch event enqueues (docs/design.md §5 "Events → keys").

Only what can change a Service's Selection is enqueued ("when in doubt, enqueue"):

- a Service event: that Service (the controller skips the echo of our own status write,
  :meth:`app.controller.reconciler.Reconciler.is_own_write`);
- an EndpointSlice event: ``namespace/<kubernetes.io/service-name>`` of the old and new
  slice, when that Service is managed with ``externalTrafficPolicy: Local``, or its backend
  Pods or target ports changed (port ownership's own-backend rule, docs/design.md §4.9; a
  Service not yet in the cache is enqueued by its own event);
- a Node event: nothing when the old and new NodeView are equal (heartbeats touch nothing a
  view holds); otherwise the managed Services whose selector matches the old or new labels
  (an unparsable selector is skipped: its Service is never written), and for eTP=Local only
  those with a ready endpoint on that Node (no other Node can be selected for them);
- a health change of a Node (docs/design.md §4.11): the Services a change of that Node
  would enqueue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from app.controller.cache import Change, ClusterCache, service_key
from app.core.nodeipam import LOCAL
from app.core.selector import SelectorError, parse_cached
from app.core.views import EndpointSliceView, NodeView, ServiceView


def services_for_node_change(
    *,
    old: NodeView | None,
    new: NodeView | None,
    managed: Iterable[ServiceView],
    cache: ClusterCache,
) -> list[str]:
    """Keys of the managed Services whose Selection a Node change can alter (module doc).

    ``old``/``new`` are the Node before/after (``None``: added/deleted); ``managed`` the
    Services for which :func:`app.core.nodeipam.is_managed` holds.

    This is event routing, not node selection: the selector is matched against the one
    changed Node's old and new labels only to decide whether to *enqueue* a Service (a
    superset is fine, "when in doubt, enqueue"). Which Nodes a Service gets is decided
    solely by :func:`app.core.nodeipam.select` when the key is reconciled (docs/design.md §1).
    """
    if old == new or (old is None and new is None):
        return []
    if old is None or new is None:
        return _services_selecting(new or old, managed, cache)  # type: ignore[arg-type]
    return _services_selecting(old, managed, cache, also=new)


def _services_selecting(
    node: NodeView,
    managed: Iterable[ServiceView],
    cache: ClusterCache,
    *,
    also: NodeView | None = None,
) -> list[str]:
    """Keys of the managed Services whose selector matches ``node`` (or ``also``, its new
    version) and, for eTP=Local, that have a ready endpoint on it."""
    name = node.name
    keys = []
    for service in managed:
        if service.match_node_labels is not None:
            try:
                selector = parse_cached(service.match_node_labels)
            except SelectorError:
                continue
            if not (
                selector.matches(node.labels)
                or (also is not None and selector.matches(also.labels))
            ):
                continue
        if service.external_traffic_policy == LOCAL and not any(
            name in s.ready_node_names
            for s in cache.endpoint_slices(service.namespace, service.name)
        ):
            continue
        keys.append(service_key(service.namespace, service.name))
    return keys


def services_for_endpoint_slice_changes(
    *, changes: Iterable[Change], managed: Mapping[str, ServiceView]
) -> set[str]:
    """Keys of the managed Services named by the old or new EndpointSlices of ``changes``
    (label ``kubernetes.io/service-name``) that the change can alter: eTP=Local ones (their
    candidates) and any whose backend Pods or target ports changed (port ownership's
    own-backend rule, docs/design.md §4.9); ``managed`` maps key → Service."""
    keys: set[str] = set()
    for _, old, new in changes:
        # Any managed Service whose own backends changed (they never block it, §4.9).
        backends_changed = _backends(old) != _backends(new)
        for view in (old, new):
            if view is None or view.service_name is None:
                continue
            key = service_key(view.namespace, view.service_name)
            service = managed.get(key)
            if service is not None and (
                backends_changed or service.external_traffic_policy == LOCAL
            ):
                keys.add(key)
    return keys


def _backends(view: EndpointSliceView | None) -> tuple[object, ...] | None:
    """What of a slice the own-backend rule of port ownership reads (docs/design.md §4.9)."""
    if view is None or not view.backends:
        return None
    return view.backends, view.target_ports


def services_for_node_health(
    *, names: Iterable[str], managed: Iterable[ServiceView], cache: ClusterCache
) -> list[str]:
    """Keys of the managed Services whose Selection a health change of the Nodes ``names``
    can alter (docs/design.md §4.11): those that would enqueue on a change of each Node
    (:func:`services_for_node_change` with the Node as it is, before and after), each once."""
    keys: dict[str, None] = {}
    services = list(managed)
    index = cache.node_index()
    for position in index.positions(names):
        for key in _services_selecting(index.nodes[position], services, cache):
            keys[key] = None
    return list(keys)
