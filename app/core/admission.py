"""Admission decisions for Services (docs/design.md §7): pure, no HTTP, no Kubernetes client.

Input is the decoded AdmissionReview body (a plain dict), the
:class:`~app.core.options.SelectionSettings` and, when the live cache is synced, a
:class:`ClusterSnapshot`; output is a :class:`Decision` (allowed, denial message,
warnings, JSON Patch operations) and the AdmissionReview response dict built from it.

:func:`validate` is the validating webhook's one entry, which the route answers with and
the tests call; it chains three stages, each cheaper than the next (docs/design.md §7.1):
:func:`verdict` reads the request alone (the node selector, ``reserved-node-ports``,
``allowed-namespaces``); :func:`cluster_verdict` adds what the port index answers in a few
lookups (a port that is another Service's allocated ``nodePort``/``healthCheckNodePort``);
:func:`cluster_warnings` runs :func:`app.core.nodeipam.select` (memoised) and
:func:`app.core.ports.decide`, and is the only stage the route may skip when it runs out of
time (:func:`checks_skipped`). :func:`mutate` is the mutating webhook's. Port rules: docs/design.md
§4.9 (what the reconciler enforces) and §7 (what admission refuses or warns about).

Wire rules follow ``admission.k8s.io/v1`` (kubernetes/api ``admission/v1/types.go``) and
controller-runtime's webhook server (``pkg/webhook/admission``): the response echoes
``request.uid`` in an AdmissionReview of the same apiVersion/kind; a denial carries a
``metav1.Status`` with code 403 / reason ``Forbidden``; a patch is a base64 RFC 6902
JSON Patch. A body that is not an AdmissionReview raises :class:`ReviewError` (the route
answers HTTP 400).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.codes import NO_READY_ENDPOINT, NOT_IN_POOL, PORT_NOT_IN_POOL, SELECTOR_MISMATCH
from app.core.decision import Decider, NotMemoised, Outcome, Snapshot
from app.core.nodehealth import NO_UNHEALTHY
from app.core.nodeindex import node_index
from app.core.nodeipam import NodeIndex, is_managed
from app.core.options import SelectionSettings
from app.core.pools import NO_POOL_SET, NamespaceLabels, PoolSet
from app.core.ports import Conflict, PortKey, PortLookup
from app.core.selector import SelectorError, go_quote, parse_cached
from app.core.text import elide
from app.core.views import EndpointSliceView, NodeView, ServiceView, ViewError, service_view

ADMISSION_API_VERSION = "admission.k8s.io/v1"
ADMISSION_KIND = "AdmissionReview"
MAX_WARNING_CHARS = 120
"""kube-apiserver may truncate longer warnings (admission/v1 ``AdmissionResponse.warnings``)."""

_SERVICE_KIND = ("", "v1", "Service")
_CHECKED_OPERATIONS = ("CREATE", "UPDATE")

WELL_KNOWN_PORTS = {
    ("TCP", 22): "SSH",
    ("TCP", 179): "BGP (Calico, kube-router, MetalLB's FRR)",
    ("TCP", 2379): "etcd's client API",
    ("TCP", 2380): "etcd's peer API",
    ("UDP", 4789): "the VXLAN overlay (Calico, Antrea, OVN-Kubernetes)",
    ("TCP", 5001): "k3s' embedded registry",
    ("UDP", 6081): "the Geneve overlay (Cilium, Antrea, OVN-Kubernetes)",
    ("TCP", 6443): "the kube-apiserver",
    ("UDP", 8472): "the VXLAN overlay (flannel, k3s, Cilium)",
    ("TCP", 10250): "the kubelet API",
    ("TCP", 10256): "kube-proxy's health check",
    ("TCP", 10257): "the kube-controller-manager",
    ("TCP", 10259): "the kube-scheduler",
    ("UDP", 51820): "WireGuard (flannel, k3s, Calico)",
    ("UDP", 51821): "WireGuard over IPv6 (flannel, k3s)",
    ("UDP", 51871): "Cilium's WireGuard",
}
"""What a node serves on these ports, named in a reserved-port denial (Kubernetes "Ports
and Protocols", kubernetes.io/docs/reference/networking/ports-and-protocols/; k3s "Inbound
Rules for K3s Nodes"; the CNIs' tunnel and routing ports, which the kernel serves and no
Pod declares; 22 is OpenSSH's default; 10256 is kube-proxy's ``--healthz-bind-address``).
Another protocol on the same number gets no name."""
MAX_DENIED_PORTS = 5
"""Port errors a denial lists (then "and N more"), so a Service with thousands of ports
gets a message of bounded length."""
MAX_CONFLICT_WARNINGS = 3
"""Port-conflict warnings a review gets (then one "and N more" warning)."""
INLINE_OWNERSHIP_WORK = 2_000
"""Addresses :func:`app.core.ports.decide` may compare (the Service's candidates plus every
rival claimant's) for the check to run with ``memo_only`` (on the event loop): about 1 ms
(0.4 µs per address and rival). More raises ``NotMemoised`` and the review moves to a
thread, where the cluster checks' time budget bounds the wait (docs/design.md §7.1)."""


class ReviewError(ValueError):
    """The body is not a usable AdmissionReview; ``str(err)`` names the field and the reason."""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of ``AdmissionReview.request`` the decisions read.

    ``object``/``old_object`` are the raw Service dicts (``None`` when the review does not
    concern a Service CREATE/UPDATE, which is allowed untouched).
    """

    uid: str
    operation: str
    namespace: str
    name: str
    is_service: bool
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None
    dry_run: bool

    @property
    def checked(self) -> bool:
        """True for a Service CREATE or UPDATE: the only requests we decide on (§7)."""
        return self.is_service and self.operation in _CHECKED_OPERATIONS


def _no_namespace(namespace: str) -> Mapping[str, str] | None:
    return None


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """What the live cache holds now, for the cluster-state warnings.

    ``endpoint_slices`` are the Service's own (namespace + ``kubernetes.io/service-name``);
    ``now`` is epoch seconds (the NotReady grace period of §4 is measured against it).
    ``nodes`` is the cache's Node snapshot, preferably its :class:`NodeIndex` (memoised
    selector matches); with ``memo`` it must be the snapshot object itself, never a copy.
    """

    nodes: Sequence[NodeView] | NodeIndex
    endpoint_slices: Sequence[EndpointSliceView]
    now: float
    memo: Decider | None = None
    """The decision path (the webhook's, kept across requests: same inputs, same
    warnings); ``None`` or one for other settings: a new one per review."""
    memo_only: bool = False
    """With ``memo``: raise :class:`~app.core.decision.NotMemoised` instead of calling
    ``select`` (the route answers memo hits on the event loop, the rest in the thread pool),
    or when the port-conflict check would compare more than :data:`INLINE_OWNERSHIP_WORK`
    addresses."""
    ports: PortLookup | None = None
    """The cluster's port index (``ClusterCache``); ``None``: no port checks against other
    objects (the node-port denial, the port-conflict warnings)."""
    endpoint_slices_of: Callable[[str, str], Sequence[EndpointSliceView]] | None = None
    """The EndpointSlices of another Service by namespace and name, for the candidates of a
    rival claimant with ``externalTrafficPolicy: Local``; ``None``: no slices (such a rival
    then claims no address)."""
    unhealthy: Mapping[str, str] = field(default_factory=lambda: NO_UNHEALTHY)
    """The health view the reconciler decides with (docs/design.md §4.11: node name ->
    why; the leader's, empty on a follower or with health checks off): the warnings name
    the nodes the Service would really get, as the REST preview does."""
    pools: PoolSet = NO_POOL_SET
    """Every NodeAddressPool (docs/design.md §4.13; the cache's, by identity)."""
    namespace_labels: NamespaceLabels | None = None
    """A namespace's labels by name (what pools' ``namespaceSelectors`` match)."""

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, NodeIndex):  # one index per snapshot, not per check
            object.__setattr__(self, "nodes", NodeIndex(self.nodes))

    def decision(self, view: ServiceView, settings: SelectionSettings) -> tuple[Decider, Snapshot]:
        """The :class:`~app.core.decision.Decider` and
        :class:`~app.core.decision.Snapshot` the warnings of ``view`` decide with: the
        reviewed Service's EndpointSlices are :attr:`endpoint_slices`, another's come from
        :attr:`endpoint_slices_of`."""
        decider = self.memo
        if decider is None or (decider.settings is not settings and decider.settings != settings):
            decider = Decider(settings)
        own, others = (view.namespace, view.name), self.endpoint_slices_of

        def slices_of(namespace: str, name: str) -> Sequence[EndpointSliceView]:
            if (namespace, name) == own:
                return self.endpoint_slices
            return others(namespace, name) if others is not None else ()

        snap = Snapshot(
            nodes=node_index(self.nodes),  # a NodeIndex since __post_init__
            now=self.now,
            ports=self.ports,
            endpoint_slices_of=slices_of,
            unhealthy=self.unhealthy,
            pools=self.pools,
            namespace_labels=self.namespace_labels or _no_namespace,
        )
        return decider, snap


@dataclass(frozen=True, slots=True)
class Subject:
    """A managed Service under review, as the port checks read it (from :func:`verdict`).

    ``view`` is its :class:`~app.core.views.ServiceView`; ``ports`` its ``spec.ports`` as
    ``(index, protocol, port)``, each ``(protocol, port)`` once at its first index (protocol
    defaulted to TCP, as :attr:`ServiceView.ports`); ``ratcheted`` the ``(protocol, port)``
    pairs of ``oldObject`` when that was a managed Service too (an UPDATE): a port rule
    broken by one of them only warns (validation ratcheting, KEP-4008); ``named`` is false
    for a ``generateName`` Service (no name yet). Small and picklable: it travels back from
    the review process (docs/design.md §7.1)."""

    view: ServiceView
    ports: tuple[tuple[int, str, int], ...] = ()
    ratcheted: frozenset[PortKey] = frozenset()
    named: bool = True


@dataclass(frozen=True, slots=True)
class Decision:
    """One admission verdict: ``patch`` holds RFC 6902 operations, empty for no patch."""

    allowed: bool = True
    message: str | None = None
    warnings: tuple[str, ...] = ()
    patch: tuple[Mapping[str, Any], ...] = ()

    @property
    def verdict(self) -> str:
        """``denied``, ``patched`` or ``allowed``: the metrics label."""
        if not self.allowed:
            return "denied"
        return "patched" if self.patch else "allowed"


def parse_review(body: object) -> AdmissionRequest:
    """Check the structure of a decoded AdmissionReview and extract its request.

    Args:
        body: the JSON-decoded request body.

    Raises:
        ReviewError: wrong ``apiVersion``/``kind``, ``request`` or ``request.uid`` missing,
            or a Service CREATE/UPDATE whose ``object`` (or, on UPDATE, ``oldObject``) is
            not a Service. Reviews of other kinds and operations are valid and are
            allowed untouched (§7).
    """
    if not isinstance(body, Mapping):
        raise ReviewError(f"body: Invalid value: a JSON {_json_type(body)}: must be an object")
    if body.get("apiVersion") != ADMISSION_API_VERSION or body.get("kind") != ADMISSION_KIND:
        raise ReviewError(
            f"apiVersion/kind: Unsupported value: {body.get('apiVersion')!r}/{body.get('kind')!r}:"
            f" supported value: {ADMISSION_API_VERSION}/{ADMISSION_KIND}"
        )
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise ReviewError("request: Required value: must be an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid: Required value: must be a non-empty string")
    operation = request.get("operation")
    if not isinstance(operation, str) or not operation:
        raise ReviewError("request.operation: Required value: must be a non-empty string")
    kind = request.get("kind")
    if not isinstance(kind, Mapping):
        raise ReviewError("request.kind: Required value: must be an object")
    is_service = (kind.get("group"), kind.get("version"), kind.get("kind")) == _SERVICE_KIND
    namespace = _optional_str(request, "namespace")
    name = _optional_str(request, "name")
    request_object: Mapping[str, Any] | None = None
    old_object: Mapping[str, Any] | None = None
    if is_service and operation in _CHECKED_OPERATIONS:
        request_object = _service_object(request.get("object"), field="request.object")
        if operation == "UPDATE":
            old_object = _service_object(request.get("oldObject"), field="request.oldObject")
        metadata = request_object.get("metadata") or {}
        namespace = namespace or _optional_str(metadata, "namespace") or "default"
        name = name or _optional_str(metadata, "name") or _optional_str(metadata, "generateName")
    return AdmissionRequest(
        uid=uid,
        operation=operation,
        namespace=namespace,
        name=name,
        is_service=is_service,
        object=request_object,
        old_object=old_object,
        dry_run=request.get("dryRun") is True,
    )


def validate(
    request: AdmissionRequest,
    *,
    settings: SelectionSettings,
    snapshot: ClusterSnapshot | None,
    publish: Callable[[Decision], None] | None = None,
    prejudged: tuple[Decision, Subject | None] | None = None,
) -> Decision:
    """The validating webhook's decision for one request (docs/design.md §7): the one
    admission pipeline, which the route answers with and the tests call. Its stages, each
    cheaper than the next: :func:`verdict` (the request alone), :func:`cluster_verdict`
    (the node-port rule), ``publish``, :func:`cluster_warnings`.

    Denies, in Kubernetes field-error form (``field.Invalid``/``field.Forbidden`` as
    apimachinery renders them; several as an aggregate ``[e1, e2]``): a malformed node
    selector annotation on a managed Service (§3; on any other Service it is a warning,
    and an UPDATE that makes a Service managed with one is denied); a managed Service
    with a port in ``reserved-node-ports`` that
    ``reserved-port-exceptions`` does not grant it; and, only when ``snapshot`` has the
    port index (cache synced), a managed Service with a port that another Service holds as
    its allocated ``nodePort`` or ``healthCheckNodePort`` (docs/design.md §4.9: kube-proxy
    captures ``nodeIP:port`` of every address we publish, so such a Service could not be
    published anywhere). On UPDATE each of these is only a warning when the offending value
    was already in ``oldObject`` and ``oldObject`` was managed too (validation
    ratcheting, KEP-4008), so a Service stored before the rule can still be edited or
    finalized.

    Warns (each ≤ 120 characters) about: an empty selector (all nodes); the annotation,
    valid or not, on a Service we do not manage (§3); a managed Service in a namespace that
    ``allowed-namespaces`` leaves out (it gets no node address; its ports are then not
    checked); and, only when ``snapshot`` is given, a selector matching no node now,
    ``externalTrafficPolicy: Local`` with no ready endpoint now, and addresses the Service
    would lose to another Service's ingress or ``spec.externalIPs`` or to a
    ``hostNetwork`` Pod on the same port (:func:`app.core.ports.decide`). The selection
    warnings read the verdicts of the one selection function
    (:func:`app.core.nodeipam.select`).

    Args:
        request: the parsed review (:func:`parse_review`).
        settings: the selection settings the reconciler runs with.
        snapshot: the live cache (``None`` while it is not synced: the verdict from the
            request alone, no node-port rule and no cluster-state warnings).
        publish: called once, in the calling thread, with the allowed verdict (the node-port
            rule included, the cluster-state warnings not yet) before those warnings are
            computed, so the route can answer with it when their time budget runs out
            (docs/design.md §7.1); not called for a denial or without cluster checks.
        prejudged: what :func:`verdict` returned for ``request``, computed apart (the
            route's worker process decodes a large body and returns it with the request
            stripped of its objects); ``None``: computed here.

    Returns:
        The :class:`Decision`: allowed or denied (403 message), warnings in stage order.

    Raises:
        ReviewError: the Service cannot be read (a field of the wrong type).
        NotMemoised: ``snapshot.memo_only`` and a cluster check is not memoised (the
            route then decides in a thread; ``publish`` may have been called).
    """
    if prejudged is None:
        prejudged = verdict(request, settings=settings)
    decision, subject = prejudged
    if subject is None or snapshot is None or not decision.allowed:
        return decision
    decision = cluster_verdict(decision, subject, settings=settings, snapshot=snapshot)
    if not decision.allowed:
        return decision
    if publish is not None:
        publish(decision)
    return with_warnings(decision, cluster_warnings(subject, settings=settings, snapshot=snapshot))


def verdict(
    request: AdmissionRequest, *, settings: SelectionSettings
) -> tuple[Decision, Subject | None]:
    """:func:`validate` from the request alone: the node selector, the reserved ports and
    the allowed namespaces (docs/design.md §7, §4.9), with the warnings that need no
    cluster state, plus the :class:`Subject` when the cluster checks apply to it (an
    allowed, managed Service not being deleted), else ``None``.

    Cheap: parses the annotation and reads the Service; never looks at Nodes or at other
    Services. The route answers with it alone when the cluster checks run out of time
    (§7.1).

    Raises:
        ReviewError: the Service cannot be read (a field of the wrong type).
    """
    if not request.checked or request.object is None:
        return Decision(), None
    key = settings.match_node_labels_annotation
    value = _annotation(request.object, key, field="request.object")
    view = _view(request, key=key)
    empty_selector = False
    if value is not None:
        try:
            empty_selector = parse_cached(value).empty()
        except SelectorError as err:
            return _malformed_selector(request, view, settings, value=value, error=err), None
    if view.deleting:  # finalizer removal: nothing to warn about any more
        return Decision(), None
    managed, why = is_managed(view, settings)
    warnings: list[str] = []
    if value is not None and not managed:
        # The parenthesised detail of is_managed's reason would overflow 120 characters.
        warnings.append(_short(f"{key} is ignored: {why.split(' (')[0]}"))
    if managed and empty_selector:
        warnings.append(_short(f"{key} is empty: it selects every eligible node"))
    if not managed:
        return Decision(warnings=tuple(warnings)), None
    subject = _subject(request, view, settings)
    if not _namespace_allowed(view, settings):
        warnings.append(
            _short(
                f"the Service gets no node address: namespace {view.namespace} is not in"
                " the setting allowed-namespaces"
            )
        )
        return Decision(warnings=tuple(warnings)), subject
    errors: list[str] = []
    for index, protocol, port in subject.ports:
        if settings.ports.reserved_range(view, protocol, port) is None:
            continue
        if (protocol, port) in subject.ratcheted:
            warnings.append(
                _short(
                    f"spec.ports[{index}].port {port}/{protocol} is reserved for the node"
                    " (unchanged): the Service gets no node address"
                )
            )
        else:
            errors.append(_reserved_error(subject, index, protocol, port))
    if errors:
        return Decision(allowed=False, message=_aggregate(errors)), None
    return Decision(warnings=tuple(warnings)), subject


def _malformed_selector(
    request: AdmissionRequest,
    view: ServiceView,
    settings: SelectionSettings,
    *,
    value: str,
    error: SelectorError,
) -> Decision:
    """The decision on a node selector annotation that does not parse (docs/design.md §7).

    A Service we manage (§3) is denied in field-error form: the reconciler could not
    select its nodes. One we do not manage (another ``spec.type`` or
    ``loadBalancerClass``, or being deleted) is admitted with a warning: the annotation is
    ignored there, as a valid one is, and another controller's Service is not ours to
    refuse. On UPDATE the malformed value ratchets (KEP-4008) only when the old object
    already had it *and was ours*, as the port rules do: an UPDATE that makes a Service
    ours (``type`` switched to LoadBalancer, or the class set) with a malformed value is
    denied even when the value is unchanged, since it was only ever admitted as ignored.
    """
    key = settings.match_node_labels_annotation
    managed, why = is_managed(view, settings)
    if view.deleting:  # finalizer removal: nothing to warn about any more
        return Decision()
    if not managed:
        # The parenthesised detail of is_managed's reason would overflow 120 characters.
        ignored = _short(f"{key} is ignored: {why.split(' (')[0]}")
        return Decision(warnings=(ignored, _short(f"{key} is invalid: {error}")))
    if request.operation == "UPDATE" and request.old_object is not None:
        old_value = _annotation(request.old_object, key, field="request.oldObject")
        if old_value == value and _was_managed(request, settings):
            return Decision(warnings=(_short(f"{key} is invalid (unchanged): {error}"),))
    message = f"metadata.annotations[{key}]: Invalid value: {go_quote(elide(value))}: {error}"
    return Decision(allowed=False, message=message)


def _was_managed(request: AdmissionRequest, settings: SelectionSettings) -> bool:
    """True when the request's ``oldObject`` (an UPDATE's) was a Service we manage; an
    absent or unreadable old object was not (it ratchets nothing)."""
    if request.old_object is None:
        return False
    try:
        old = _object_view(request, request.old_object, key=settings.match_node_labels_annotation)
    except ViewError:
        return False
    return is_managed(old, settings)[0]


def cluster_verdict(
    decision: Decision,
    subject: Subject,
    *,
    settings: SelectionSettings,
    snapshot: ClusterSnapshot,
) -> Decision:
    """``decision`` (from :func:`verdict`) after the node-port rule (docs/design.md §7,
    §4.9): a managed Service's port that another Service holds, same protocol, as an
    allocated ``spec.ports[*].nodePort`` or ``spec.healthCheckNodePort`` (TCP) is denied,
    naming that Service and its field; on UPDATE, a port already in ``oldObject`` only
    warns (KEP-4008 ratcheting). kube-proxy opens a nodePort on every node address, so
    publishing the same port there would capture it on every selected node.

    Cheap (one port-index lookup per port, no ``select``): part of the verdict, never
    skipped for time. Without ``snapshot.ports``, in a namespace ``allowed-namespaces``
    leaves out (no address is published), or for a denied ``decision``: ``decision`` as
    it is. Never raises on content.
    """
    view = subject.view
    if decision.allowed and snapshot.pools and _namespace_allowed(view, settings):
        decision = _pool_verdict(decision, subject, snapshot)
    lookup = snapshot.ports
    if not decision.allowed or lookup is None or not _namespace_allowed(view, settings):
        return decision
    me = (view.namespace, view.name)
    errors: list[str] = []
    warnings: list[str] = []
    for index, protocol, port in subject.ports:
        if settings.ports.reserved_range(view, protocol, port) is not None:
            continue  # the verdict's rule (denied, or ratcheted with its warning)
        holders = [
            (other, kind)
            for other, kind in lookup.node_port_holders((protocol, port))
            if (other.namespace, other.name) != me
        ]
        if not holders:
            continue
        other, kind = min(holders, key=lambda h: (h[0].namespace, h[0].name))
        owner = f"Service {other.namespace}/{other.name}"
        if (protocol, port) in subject.ratcheted:
            short = "the healthCheckNodePort" if kind == "HealthCheckNodePort" else "a nodePort"
            warnings.append(
                _short(
                    f"spec.ports[{index}].port {port}/{protocol} is {short} of {owner}"
                    " (unchanged): the Service gets no node address"
                )
            )
            continue
        what = (
            "the healthCheckNodePort (spec.healthCheckNodePort)"
            if kind == "HealthCheckNodePort"
            else "a nodePort (spec.ports[*].nodePort)"
        )
        errors.append(
            f"spec.ports[{index}].port: Forbidden: {port}/{protocol} is allocated as {what}"
            f" of {owner}, which kube-proxy opens on every node address; publishing it on"
            " node addresses would capture that port of every selected node"
        )
    if errors:
        return Decision(allowed=False, message=_aggregate(errors))
    return with_warnings(decision, warnings)


def _pool_verdict(decision: Decision, subject: Subject, snapshot: ClusterSnapshot) -> Decision:
    """The NodeAddressPool rule (docs/design.md §4.13) on an allowed ``decision``: a port
    outside every pool that applies to the Service is denied, naming the pool and its
    ports (on UPDATE, a port already in ``oldObject`` only warns, KEP-4008 ratcheting); a
    Service no pool applies to is warned that it gets no address (as for
    ``allowed-namespaces``). The reconciler enforces both when the webhook is bypassed."""
    labels = snapshot.namespace_labels or _no_namespace
    view = subject.view
    choice = snapshot.pools.choose(view, labels)
    if not choice.refused:
        return decision
    if choice.code != PORT_NOT_IN_POOL:
        return with_warnings(
            decision, [_short(f"the Service gets no node address: {choice.summary}")]
        )
    # Validation ratcheting (KEP-4008): the ports oldObject already had do not decide;
    # the Service is denied when its new ports alone fit no pool.
    fresh = tuple(key for key in view.ports if key not in subject.ratcheted)
    judged = snapshot.pools.choose(dataclasses.replace(view, ports=fresh), labels)
    if judged.code == PORT_NOT_IN_POOL and judged.port is not None:
        index = next(
            (i for i, protocol, port in subject.ports if (protocol, port) == judged.port), 0
        )
        return Decision(
            allowed=False, message=f"spec.ports[{index}].port: Forbidden: {judged.reason}"
        )
    warning = (
        f"ports outside NodeAddressPool {choice.pool_name} (unchanged): the Service gets no"
        " node address"
    )
    return with_warnings(decision, [_short(warning)])


def cluster_warnings(
    subject: Subject, *, settings: SelectionSettings, snapshot: ClusterSnapshot
) -> tuple[str, ...]:
    """The cluster-state warnings of :func:`validate` for a managed Service (the
    :class:`Subject` from :func:`verdict`): selector matching no node now, Local with no
    ready endpoint (from ``select``, memoised in ``snapshot.memo``), then the addresses it
    would lose to another holder of one of its ports (docs/design.md §4.9, from
    :func:`app.core.ports.decide` on ``snapshot.ports``).

    The port check costs nothing when no other object holds any of the Service's ports;
    otherwise one memoised ``select`` for the Service and one per distinct selection of
    the other managed Services with one of its ports (Services with equal selection
    inputs share one, as in the reconciler), then ``decide``: work grows with the
    Services sharing a port, never with all Services.

    Raises:
        NotMemoised: ``snapshot.memo_only`` and a ``select`` it needs is not memoised, or
            the port check would compare more than :data:`INLINE_OWNERSHIP_WORK` addresses.
    """
    warnings = _cluster_warnings(subject.view, settings=settings, snapshot=snapshot)
    return warnings + _ownership_warnings(subject, settings=settings, snapshot=snapshot)


def with_warnings(decision: Decision, warnings: Sequence[str]) -> Decision:
    """``decision`` with ``warnings`` appended (in order)."""
    if not warnings:
        return decision
    return dataclasses.replace(decision, warnings=decision.warnings + tuple(warnings))


def checks_skipped(decision: Decision, *, budget_seconds: float) -> Decision:
    """``decision`` (the verdict :func:`validate` published) with the one warning that
    stands for the cluster-state warnings when they did not finish within
    ``budget_seconds`` (seconds; the setting ``cluster-check-seconds``): the route answers
    with it and lets the check finish into the memo (docs/design.md §7.1)."""
    return with_warnings(
        decision,
        [
            "cluster checks skipped (selector match, ready endpoints, port conflicts):"
            f" not done in {budget_seconds * 1000:.0f} ms"
        ],
    )


def node_selector(request: AdmissionRequest, *, settings: SelectionSettings) -> str | None:
    """The node selector annotation of the request's Service (``None`` without one).

    Raises:
        ReviewError: the annotation is not a string.
    """
    if request.object is None:
        return None
    key = settings.match_node_labels_annotation
    return _annotation(request.object, key, field="request.object")


def mutate(request: AdmissionRequest, *, settings: SelectionSettings) -> Decision:
    """The mutating webhook's decision: default ``spec.loadBalancerClass`` (docs/design.md §7).

    Adds ``spec.loadBalancerClass = settings.load_balancer_class`` only when
    ``default_lb_service_ipam`` is ``nodeipam`` and the Service is a class-less
    ``LoadBalancer`` on CREATE, or on the UPDATE that switches ``type`` to LoadBalancer:
    the API server forbids setting the class at any other time (KEP-1959,
    ``validateLoadBalancerClassField``). Idempotent, so ``reinvocationPolicy: IfNeeded``
    is safe. Everything else is allowed without a patch.
    """
    if settings.default_lb_service_ipam != "nodeipam" or not request.checked:
        return Decision()
    spec = _spec(request.object)
    if spec.get("type") != "LoadBalancer" or spec.get("loadBalancerClass") is not None:
        return Decision()
    if request.operation == "UPDATE" and _spec(request.old_object).get("type") == "LoadBalancer":
        return Decision()
    op = {
        "op": "add",
        "path": json_pointer("spec", "loadBalancerClass"),
        "value": settings.load_balancer_class,
    }
    return Decision(patch=(op,))


def review_response(request: AdmissionRequest, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview v1 response body for ``decision`` (echoes ``request.uid``)."""
    response: dict[str, Any] = {"uid": request.uid, "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {
            "code": 403,
            "reason": "Forbidden",
            "message": decision.message or "denied",
        }
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    if decision.patch:
        patch = json.dumps(list(decision.patch), separators=(",", ":")).encode()
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(patch).decode("ascii")
    return {"apiVersion": ADMISSION_API_VERSION, "kind": ADMISSION_KIND, "response": response}


def json_pointer(*tokens: str) -> str:
    """RFC 6901 JSON Pointer for ``tokens``: ``~`` becomes ``~0``, ``/`` becomes ``~1``."""
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


def _cluster_warnings(
    view: ServiceView, *, settings: SelectionSettings, snapshot: ClusterSnapshot
) -> tuple[str, ...]:
    """The warnings read from the Service's :class:`~app.core.decision.Outcome` (the
    verdicts of the one selection function, :func:`app.core.nodeipam.select`)."""
    decider, snap = snapshot.decision(view, settings)
    outcome = decider.outcome(view, snap, compute=not snapshot.memo_only)
    return _selection_warnings(view, settings, outcome)


def _selection_warnings(
    view: ServiceView, settings: SelectionSettings, outcome: Outcome
) -> tuple[str, ...]:
    """The cluster-state warnings read from an outcome that selects no Node (its
    ``dropped`` verdict codes; none in a cluster without Nodes)."""
    if outcome.error is not None or outcome.ingress:
        return ()
    key = settings.match_node_labels_annotation
    codes = outcome.dropped
    if view.match_node_labels and codes <= {SELECTOR_MISMATCH}:
        return (_short(f"{key} matches no node now: the Service gets no ingress"),)
    if codes and codes <= {SELECTOR_MISMATCH, NOT_IN_POOL}:
        return (
            _short(
                f"{key} matches no node of its NodeAddressPool now: the Service gets no ingress"
            ),
        )
    if view.external_traffic_policy == "Local" and NO_READY_ENDPOINT in codes:
        return (_short("externalTrafficPolicy is Local and no node has a ready endpoint now"),)
    return ()


def _namespace_allowed(view: ServiceView, settings: SelectionSettings) -> bool:
    namespaces = settings.ports.namespaces
    return namespaces is None or view.namespace in namespaces


def _subject(request: AdmissionRequest, view: ServiceView, settings: SelectionSettings) -> Subject:
    """The :class:`Subject` of a managed Service's review; ``ratcheted`` holds the old
    object's ports only when the old object was managed too: a Service that becomes ours
    in this UPDATE (``type`` switched to LoadBalancer) never published them."""
    assert request.object is not None
    ratcheted: frozenset[PortKey] = frozenset()
    old_object = request.old_object
    if request.operation == "UPDATE" and old_object is not None and _was_managed(request, settings):
        ratcheted = frozenset((p, n) for _, p, n in _spec_ports(old_object))
    metadata = request.object.get("metadata") or {}
    named = isinstance(metadata.get("name"), str) and bool(metadata.get("name"))
    return Subject(view=view, ports=_spec_ports(request.object), ratcheted=ratcheted, named=named)


def _spec_ports(obj: Mapping[str, Any]) -> tuple[tuple[int, str, int], ...]:
    """``(index, protocol, port)`` of ``spec.ports``, each ``(protocol, port)`` once at its
    first index; read as :func:`app.core.views.service_view` reads them (protocol defaulted
    to TCP, a port outside 1-65535 ignored), but never raising: entries of the wrong type
    are skipped."""
    ports = _spec(obj).get("ports")
    if not isinstance(ports, list):
        return ()
    first: dict[PortKey, int] = {}
    for index, entry in enumerate(ports):
        if not isinstance(entry, Mapping):
            continue
        protocol = entry.get("protocol")
        protocol = protocol if isinstance(protocol, str) and protocol else "TCP"
        port = entry.get("port")
        if isinstance(port, float) and port.is_integer():
            port = int(port)
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            continue
        first.setdefault((protocol, port), index)
    return tuple((index, protocol, port) for (protocol, port), index in first.items())


def _reserved_error(subject: Subject, index: int, protocol: str, port: int) -> str:
    view = subject.view
    name = WELL_KNOWN_PORTS.get((protocol, port))
    what = f" ({name})" if name else ""
    who = f"{view.namespace}/{view.name if subject.named else 'NAME'}"
    return (
        f"spec.ports[{index}].port: Forbidden: {port}/{protocol} is reserved for the node"
        f" itself{what}; publishing it on node addresses would capture that port of every"
        " selected node (setting reserved-node-ports; an administrator can grant it with"
        f" reserved-port-exceptions={who}:{port})"
    )


def _aggregate(errors: Sequence[str]) -> str:
    """One error as it is, several as apimachinery's ``ErrorList.ToAggregate()`` prints
    them (``[e1, e2]``), at most :data:`MAX_DENIED_PORTS` and then how many more."""
    if len(errors) == 1:
        return errors[0]
    shown = list(errors[:MAX_DENIED_PORTS])
    if len(errors) > MAX_DENIED_PORTS:
        shown.append(f"and {len(errors) - MAX_DENIED_PORTS} more")
    return "[" + ", ".join(shown) + "]"


def _ownership_warnings(
    subject: Subject, *, settings: SelectionSettings, snapshot: ClusterSnapshot
) -> tuple[str, ...]:
    """The addresses the Service would lose to another holder of one of its ports (see
    :func:`cluster_warnings`)."""
    view = subject.view
    lookup = snapshot.ports
    if lookup is None or not view.ports or not _namespace_allowed(view, settings):
        return ()
    me = (view.namespace, view.name)
    rivals: dict[tuple[str, str], ServiceView] = {}
    contested = False
    for port in view.ports:
        if settings.ports.reserved_range(view, *port) is not None or any(
            (other.namespace, other.name) != me for other, _ in lookup.node_port_holders(port)
        ):
            return ()  # no address at all: the verdict said why (denied or ratcheted)
        for other in lookup.claimants(port):
            if (other.namespace, other.name) != me:
                rivals[other.namespace, other.name] = other
        contested = contested or any(
            (other.namespace, other.name) != me for other, _ in lookup.fixed(port)
        )
        contested = contested or bool(lookup.pods(port))
    if not rivals and not contested:
        return ()  # nothing else holds these ports: no select needed
    decider, snap = snapshot.decision(view, settings)
    compute = not snapshot.memo_only
    candidates = decider.candidates(view, snap, compute=compute)
    if not candidates:
        return ()
    work = len(candidates) + sum(
        len(decider.candidates(other, snap, compute=compute)) for other in rivals.values()
    )
    if snapshot.memo_only and work > INLINE_OWNERSHIP_WORK:
        raise NotMemoised(f"port check compares {work} addresses: not on the event loop")
    node_of = snap.nodes.node_of
    ownership = decider.ownership(view, candidates, snap, compute=compute)
    conflicts = [c for c in ownership.conflicts if c.addresses]
    out = [_conflict_warning(c, len(candidates), node_of) for c in conflicts]
    if len(out) > MAX_CONFLICT_WARNINGS:
        more = len(out) - MAX_CONFLICT_WARNINGS
        out = [*out[:MAX_CONFLICT_WARNINGS], f"and {more} more port conflict(s)"]
    if ownership.lost and len(ownership.lost) >= len(set(candidates)):
        out.append(
            "no node address left: use another port, or a node selector that avoids the holders"
        )
    return tuple(out)


def _conflict_warning(conflict: Conflict, total: int, node_of: Callable[[str], str | None]) -> str:
    count = len(conflict.addresses)
    nodes = len({node_of(a) for a in conflict.addresses} - {None})
    holder = conflict.holder
    template = _HOLDERS.get(holder.kind, holder.kind + " {}")
    return _short(
        f"{conflict.protocol}/{conflict.port}: loses {count} of {total} node addresses"
        f" ({nodes} node{'' if nodes == 1 else 's'}) to"
        f" {template.format(f'{holder.namespace}/{holder.name}')}"
        + (f" ({holder.detail})" if holder.detail else "")
    )


_HOLDERS = {
    "Service": "Service {} (same class, publishes it first)",
    "LoadBalancer": "the load-balancer ingress of Service {}",
    "ExternalIP": "spec.externalIPs of Service {}",
    "Pod": "hostNetwork Pod {}",
    "HostPortPod": "hostPort Pod {}",
}
"""How a port-conflict warning names what takes the addresses, by
:class:`app.core.ports.Holder` kind (the kinds that take some addresses, not all; a
``Service`` of our class takes an address it already publishes, or claims as the older
Service, docs/design.md §4.9)."""


def _view(request: AdmissionRequest, *, key: str) -> ServiceView:
    assert request.object is not None
    try:
        return _object_view(request, request.object, key=key)
    except ViewError as err:
        raise ReviewError(f"request.object: {err}") from err


def _object_view(request: AdmissionRequest, value: Mapping[str, Any], *, key: str) -> ServiceView:
    """The view of ``value`` (the request's object or old object).

    Raises:
        ViewError: a field of the wrong type.
    """
    obj = dict(value)
    metadata = dict(obj.get("metadata") or {})
    # generateName Services have no name yet and the namespace may come only from the request.
    metadata.setdefault("namespace", request.namespace)
    metadata["name"] = metadata.get("name") or request.name or "(generated)"
    obj["metadata"] = metadata
    return service_view(obj, match_node_labels_annotation=key)


def _service_object(value: object, *, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ReviewError(f"{field}: Required value: must be a Service object")
    if value.get("kind", "Service") != "Service" or value.get("apiVersion", "v1") != "v1":
        raise ReviewError(
            f"{field}: Invalid value: {value.get('apiVersion')!r}/{value.get('kind')!r}:"
            " must be a v1 Service"
        )
    for part in ("metadata", "spec"):
        if value.get(part) is not None and not isinstance(value.get(part), Mapping):
            raise ReviewError(f"{field}.{part}: Invalid value: must be an object")
    annotations = (value.get("metadata") or {}).get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        raise ReviewError(f"{field}.metadata.annotations: Invalid value: must be an object")
    return value


def _annotation(obj: Mapping[str, Any], key: str, *, field: str) -> str | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    if value is not None and not isinstance(value, str):
        raise ReviewError(f"{field}.metadata.annotations[{key}]: Invalid value: must be a string")
    return value


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = (obj or {}).get("spec") or {}
    return spec if isinstance(spec, Mapping) else {}


def _optional_str(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def _json_type(value: object) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _short(text: str) -> str:
    """Cut a warning to the 120 characters the API server keeps intact, in the middle
    (:func:`app.core.text.elide`), so its end, the reason, stays."""
    return elide(text, MAX_WARNING_CHARS)
