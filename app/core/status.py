"""Compare a desired ``status.loadBalancer.ingress`` with the stored one (pure).

The reconciler PATCHes status only when :func:`ingress_differs` says so (docs/design.md §5),
so this comparison is what keeps it from writing on every event or looping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_Entry = tuple[Any, Any, Any, tuple[tuple[Any, Any, Any], ...]]


def _normalise(entry: Mapping[str, Any]) -> _Entry:
    ip = entry.get("ip") or None
    mode = entry.get("ipMode") or ("VIP" if ip else None)
    ports = tuple(
        (p.get("port"), p.get("protocol"), p.get("error"))
        for p in (entry.get("ports") or ())
        if isinstance(p, Mapping)
    )
    return ip, entry.get("hostname") or None, mode, ports


def ingress_differs(
    desired: Sequence[Mapping[str, Any]], stored: Sequence[Mapping[str, Any]] | None
) -> bool:
    """True when writing ``desired`` would change the stored ingress list.

    Both are lists of ``status.loadBalancer.ingress`` entries (``ip``, ``hostname``,
    ``ipMode``, ``ports``). Compared as **ordered** lists of ``(ip, hostname, ipMode,
    ports)``: we always write one canonical order, so a different order means someone
    else wrote it and it must be rewritten. Normalisation, so that a value we wrote reads
    back equal (no write loops):

    - an entry with an ``ip`` and no ``ipMode`` counts as ``ipMode: VIP``: the API server
      defaults it so on LoadBalancer Services (KEP-1860);
    - absent, ``null`` and empty ``hostname``/``ip``/``ports`` are the same; ``ports``
      entries compare as ``(port, protocol, error)`` in order;
    - ``stored=None`` (no ``ingress`` field: the API omits an empty list) equals ``[]``.
    """
    stored_entries = stored or ()
    if len(desired) != len(stored_entries):
        return True
    # Entries that are equal as mappings normalise equally: the common case (the stored
    # list is what we wrote) is decided by one C-level comparison, without normalising.
    if tuple(desired) == tuple(stored_entries):
        return False
    return any(
        _normalise(want) != _normalise(have)
        for want, have in zip(desired, stored_entries, strict=True)
    )


PortRecord = tuple[tuple[Any, Any, Any], ...]
"""``status.loadBalancer.ingress[].ports`` as ``(port, protocol, error)`` triples."""


def port_record(ports: Sequence[Mapping[str, Any]]) -> PortRecord:
    """The triples of a ``ports`` list (core/v1 ``PortStatus``), in order, as
    :attr:`app.core.views.ServiceView.ingress_ports` holds them."""
    return tuple((p.get("port"), p.get("protocol"), p.get("error")) for p in ports)


def status_differs(
    desired: Sequence[Mapping[str, Any]],
    desired_ports: PortRecord,
    stored: Sequence[Mapping[str, Any]] | None,
    stored_ports: PortRecord | None,
) -> bool:
    """True when writing ``desired`` with ``desired_ports`` on every entry would change
    the stored ingress, given as its entries (without the ports they share) and
    ``stored_ports`` (``ServiceView.ingress_ports``: ``None`` when the entries record none,
    or not the same). Both sides keep the address lists shared between Services
    (docs/design.md §5: the ports are per Service, the address lists are not)."""
    if ingress_differs(desired, stored):
        return True
    if not desired:
        return False
    return (stored_ports or ()) != desired_ports


def with_ports(
    entries: Sequence[Mapping[str, Any]], ports: PortRecord | None
) -> tuple[dict[str, Any], ...]:
    """``entries`` with ``ports`` set on each (new dicts; each its own list, so YAML
    writes no alias): the ingress as it is written or stored. ``None`` or ``()``: as
    they are."""
    if not ports:
        return tuple(dict(e) for e in entries)

    def record() -> list[dict[str, Any]]:
        out = []
        for port, protocol, error in ports:
            item: dict[str, Any] = {"port": port, "protocol": protocol}
            if error is not None:
                item["error"] = error
            out.append(item)
        return out

    return tuple({**e, "ports": record()} for e in entries)
