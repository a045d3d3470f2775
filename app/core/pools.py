"""Address pools: which nodes, ports and address types a Service may get (docs/design.md §4.13).

A ``NodeAddressPool`` (``node-ipam-lb.io/v1alpha1``, cluster-scoped, written by an
administrator; deploy/base/crd-nodeaddresspools.yaml) grants the Services it applies to
(``spec.serviceAllocation``: MetalLB's ``IPAddressPool`` fields ``priority``,
``namespaces``, ``namespaceSelectors``, ``serviceSelectors``) the nodes its
``spec.nodeSelector`` matches, on the ports of ``spec.ports``, publishing the address
types of ``spec.addressTypes``.

The rule (:meth:`PoolSet.choose`):

- **No pool object at all**: today's behaviour, unchanged (Cilium compatibility).
- Otherwise a managed Service uses **one** pool, MetalLB's way: the first, in order of
  ``priority`` (lower first; a pool without one after every pool with one) then name,
  that applies to it and grants every port of its ``spec.ports``. Its annotation then
  selects among that pool's nodes only, and the pool's ``addressTypes`` and
  ``ignoreExcludeLabel`` override the settings ``address-types`` and ``ignore-exclude-lb``.
- No pool applies to the Service: it gets no address (``NoPool``). Pools apply to it but
  none grants all its ports: it gets no address (``PortNotInPool``), the first such pool
  and the port named. Both fail closed: a tenant gets nothing an administrator did not
  grant, with the webhook in the path or not.

``allowed-namespaces`` still applies on top (both must allow a namespace). A pool whose
selectors do not parse (the API server's schema cannot check label syntax) applies to
nobody. ``serviceSelectors`` read labels the Service's author sets, so only the namespace
fields separate tenants. Pure: the cache supplies the pools and the namespaces' labels.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.codes import NO_POOL, PORT_NOT_IN_POOL
from app.core.options import ADDRESS_TYPES, SelectionSettings, normal_address_types
from app.core.ports import PortRange
from app.core.selector import (
    Selector,
    SelectorError,
    go_quote,
    label_value_errors,
    parse,
    qualified_name_errors,
)
from app.core.views import ServiceView, StoredCondition, generation_of, stored_condition

GROUP = "node-ipam-lb.io"
VERSION = "v1alpha1"
KIND = "NodeAddressPool"
PLURAL = "nodeaddresspools"
API_VERSION = f"{GROUP}/{VERSION}"
PROTOCOLS = ("TCP", "UDP", "SCTP")
MAX_POOLS = 1024
"""Pools the schema's list bound would not stop; :class:`PoolSet` reads the first ones (by
order) only, so one decision costs at most this many pool checks."""
MAX_CHOICES = 16_384
"""Namespaces (with their labels and the Service label values pools read) whose pools a
:class:`PoolSet` keeps (then it starts over)."""
POOLS_SHOWN = 3
"""Pool names a refusal lists before "and N more"."""
ACCEPTED = "Accepted"
"""The ``type`` of the condition the Lease holder writes on each pool
(app.controller.poolstatus): whether :func:`pool_from_object` can use its spec."""

NamespaceLabels = Callable[[str], Mapping[str, str] | None]
"""A namespace's labels by name (``None``: the namespace is not known, matches no
``namespaceSelectors``)."""


def _no_namespaces(namespace: str) -> Mapping[str, str] | None:
    return None


def _check_label(key_field: str, key: str, values: list[str], values_field: str) -> None:
    """Refuse a key that is not a qualified name and a value that is not a label value,
    as apimachinery's ``LabelSelectorAsSelector`` does (``NewRequirement``): checked
    before the selector text is built, so a comma, a parenthesis or an operator inside a
    key or value cannot become selector syntax (``In ["edge,worker"]`` is not
    ``role in (edge,worker)``).

    Raises:
        ValueError: naming the field, the value and apimachinery's reason.
    """
    errors = qualified_name_errors(key)
    if errors:
        raise ValueError(f"{key_field}: Invalid value: {go_quote(key)}: {'; '.join(errors)}")
    for i, val in enumerate(values):
        errors = label_value_errors(val)
        if errors:
            where = f"{values_field}[{i}]" if values_field.endswith(".values") else values_field
            raise ValueError(f"{where}: Invalid value: {go_quote(val)}: {'; '.join(errors)}")


def label_selector(value: object, *, field: str) -> Selector | None:
    """A metav1 ``LabelSelector`` (``matchLabels``, ``matchExpressions`` with operators
    ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``) as our :class:`Selector`, with
    apimachinery's ``LabelSelectorAsSelector`` meaning: an empty selector ``{}`` matches
    everything (``None`` is returned for it).

    Raises:
        ValueError: not a LabelSelector, or a key, value or operator apimachinery
            refuses; the message names ``field`` (e.g. ``spec.nodeSelector``).
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"{field}: Invalid value: must be an object")
    parts: list[str] = []
    labels = value.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise ValueError(f"{field}.matchLabels: Invalid value: must be an object")
    for key in labels:
        if not isinstance(key, str):  # a YAML dump's unquoted number; the API has strings
            raise ValueError(f"{field}.matchLabels: Invalid value: {key!r}: must be a string")
    for key, val in sorted(labels.items()):
        if not isinstance(val, str):
            raise ValueError(f"{field}.matchLabels[{key}]: Invalid value: must be a string")
        _check_label(f"{field}.matchLabels", key, [val], f"{field}.matchLabels[{key}]")
        parts.append(f"{key}={val}")
    expressions = value.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise ValueError(f"{field}.matchExpressions: Invalid value: must be a list")
    for i, expr in enumerate(expressions):
        where = f"{field}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping):
            raise ValueError(f"{where}: Invalid value: must be an object")
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}.key: Required value")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ValueError(f"{where}.values: Invalid value: must be a list of strings")
        _check_label(f"{where}.key", key, values, f"{where}.values")
        if op in ("In", "NotIn"):
            if not values:
                raise ValueError(
                    f"{where}.values: Required value: must be specified when `operator` is"
                    " 'In' or 'NotIn'"
                )
            parts.append(f"{key} {op.lower()} ({','.join(values)})")
        elif op in ("Exists", "DoesNotExist"):
            if values:
                raise ValueError(
                    f"{where}.values: Forbidden: may not be specified when `operator` is"
                    " 'Exists' or 'DoesNotExist'"
                )
            parts.append(key if op == "Exists" else f"!{key}")
        else:
            raise ValueError(
                f"{where}.operator: Unsupported value: {go_quote(str(op))}: supported"
                ' values: "In", "NotIn", "Exists", "DoesNotExist"'
            )
    if not parts:
        return None
    try:
        return parse(",".join(parts))
    except SelectorError as err:
        raise ValueError(f"{field}: Invalid value: {err}") from err


