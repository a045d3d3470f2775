"""Read cluster dumps: what ``kubectl get nodes,services,endpointslices -A -o yaml|json`` prints,
and ``kubectl get pods -A -o yaml|json``.

Accepted: a ``v1`` ``List`` (or ``NodeList``-style typed list), multi-document YAML, JSON,
single objects, any mix across several files; ``-`` is standard input. ``v1`` Pods are
kept when they hold a node port (:func:`holds_node_ports`: a ``hostNetwork: true`` Pod's
``containerPort``, any other Pod's ``hostPort`` block their node's addresses,
docs/design.md §4.9; what the controller's Pod informer keeps); other Pods, and objects
of other kinds or API groups (a Knative
``serving.knative.dev/v1`` Service), are skipped, except kubeadm's ConfigMap
``kube-system/kube-proxy`` (kube-proxy's mode, docs/design.md §4.10), which is kept as it
is (nothing of it is read until :func:`app.core.kubeproxy.proxy_mode` reads its mode,
never raising), and Cilium's ConfigMap ``kube-system/cilium-config`` and its agent Pods'
images (docs/design.md §4.12, read by :func:`app.core.ciliumkpr.assess`, never raising).

What counts as **unusable input** (:class:`DumpError`, exit code 2 in
``node-ipam-lb preview``): a file that cannot be read, text that is neither YAML nor JSON,
a document or ``items`` entry that is not a Kubernetes object (no ``kind``), a List whose
``items`` is not a list, and a Node/Service/EndpointSlice/Pod that cannot be projected
(:class:`app.core.views.ViewError`: no ``metadata.name``, a field of the wrong JSON type).
Garbage *content* is not unusable: a Node address that is not an IP is dropped and
reported in that Node's verdicts, and a malformed selector annotation is that Service's
``error``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.core import ciliumkpr
from app.core.kubeproxy import CONFIG_MAP
from app.core.options import MATCH_NODE_LABELS_ANNOTATION
from app.core.pools import API_VERSION as POOL_API_VERSION
from app.core.pools import NO_POOL_SET, PoolSet, pool_from_object
from app.core.views import (
    EndpointSliceView,
    NodeView,
    PodView,
    ServiceView,
    ViewError,
    endpoint_slice_view,
    namespace_view,
    node_view,
    pod_view,
    service_view,
)

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_OBJECTS = 1_000_000
"""Most Kubernetes objects one ``load_dump`` call reads, kept or not (a 5,000-node cluster
has ~50,000 Nodes, Services and EndpointSlices, and up to 150,000 Pods)."""
_LONG_INTEGER = re.compile(rf"\d{{{sys.get_int_max_str_digits() + 1},}}")
"""An integer literal longer than Python converts (``sys.get_int_max_str_digits()``)."""
_SURROGATE_HINT = re.compile(r"\\u[dD][89a-fA-F]|\\U0000[dD][89a-fA-F]|[\ud800-\udfff]")


class _NoAliasLoader(_BaseLoader):  # type: ignore[misc,valid-type]
    """Safe loader (libyaml's when available) that refuses YAML aliases.

    ``kubectl -o yaml`` never writes anchors or aliases; refusing them keeps loading linear
    in the input size ("billion laughs": nested aliases expand to 10^9 items). An alias is
    the second construction of one node, caught before anything is expanded.
    """

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        if node in self.constructed_objects or node in self.recursive_objects:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                "anchor (&name) used by an alias (*name): YAML anchors and aliases are not"
                " accepted",
                node.start_mark,
            )
        try:
            return super().construct_object(node, deep=deep)
        except ValueError as err:  # a scalar Python cannot convert: named with its place
            if isinstance(node, yaml.ScalarNode) and _LONG_INTEGER.fullmatch(
                node.value.lstrip("+-").replace("_", "")
            ):
                problem = _digits_problem(len(node.value.lstrip("+-").replace("_", "")))
            else:
                problem = f"{node.value[:40]!r}: {err}"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None


# kind -> (Dump attribute, accepted apiVersions; a missing apiVersion is accepted too).
_KINDS = {
    "Node": ("nodes", ("v1",)),
    "Service": ("services", ("v1",)),
    "EndpointSlice": ("endpoint_slices", ("discovery.k8s.io/v1", "discovery.k8s.io/v1beta1")),
    "Pod": ("pods", ("v1",)),  # those that hold a node port only (holds_node_ports)
    "Namespace": ("namespaces", ("v1",)),  # their labels: pools' namespaceSelectors
    "NodeAddressPool": ("pools", (POOL_API_VERSION,)),
}


class DumpError(ValueError):
    """Unusable input; ``str(err)`` is one line naming the file and the object."""


@dataclass
class Dump:
    """Objects read from dumps, as plain dicts, in reading order.

    ``origins`` maps ``id(obj)`` to where it was read (``cluster.yaml: items[3]``), see
    :meth:`where`; ``skipped`` counts objects of other kinds by kind (and Pods that hold no
    node port); ``empty`` names the files without any object (an empty file, a
    List with no items).
    """

    nodes: list[dict[str, Any]] = field(default_factory=list)
    services: list[dict[str, Any]] = field(default_factory=list)
    endpoint_slices: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    """The Pods that hold a node port (:func:`holds_node_ports`; docs/design.md §4.9: they
    block the addresses of their node)."""
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    pools: list[dict[str, Any]] = field(default_factory=list)
    """NodeAddressPools (docs/design.md §4.13): with none, the decision is Cilium's."""
    origins: dict[int, str] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    empty: list[str] = field(default_factory=list)
    """Files (``<stdin>`` for ``-``) that held no Kubernetes object at all."""
    kube_proxy: dict[str, Any] | None = None
    """kubeadm's ConfigMap ``kube-system/kube-proxy`` when the input holds it (the last
    one read), else ``None`` (docs/design.md §4.10)."""
    cilium_config: dict[str, Any] | None = None
    """Cilium's ConfigMap ``kube-system/cilium-config`` when the input holds it (the last
    one read), else ``None`` (docs/design.md §4.12)."""
    cilium_agent_images: list[str] | None = None
    """The images of the Cilium agent Pods the input holds
    (:func:`app.core.ciliumkpr.agent_images`, read before the Pods that hold no node port
    are dropped); ``None`` when it holds none (§4.12)."""
    warnings: list[str] = field(default_factory=list)
    """What the reader could not read and what the answer lacks for it, one line each
    without the ``Warning:`` prefix (the live read's fallbacks on a 403,
    :mod:`app.preview.live`); ``node-ipam-lb preview`` prints them on stderr."""

    def where(self, obj: Mapping[str, Any]) -> str:
        """Where ``obj`` was read, e.g. ``cluster.yaml: items[3] (Node kind-worker)``."""
        return self.origins.get(id(obj), "<unknown>")


@dataclass
class DumpViews:
    """Projected dump: the inputs of :func:`app.core.nodeipam.select`, de-duplicated by
    kind/namespace/name (a later file wins), nodes sorted by name and Services by
    namespace/name."""

    nodes: list[NodeView]
    services: list[ServiceView]
    endpoint_slices: list[EndpointSliceView]
    pods: list[PodView] = field(default_factory=list)
    """The Pods that hold a node port, for the port index (docs/design.md §4.9)."""
    pools: PoolSet = NO_POOL_SET
    """The NodeAddressPools (docs/design.md §4.13)."""
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    """Each Namespace's labels by name (what pools' ``namespaceSelectors`` match)."""
    duplicates: list[str] = field(default_factory=list)
    """One line per object read more than once (same kind, namespace and name), naming
    it and where the copy that wins was read."""


def _read(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        return Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise DumpError(f"{path}: cannot read: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise DumpError(f"{path}: not UTF-8 text: {err.reason} at byte {err.start}") from None


def parse_documents(text: str, *, name: str) -> list[Any]:
    """The documents of a JSON or (multi-document) YAML text, ``None`` for empty ones.

    Text starting with ``{`` or ``[`` is tried as JSON first. YAML is read with libyaml
    when available, without aliases (see :class:`_NoAliasLoader`); nesting is capped by
    libyaml (1,000 levels) and by the JSON decoder's recursion limit.

    Raises:
        DumpError: ``<name>: invalid JSON|YAML: <problem> at line L, column C``; or a
            string that is not valid Unicode (a lone surrogate such as JSON ``"\\ud800"``,
            which no UTF-8 input can hold), naming its field.
    """
    json_error = None
    docs: list[Any] | None = None
    if text.lstrip().startswith(("{", "[")):
        try:
            docs = [json.loads(text)]
        except json.JSONDecodeError as err:
            json_error = f"{name}: invalid JSON: {err.msg} at line {err.lineno}, column {err.colno}"
        except RecursionError:
            raise DumpError(f"{name}: invalid JSON: nested too deeply") from None
        except ValueError as err:  # int(): more digits than sys.get_int_max_str_digits()
            raise DumpError(f"{name}: invalid JSON: {long_integer(text) or err}") from None
    if docs is None:
        try:
            docs = list(yaml.load_all(text, Loader=_NoAliasLoader))
        except yaml.YAMLError as err:
            if json_error:
                raise DumpError(json_error) from None
            mark = getattr(err, "problem_mark", None)
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise DumpError(f"{name}: invalid YAML: {problem}{at}") from None
        except RecursionError:
            raise DumpError(f"{name}: invalid YAML: nested too deeply") from None
    if _SURROGATE_HINT.search(text):
        for number, doc in enumerate(docs, start=1):
            bad = lone_surrogate(doc)
            if bad is not None:
                where = f"document {number}: " if len(docs) > 1 else ""
                raise DumpError(
                    f"{name}: {where}{bad or '(top level)'}: Invalid value: not valid Unicode"
                    " (lone UTF-16 surrogate)"
                )
    return docs


def _digits_problem(digits: int) -> str:
    return (
        f"integer of {digits} digits: more than {sys.get_int_max_str_digits()} digits"
        " (Kubernetes integers are int32 or int64)"
    )


def long_integer(text: str) -> str | None:
    """Why JSON ``text`` holds an integer literal Python refuses to convert (more digits
    than ``sys.get_int_max_str_digits()``, 4,300 by default: ``json.loads`` raises a bare
    ``ValueError``), with its line and column; ``None`` when it holds none. No Kubernetes
    field holds one (they are int32 or int64)."""
    found = _LONG_INTEGER.search(text)
    if found is None:
        return None
    line = text.count("\n", 0, found.start()) + 1
    column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
    return f"{_digits_problem(len(found.group()))} at line {line}, column {column}"


def lone_surrogate(value: object, path: str = "") -> str | None:
    """The field path (``request.uid``, ``metadata.annotations[a]``) of the first string,
    key or value, of decoded JSON/YAML ``value`` holding a lone UTF-16 surrogate (JSON
    ``"\\ud800"``); ``""`` for ``value`` itself; ``None`` when every string is valid
    Unicode, i.e. encodable as UTF-8 (RFC 8259 §8.2: such strings have unpredictable
    behaviour, and kube-apiserver never sends them)."""
    stack: list[tuple[object, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return where
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and not _encodable(key):
                    return f"{where}[{ascii(key)[1:-1]}]" if where else ascii(key)[1:-1]
                shown = key if isinstance(key, str) and _FIELD_RE.fullmatch(key) else None
                child_path = (
                    (f"{where}.{shown}" if where else shown)
                    if shown is not None
                    else f"{where}[{key}]"
                )
                stack.append((child, child_path))
        elif isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
    return None


_FIELD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _objects(doc: Any, where: str) -> Iterator[tuple[dict[str, Any], str]]:
    """Flatten Lists (and JSON arrays) into ``(object, where)`` pairs."""
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            yield from _objects(item, f"{where}[{i}]")
        return
    if not isinstance(doc, dict):
        raise DumpError(f"{where}: not a Kubernetes object (a {type(doc).__name__})")
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise DumpError(f"{where}: not a Kubernetes object: kind: Required value")
    if kind == "List" or (kind.endswith("List") and "items" in doc):
        items = doc.get("items")
        if items is None:
            return
        if not isinstance(items, list):
            raise DumpError(f"{where}: items: Invalid value: must be a list")
        for i, item in enumerate(items):
            yield from _objects(item, f"{where}: items[{i}]" if where else f"items[{i}]")
        return
    yield doc, where


def _describe(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    if not isinstance(name, str):
        return str(obj["kind"])
    shown = f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name
    return f"{obj['kind']} {shown}"


def is_config_map(obj: Mapping[str, Any], where: tuple[str, str]) -> bool:
    """True when ``obj`` (a ``ConfigMap``) is ``where`` (namespace, name) in ``v1`` (or
    without an ``apiVersion``, as the kinds of :data:`_KINDS`): kubeadm's kube-proxy
    ConfigMap (docs/design.md §4.10), Cilium's ``kube-system/cilium-config`` (§4.12)."""
    meta = obj.get("metadata")
    if obj.get("apiVersion", "v1") != "v1" or not isinstance(meta, Mapping):
        return False
    return (meta.get("namespace"), meta.get("name")) == where


def is_kube_proxy_config_map(obj: Mapping[str, Any]) -> bool:
    """True when ``obj`` (a ``ConfigMap``) is kubeadm's ``kube-system/kube-proxy`` in
    ``v1`` (or without an ``apiVersion``, as the kinds of :data:`_KINDS`)."""
    return is_config_map(obj, CONFIG_MAP)


def is_host_network(obj: Mapping[str, Any]) -> bool:
    """True when Pod ``obj`` has ``spec.hostNetwork: true``: the Pods the controller's
    informer lists with ``host-port-pods`` off (``fieldSelector=spec.hostNetwork=true``,
    ``app.kube.client.pod_field_selector``)."""
    spec = obj.get("spec")
    return isinstance(spec, Mapping) and spec.get("hostNetwork") is True


def holds_node_ports(obj: Mapping[str, Any], *, host_port_pods: bool = True) -> bool:
    """True when Pod ``obj`` holds a port of its node (docs/design.md §4.9), as the
    controller's Pod informer keeps it (``app.controller.controller.host_pod_view``): its
    :func:`~app.core.views.pod_view` holds ports (a bound Pod that has not ended, with a
    ``containerPort`` on the host network or a ``hostPort``); with ``host_port_pods``
    false (the ``host-port-pods`` setting, docs/design.md §10) only a ``hostNetwork:
    true`` Pod counts. A Pod that cannot be projected (a field of the wrong type) is
    kept, so that :func:`project` reports it as unusable input naming the object, rather
    than the port it may hold being silently ignored."""
    if not host_port_pods and not is_host_network(obj):
        return False
    try:
        return pod_view(obj).holds_ports
    except ViewError:
        return True


def load_dump(paths: Sequence[str], *, host_port_pods: bool = True) -> Dump:
    """Read every file of ``paths`` (``"-"`` = standard input) into a :class:`Dump`; of
    the Pods only those that hold a node port are kept (:func:`holds_node_ports` with
    ``host_port_pods``).

    Raises:
        DumpError: unusable input (see the module docstring and :func:`parse_documents`),
            or more than :data:`MAX_OBJECTS` objects; one line naming the file and, where
            known, the document or ``items`` index and the object.
    """
    dump = Dump()
    read = 0
    for path in paths:
        name = "<stdin>" if path == "-" else path
        docs = [d for d in parse_documents(_read(path), name=name) if d is not None]
        before = read
        for number, doc in enumerate(docs, start=1):
            where = f"{name}: document {number}" if len(docs) > 1 else name
            for obj, origin in _objects(doc, where):
                read += 1
                if read > MAX_OBJECTS:
                    raise DumpError(f"{origin}: Too many: more than {MAX_OBJECTS} objects")
                kind = obj["kind"]
                if kind == "ConfigMap" and is_kube_proxy_config_map(obj):
                    dump.kube_proxy = obj
                    dump.origins[id(obj)] = f"{origin} ({_describe(obj)})"
                    continue
                if kind == "ConfigMap" and is_config_map(obj, ciliumkpr.CONFIG_MAP):
                    dump.cilium_config = obj
                    dump.origins[id(obj)] = f"{origin} ({_describe(obj)})"
                    continue
                if kind == "Pod" and ciliumkpr.is_agent_pod(obj):
                    images = {*(dump.cilium_agent_images or ()), *ciliumkpr.agent_images([obj])}
                    dump.cilium_agent_images = sorted(images)
                attr, versions = _KINDS.get(kind, ("", ()))
                if (
                    not attr
                    or obj.get("apiVersion", versions[0]) not in versions
                    or (kind == "Pod" and not holds_node_ports(obj, host_port_pods=host_port_pods))
                ):
                    # e.g. a Pod that holds no node port (most), or a Knative
                    # serving.knative.dev/v1 Service
                    dump.skipped[kind] = dump.skipped.get(kind, 0) + 1
                    continue
                getattr(dump, attr).append(obj)
                dump.origins[id(obj)] = f"{origin} ({_describe(obj)})"
        if read == before:
            dump.empty.append(name)
    return dump


def project(
    dump: Dump, *, match_node_labels_annotation: str = MATCH_NODE_LABELS_ANNOTATION
) -> DumpViews:
    """Project every object of ``dump`` (``app.core.views``): the same path for a file and
    for objects listed from a live cluster.

    Raises:
        DumpError: a :class:`~app.core.views.ViewError`, prefixed with where the object
            was read (``cluster.yaml: items[2] (Node n1): metadata...``).
    """
    seen: dict[tuple[str, str, str], int] = {}
    winner: dict[tuple[str, str, str], Mapping[str, Any]] = {}

    def keep(kind: str, namespace: str, name: str, obj: Mapping[str, Any]) -> None:
        key = (kind, namespace, name)
        seen[key] = seen.get(key, 0) + 1
        winner[key] = obj

    try:
        obj: Mapping[str, Any] = {}
        nodes = {}
        for obj in dump.nodes:
            view = node_view(obj)
            nodes[view.name] = view
            keep("Node", "", view.name, obj)
        services = {}
        for obj in dump.services:
            svc = service_view(obj, match_node_labels_annotation=match_node_labels_annotation)
            services[svc.namespace, svc.name] = svc
            keep("Service", svc.namespace, svc.name, obj)
        slices = {}
        for obj in dump.endpoint_slices:
            eps = endpoint_slice_view(obj)
            slices[eps.namespace, eps.name] = eps
            keep("EndpointSlice", eps.namespace, eps.name, obj)
        pods = {}
        for obj in dump.pods:
            pod = pod_view(obj)
            pods[pod.namespace, pod.name] = pod
            keep("Pod", pod.namespace, pod.name, obj)
        labels = {}
        for obj in dump.namespaces:
            ns = namespace_view(obj)
            labels[ns.name] = dict(ns.labels)
            keep("Namespace", "", ns.name, obj)
        pools = {}
        for obj in dump.pools:
            pool = pool_from_object(obj)
            pools[pool.name] = pool
            keep("NodeAddressPool", "", pool.name, obj)
    except ViewError as err:
        raise DumpError(f"{dump.where(obj)}: {err}") from None
    duplicates = [
        f"{kind} {f'{namespace}/' if namespace else ''}{name} is in the input {count} times;"
        f" the last one ({dump.where(winner[kind, namespace, name])}) wins, as a later"
        " kubectl apply would overwrite the earlier"
        for (kind, namespace, name), count in seen.items()
        if count > 1
    ]
    return DumpViews(
        nodes=[nodes[k] for k in sorted(nodes)],
        services=[services[k] for k in sorted(services)],
        endpoint_slices=list(slices.values()),
        pods=list(pods.values()),
        pools=PoolSet(pools.values()) if pools else NO_POOL_SET,
        namespace_labels=labels,
        duplicates=duplicates,
    )