@dataclass(frozen=True, slots=True)
class Pool:
    """One ``NodeAddressPool``, as the decision reads it.

    ``node_selector``: ``None`` matches every node; ``ports``: ``None`` grants every port;
    ``address_types`` / ``ignore_exclude_label``: ``None`` keeps the setting;
    ``namespaces`` / ``namespace_selectors``: both empty allow every namespace, else the
    namespace must be listed or match one selector (``None`` in the tuple: an empty
    selector, matches every namespace); ``service_selectors``: empty allows every Service,
    else one must match its labels; ``priority``: ``None`` orders after every number.
    ``error``: why the object is unusable (it then applies to nobody).

    ``generation`` (``metadata.generation``) and ``accepted`` (the stored
    :data:`ACCEPTED` condition; ``None``: absent) are status only: no decision reads them,
    so they are left out of equality and hashing, and a change of the pool's status alone
    (the echo of our own write) is no change of the pool (the cache keeps its
    :class:`PoolSet`, no Service is requeued). app.controller.poolstatus reads them from
    the cache's newest view."""

    name: str
    node_selector: Selector | None = None
    ports: tuple[PortRange, ...] | None = None
    address_types: str | None = None
    ignore_exclude_label: bool | None = None
    namespaces: frozenset[str] = frozenset()
    namespace_selectors: tuple[Selector | None, ...] = ()
    service_selectors: tuple[Selector | None, ...] = ()
    priority: int | None = None
    error: str | None = None
    generation: int | None = field(default=None, compare=False, hash=False)
    accepted: StoredCondition | None = field(default=None, compare=False, hash=False)
    _settings: dict[int, SelectionSettings] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    @property
    def order(self) -> tuple[bool, int, str]:
        """Sort key: priority (lower first, ``None`` last), then name."""
        return (self.priority is None, self.priority or 0, self.name)

    def applies(self, service: ServiceView, namespace_labels: Mapping[str, str] | None) -> bool:
        """Whether ``spec.serviceAllocation`` lets ``service`` use this pool."""
        return self.allows_namespace(service.namespace, namespace_labels) and (
            self.allows_service(service)
        )

    def allows_namespace(self, namespace: str, labels: Mapping[str, str] | None) -> bool:
        """Whether ``namespaces``/``namespaceSelectors`` allow ``namespace`` (whose labels
        are ``labels``, ``None``: unknown); an invalid pool allows nothing."""
        if self.error is not None:
            return False
        if not (self.namespaces or self.namespace_selectors):
            return True
        return namespace in self.namespaces or any(
            s is None or (labels is not None and s.matches(labels))
            for s in self.namespace_selectors
        )

    def allows_service(self, service: ServiceView) -> bool:
        """Whether ``serviceSelectors`` (none: every Service) match ``service``'s labels."""
        return not self.service_selectors or self.allows_labels(dict(service.labels))

    def allows_labels(self, labels: Mapping[str, str]) -> bool:
        """Whether ``serviceSelectors`` (none: every Service) match a Service's ``labels``."""
        return not self.service_selectors or any(
            s is None or s.matches(labels) for s in self.service_selectors
        )

    def uncovered(self, ports: Iterable[tuple[str, int]]) -> tuple[str, int] | None:
        """The first ``(protocol, port)`` of ``ports`` that ``spec.ports`` does not grant,
        or ``None``."""
        if self.ports is None:
            return None
        for protocol, port in ports:
            if not any(r.covers(protocol, port) for r in self.ports):
                return protocol, port
        return None

    def settings(self, base: SelectionSettings) -> SelectionSettings:
        """``base`` with this pool's ``addressTypes`` and ``ignoreExcludeLabel`` (kept
        per ``base`` object, so a decision builds it once)."""
        if self.address_types is None and self.ignore_exclude_label is None:
            return base
        found = self._settings.get(id(base))
        if found is None:
            changes: dict[str, Any] = {}
            if self.address_types is not None:
                changes["address_types"] = self.address_types
                if self.address_types != ADDRESS_TYPES[0]:
                    changes["per_node_address_fallback"] = False
            if self.ignore_exclude_label is not None:
                changes["ignore_exclude_lb"] = self.ignore_exclude_label
            found = dataclasses.replace(base, **changes)
            self._settings.clear()  # one settings object per process in practice
            self._settings[id(base)] = found
        return found

    def describe_ports(self) -> str:
        """``spec.ports`` as text: ``"80, 443, 8000-8999/TCP"`` or ``"every port"``."""
        if self.ports is None:
            return "every port"
        return ", ".join(str(r) for r in self.ports) or "no port"

    def describe_nodes(self) -> str:
        """``spec.nodeSelector`` as a selector string, or ``"every node"``."""
        return "every node" if self.node_selector is None else str(self.node_selector)


def pool_from_object(obj: Mapping[str, Any]) -> Pool:
    """The :class:`Pool` of a ``NodeAddressPool`` object; never raises on content: an
    unusable spec gives a Pool with ``error`` set (naming the field, apimachinery style),
    which applies to nobody.

    The API server's schema (deploy/base/crd-nodeaddresspools.yaml) already checks types,
    enums, port bounds and ``endPort >= port`` (CEL); this re-checks what the decision
    relies on, since a pool written before the schema, or by a bare API server, reaches us
    too.
    """
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = str(meta.get("name") or "")
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    generation = generation_of(meta.get("generation"))
    accepted = stored_condition(conditions if isinstance(conditions, list) else [], ACCEPTED)
    try:
        pool = _pool(name, obj.get("spec") or {})
    except ValueError as err:
        return Pool(name=name, error=str(err), generation=generation, accepted=accepted)
    return dataclasses.replace(pool, generation=generation, accepted=accepted)


def _pool(name: str, spec: object) -> Pool:
    if not isinstance(spec, Mapping):
        raise ValueError("spec: Invalid value: must be an object")
    raw_selector = spec.get("nodeSelector")
    node_selector = (
        None if raw_selector is None else label_selector(raw_selector, field="spec.nodeSelector")
    )
    ports: tuple[PortRange, ...] | None = None
    if spec.get("ports") == []:
        raise ValueError(
            "spec.ports: Invalid value: must have at least 1 item (omit it to grant every port)"
        )
    if spec.get("ports") is not None:
        ports = tuple(
            _port_range(p, f"spec.ports[{i}]") for i, p in enumerate(_items(spec, "ports"))
        )
    types = spec.get("addressTypes")
    address_types = None
    if types is not None:
        if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
            raise ValueError(
                "spec.addressTypes: Invalid value: must be a non-empty list of strings"
            )
        try:
            address_types = normal_address_types(",".join(types))
        except ValueError as err:
            raise ValueError(
                f"spec.addressTypes: Unsupported value: {json.dumps(types)}: supported"
                ' values: "ExternalIP", "InternalIP"'
            ) from err
    ignore = spec.get("ignoreExcludeLabel")
    if ignore is not None and not isinstance(ignore, bool):
        raise ValueError("spec.ignoreExcludeLabel: Invalid value: must be a boolean")
    allocation = spec.get("serviceAllocation") or {}
    if not isinstance(allocation, Mapping):
        raise ValueError("spec.serviceAllocation: Invalid value: must be an object")
    where = "spec.serviceAllocation"
    priority = allocation.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise ValueError(f"{where}.priority: Invalid value: must be an integer")
    namespaces = _items(allocation, "namespaces", where)
    if not all(isinstance(n, str) for n in namespaces):
        raise ValueError(f"{where}.namespaces: Invalid value: must be a list of strings")
    return Pool(
        name=name,
        node_selector=node_selector,
        ports=ports,
        address_types=address_types,
        ignore_exclude_label=ignore,
        namespaces=frozenset(namespaces),
        namespace_selectors=tuple(
            label_selector(s, field=f"{where}.namespaceSelectors[{i}]")
            for i, s in enumerate(_items(allocation, "namespaceSelectors", where))
        ),
        service_selectors=tuple(
            label_selector(s, field=f"{where}.serviceSelectors[{i}]")
            for i, s in enumerate(_items(allocation, "serviceSelectors", where))
        ),
        priority=priority,
    )


def _items(obj: Mapping[str, Any], key: str, where: str = "spec") -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}.{key}: Invalid value: must be a list")
    return value


def _port_range(value: object, where: str) -> PortRange:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: Invalid value: must be an object")
    port, end, protocol = value.get("port"), value.get("endPort"), value.get("protocol")
    for key, number in (("port", port), ("endPort", end)):
        if number is None and key == "endPort":
            continue
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 65535:
            raise ValueError(
                f"{where}.{key}: Invalid value: {number!r}: must be between 1 and 65535, inclusive"
            )
    assert isinstance(port, int)
    last = port if not isinstance(end, int) else end
    if last < port:
        raise ValueError(
            f"{where}.endPort: Invalid value: {last}: must be greater than or equal to"
            f" port ({port})"
        )
    if protocol is not None and protocol not in PROTOCOLS:
        raise ValueError(
            f"{where}.protocol: Unsupported value: {go_quote(str(protocol))}: supported"
            ' values: "TCP", "UDP", "SCTP"'
        )
    return PortRange(port, last, protocol)


@dataclass(frozen=True, slots=True)
class Choice:
    """What :meth:`PoolSet.choose` gives a Service: ``pool`` (``None``: no pools exist,
    or the Service is refused), and for a refusal ``code`` (``NoPool`` or
    ``PortNotInPool``) and ``reason``, a sentence naming the pool, the value that decided
    and one thing the author can do."""

    pool: Pool | None = None
    code: str | None = None
    reason: str = ""
    port: tuple[str, int] | None = None
    """``PortNotInPool``: the ``(protocol, port)`` refused."""
    pool_name: str = ""
    """``PortNotInPool``: the pool named in ``reason`` (the first that applies)."""
    summary: str = ""
    """``NoPool``: ``reason`` in a few words, for a 120-character admission warning."""

    @property
    def refused(self) -> bool:
        """Whether the Service may get no address at all."""
        return self.code is not None


NO_POOLS = Choice()


def _names(pools: Sequence[Pool]) -> str:
    names = [p.name for p in pools[:POOLS_SHOWN]]
    more = len(pools) - POOLS_SHOWN
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


class PoolSet:
    """Every ``NodeAddressPool``, in choice order (:attr:`Pool.order`). Immutable; the
    cache builds a new one on each change, so decisions compare it by identity.

    Args:
        pools: the pools (any order); only the first :data:`MAX_POOLS` in order are read.
    """

    __slots__ = ("_applying", "_by_labels", "_chosen", "_label_keys", "invalid", "pools")

    def __init__(self, pools: Iterable[Pool] = ()) -> None:
        ordered = sorted(pools, key=lambda p: p.order)
        self.pools: tuple[Pool, ...] = tuple(ordered[:MAX_POOLS])
        self.invalid: tuple[Pool, ...] = tuple(p for p in self.pools if p.error is not None)
        self._by_labels = any(p.service_selectors for p in self.pools)
        # The label keys any pool's serviceSelectors read (a requirement reads its key only).
        self._label_keys: tuple[str, ...] = tuple(
            sorted(
                {
                    r.key
                    for p in self.pools
                    for s in p.service_selectors
                    if s is not None
                    for r in s.requirements
                }
            )
        )
        # (namespace, its labels, a Service's values of _label_keys) -> the pools that
        # allow the namespace, and those of them that apply to the Service, in order: one
        # pass over the pools' rules per namespace and label values, not per Service.
        self._applying: dict[tuple[Any, ...], tuple[tuple[Pool, ...], tuple[Pool, ...]]] = {}
        self._chosen = {p.name: Choice(pool=p) for p in self.pools}

    def __bool__(self) -> bool:
        return bool(self.pools)

    def __len__(self) -> int:
        return len(self.pools)

    def by_name(self, name: str) -> Pool | None:
        """The pool called ``name``, or ``None``."""
        return next((p for p in self.pools if p.name == name), None)

    def choose(
        self, service: ServiceView, namespace_labels: NamespaceLabels = _no_namespaces
    ) -> Choice:
        """The pool ``service`` (a managed Service) uses, or why it gets none (module
        docstring: the first applying pool, by priority then name, that grants every port
        of ``spec.ports``). No pools: :data:`NO_POOLS` (no restriction).
        Never raises on content."""
        if not self.pools:
            return NO_POOLS
        namespace = service.namespace
        labels = namespace_labels(namespace)
        # Only the label keys the pools' serviceSelectors read can change which apply.
        own = dict(service.labels) if self._label_keys else {}
        key = (
            namespace,
            None if labels is None else tuple(sorted(labels.items())),
            tuple([own.get(k) for k in self._label_keys]),
        )
        found = self._applying.get(key)
        if found is None:
            in_namespace = tuple(p for p in self.pools if p.allows_namespace(namespace, labels))
            applying = (
                tuple(p for p in in_namespace if p.allows_labels(own))
                if self._by_labels
                else in_namespace
            )
            found = (in_namespace, applying)
            if len(self._applying) >= MAX_CHOICES:
                self._applying.clear()
            self._applying[key] = found
        in_namespace, applying = found
        if not applying:
            summary = (
                f"serviceSelectors of NodeAddressPool {in_namespace[0].name} match none of its"
                " labels"
                if in_namespace
                else f"no NodeAddressPool applies to namespace {namespace}"
            )
            return Choice(
                code=NO_POOL,
                reason=self._no_pool_reason(namespace, in_namespace),
                summary=summary,
            )
        for pool in applying:
            if pool.uncovered(service.ports) is None:
                return self._chosen[pool.name]
        ungranted = [
            key for key in service.ports if all(p.uncovered((key,)) is not None for p in applying)
        ]
        listed = "; ".join(
            f"{p.name} (spec.ports: {p.describe_ports()})" for p in applying[:POOLS_SHOWN]
        )
        if len(applying) > POOLS_SHOWN:
            listed += f" and {len(applying) - POOLS_SHOWN} more"
        if ungranted:
            protocol, port = ungranted[0]
            where = (
                f"NodeAddressPool {listed}"
                if len(applying) == 1
                else f"every NodeAddressPool that applies to this Service: {listed}"
            )
            reason = (
                f"port {port}/{protocol} is outside {where}: use a port of the pool, or ask"
                " an administrator for a pool that grants it"
            )
        else:
            protocol, port = applying[0].uncovered(service.ports) or service.ports[0]
            reason = (
                "no one NodeAddressPool grants every port of the Service (a Service uses one"
                f" pool): {listed}; split the ports over Services, or ask an administrator"
                " for a pool that grants them all"
            )
        return Choice(
            code=PORT_NOT_IN_POOL,
            reason=reason,
            port=(protocol, port),
            pool_name=applying[0].name,
        )

    def _no_pool_reason(self, namespace: str, in_namespace: Sequence[Pool]) -> str:
        """Why no pool applies to a Service of ``namespace``: the pools that allow the
        namespace but whose ``serviceSelectors`` leave the Service out, or that none
        allows the namespace (naming the invalid pools, which apply to nobody)."""
        if in_namespace:
            return (
                f"NodeAddressPool {_names(in_namespace)} applies to namespace {namespace}, but"
                " its spec.serviceAllocation.serviceSelectors match none of this Service's"
                " labels: label the Service as a pool selects, or ask an administrator for"
                " a pool"
            )
        broken = (
            f" ({len(self.invalid)} pool(s) are invalid and apply to nobody:"
            f" {_names(self.invalid)})"
            if self.invalid
            else ""
        )
        return (
            f"no NodeAddressPool applies to Services of namespace {namespace}"
            f" (spec.serviceAllocation of {len(self.pools)} pool(s)){broken}: ask an"
            " administrator for a pool"
        )


NO_POOL_SET = PoolSet()
