"""``node-ipam-lb preview``: run the selection core on a cluster dump or on the live cluster
(docs/design.md §8).

Input: ``-f`` files (what ``kubectl get nodes,services,endpointslices -A -o yaml|json``
prints, and the Pods, :data:`PODS_DUMP_COMMAND`, of which those that hold a node port are
kept), or without ``-f`` the live
cluster (:mod:`app.preview.live`). Which Services are shown is a :class:`Scope`
(``kubectl get`` semantics: ``NAME``, ``NAMESPACE/NAME``, ``-n``, ``-A``); port ownership
is decided against every Service read, whatever the scope (docs/design.md §4.9).

Output formats: ``table`` (like ``kubectl get svc``: NAMESPACE, NAME, CLASS, EXTERNAL-IP,
REASON), ``wide`` (adds CURRENT, the stored ``status.loadBalancer.ingress``, CHANGE, ``yes``
when the controller would write a different ingress, NODES, the per-node verdict summary,
and with NodeAddressPools POOL, the pool a Service chose among), ``json`` and ``yaml``
(``{"items": [Selection.to_dict(), ...]}``, streamed item by item by
:mod:`app.preview.output`). Warnings go to stderr as ``Warning: ...`` lines like kubectl's,
each distinct text once (a bad Node address is one line, naming how many Services it
touches); with kube-proxy in ipvs mode and ipMode VIP (kubeadm's ConfigMap
``kube-system/kube-proxy``, read live or held by a dump; docs/design.md §4.10) one more line
says what breaks, and so does one when Cilium's wildcard entries concern a managed Service
(ConfigMap ``kube-system/cilium-config`` and the agent Pods, read live or held by a dump;
§4.12); so does each line of :attr:`Dump.warnings <app.core.dump.Dump.warnings>` (what a
live read was not allowed to list, and what the answer lacks for it); live, when it shows a
managed Service, one line for each thing it could not know of the running controller and for
a "what if" (:mod:`app.preview.controllerview`). With no Service to show, the table form
prints nothing on stdout and ``No resources found[ in NS namespace].`` on stderr, exit 0, as
kubectl does; a file without any object also gets a ``Warning: FILE: no Kubernetes objects``
line. Long values in table cells are cut in the middle (:func:`app.core.text.elide`).

Exit codes: 0 every Service previewed; 1 previewed, but at least one Service has an
``error`` (malformed selector annotation: the controller would not write its status) or a
named Service does not exist; 2 unusable input or settings (one ``error: ...`` line on
stderr naming the file and object, nothing on stdout).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from app.core import ciliumkpr
from app.core.codes import POOL_CODES
from app.core.decision import Decider, Snapshot
from app.core.dump import Dump, DumpError, DumpViews, load_dump, project
from app.core.kubeproxy import ipvs_hazard, proxy_mode
from app.core.nodehealth import NO_UNHEALTHY
from app.core.nodeindex import NodeIndex
from app.core.nodeipam import LOCAL, Selection, is_managed
from app.core.options import SelectionSettings
from app.core.ports import PortIndex, pinned_ports, stale_ingress
from app.core.status import ingress_differs, with_ports
from app.core.text import elide
from app.core.views import EndpointSliceView, ServiceView
from app.preview.output import write_json, write_yaml

OUTPUT_FORMATS = ("table", "wide", "json", "yaml")
EXIT_OK, EXIT_SERVICE_ERROR, EXIT_UNUSABLE = 0, 1, 2
CELL_CHARS = 300
"""Longest table cell; longer ones (a reason quoting a huge selector) are cut in the middle."""
NAMES_IN_WARNING = 3
"""Services named in a warning shared by several; the rest are counted."""


@dataclass(frozen=True, slots=True)
class Scope:
    """Which Services to show, as ``kubectl get services`` picks them.

    ``namespace`` ``None`` means all namespaces (``-A``, or a dump without ``-n``);
    ``names`` are ``(namespace, name)`` pairs, namespace ``None`` = ``namespace``'s.
    No names: every Service of the namespace(s).
    """

    namespace: str | None = None
    names: tuple[tuple[str | None, str], ...] = ()

    def wanted(self, svc: ServiceView) -> bool:
        """True when ``svc`` is in this scope."""
        if self.names:
            return any(
                name == svc.name and (ns or self.namespace) in (None, svc.namespace)
                for ns, name in self.names
            )
        return self.namespace is None or svc.namespace == self.namespace

    def only(self, namespace: str | None, name: str) -> Scope:
        """This scope narrowed to one of its names."""
        return Scope(namespace=self.namespace, names=((namespace, name),))

    def where(self) -> str:
        """`` in NS namespace`` or ``""`` (kubectl's "No resources found" suffix)."""
        return "" if self.namespace is None else f" in {self.namespace} namespace"


def parse_scope(
    args: Sequence[str], *, namespace: str | None, all_namespaces: bool, default: str | None
) -> Scope:
    """The :class:`Scope` of ``preview [NAME|NAMESPACE/NAME ...] [-n NS] [-A]``.

    ``default`` is the namespace used when neither ``-n`` nor ``-A`` is given (the
    kubeconfig context's for the live cluster; ``None``, all, for a dump).

    Raises:
        ValueError: ``-A`` with a bare NAME (kubectl: a resource cannot be retrieved by
            name across all namespaces), ``-n`` with ``-A``, or an argument with an empty
            part or more than one ``/``.
    """
    if all_namespaces and namespace:
        raise ValueError("--namespace and --all-namespaces cannot be used together")
    names: list[tuple[str | None, str]] = []
    for arg in args:
        ns, slash, name = arg.rpartition("/")
        if not name or (slash and not ns) or "/" in ns:
            raise ValueError(f"{arg!r}: Invalid value: must be NAME or NAMESPACE/NAME")
        if not slash and all_namespaces:
            raise ValueError(
                f"{arg!r}: a resource cannot be retrieved by name across all namespaces"
                " (use NAMESPACE/NAME, or -n NAMESPACE)"
            )
        names.append((ns or None, name))
    scope_ns = None if all_namespaces else (namespace or default)
    return Scope(namespace=scope_ns, names=tuple(names))


def preview_dump(
    views: DumpViews,
    *,
    settings: SelectionSettings,
    now: float,
    scope: Scope | None = None,
    unhealthy: Mapping[str, str] = NO_UNHEALTHY,
) -> Iterator[Selection]:
    """One :class:`Selection` per Service of ``views`` in ``scope`` (default all), in
    namespace/name order, computed as it is consumed (a 5,000-node Selection holds 5,000
    verdicts), after port ownership (docs/design.md §4.9) against every Service and
    port-holding Pod of ``views``, whatever the scope, fed to the port index as the
    controller's cache feeds it (keys ``namespace/name``, :mod:`app.controller.cache`).
    ``unhealthy`` is the health view (node name -> why, §4.11): the Lease holder's, for the
    live preview."""
    by_service: dict[tuple[str, str | None], list[EndpointSliceView]] = defaultdict(list)
    for s in views.endpoint_slices:
        by_service[s.namespace, s.service_name].append(s)
    index = NodeIndex(views.nodes)
    ports = PortIndex(lambda view: is_managed(view, settings)[0])
    for svc in views.services:
        ports.put_service(f"{svc.namespace}/{svc.name}", None, svc)
    for pod in views.pods:
        ports.put_pod(f"{pod.namespace}/{pod.name}", None, pod)
    for piece in views.endpoint_slices:
        ports.put_slice(f"{piece.namespace}/{piece.name}", None, piece)
    decider = Decider(settings)
    snap = Snapshot(
        nodes=index,
        now=now,
        ports=ports,
        endpoint_slices_of=lambda namespace, name: by_service.get((namespace, name), ()),
        unhealthy=unhealthy,
        pools=views.pools,
        namespace_labels=views.namespace_labels.get,
    )
    for svc in views.services:
        if scope is not None and not scope.wanted(svc):
            continue
        yield decider.preview(svc, snap)


def _ips(entries: Sequence[Any] | None) -> str:
    return ",".join(str(e.get("ip") or e.get("hostname") or "") for e in entries or ())


def _external_ip(sel: Selection) -> str:
    if not sel.managed:
        return "<not managed>"
    if sel.ingress is None:
        return "<error>"
    return _ips(sel.ingress) or "<pending>"


def would_change(sel: Selection, svc: ServiceView) -> bool:
    """True when the controller would write ``sel``'s ingress over ``svc``'s stored one
    (the reconciler's own comparison, :func:`app.core.status.ingress_differs`); never for
    a Service that is not managed. For one whose selector does not parse (its stored
    ingress is kept, docs/design.md §4.1): true when the reconciler withdraws it for its
    ports or its deletion (:func:`app.core.ports.stale_ingress`) or records its ports in
    its entries (:func:`app.core.ports.pinned_ports`); the withdrawals that port ownership
    or a NodeAddressPool decide (§3) are not shown here."""
    if sel.ingress is None:
        return sel.managed and (
            stale_ingress(svc, ours=True) is not None or pinned_ports(svc) is not None
        )
    stored = with_ports(svc.ingress or (), svc.ingress_ports)
    return ingress_differs(sel.ingress, stored)


def node_summary(sel: Selection) -> str:
    """``2/4 selected (ExcludedByLabel 1, SelectorMismatch 1)``: the per-node verdicts in
    one cell; ``""`` when there are none (a Service that is not managed)."""
    if not sel.nodes:
        return ""
    codes = Counter(v.code for v in sel.nodes if not v.selected)
    selected = sum(1 for v in sel.nodes if v.selected)
    detail = ", ".join(f"{code} {count}" for code, count in sorted(codes.items()))
    return f"{selected}/{len(sel.nodes)} selected" + (f" ({detail})" if detail else "")


def format_table(
    selections: Sequence[Selection],
    services: Sequence[ServiceView],
    *,
    wide: bool = False,
) -> str:
    """``kubectl get svc``-style table; REASON is filled only when there is no IP to show.

    ``services`` are the Services of ``selections``, in the same order (CLASS, and with
    ``wide`` CURRENT and CHANGE, come from them).
    """
    header = ["NAMESPACE", "NAME", "CLASS", "EXTERNAL-IP"]
    # POOL only where NodeAddressPools decided (docs/design.md §4.13): the pool a Service
    # chose among; a refused one's reason names the pool.
    pools = wide and any(sel.pool or sel.code in POOL_CODES for sel in selections)
    if wide:
        header += ["CURRENT", "CHANGE", "NODES", *(["POOL"] if pools else [])]
    rows = [[*header, "REASON"]]
    for sel, svc in zip(selections, services, strict=True):
        reason = "" if sel.ingress else (sel.error or sel.reason)
        row = [sel.namespace, sel.name, svc.load_balancer_class or "<none>", _external_ip(sel)]
        if wide:
            current = _ips(svc.ingress) or "<none>"
            row += [current, "yes" if would_change(sel, svc) else "no", node_summary(sel)]
            if pools:
                row.append(sel.pool or "<none>")
        rows.append([elide(cell, CELL_CHARS) for cell in [*row, reason]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(r, [*widths, 0], strict=True)).rstrip()
        for r in rows
    )


def warning_lines(selections: Sequence[Selection]) -> list[str]:
    """One ``Warning: ...`` line per distinct warning text, in first-seen order: a warning
    about a Node (an address that is not an IP) is printed once, not once per Service.

    Shared by one Service: ``Warning: ns/name: text``; by several: ``Warning: text (N
    Services: a, b, c, ...)``."""
    by_text: dict[str, list[str]] = {}
    for sel in selections:
        for warning in sel.warnings:
            by_text.setdefault(warning, []).append(f"{sel.namespace}/{sel.name}")
    lines = []
    for text, keys in by_text.items():
        if len(keys) == 1:
            lines.append(f"Warning: {keys[0]}: {elide(text, CELL_CHARS)}")
            continue
        more = ", ..." if len(keys) > NAMES_IN_WARNING else ""
        shown = ", ".join(keys[:NAMES_IN_WARNING]) + more
        lines.append(f"Warning: {elide(text, CELL_CHARS)} ({len(keys)} Services: {shown})")
    return lines


DUMP_COMMAND = "kubectl get nodes,services,endpointslices -A -o yaml"
PODS_DUMP_COMMAND = "kubectl get pods -A -o json"
"""The Pods of a dump (docs/design.md §4.9), in a file of their own: two ``kubectl -o
yaml`` outputs written one after the other are not one YAML document. Every Pod: no field
selector finds a ``hostPort`` (``spec.hostNetwork=true`` finds only the host-network ones,
enough with ``--no-host-port-pods``); the preview keeps those that hold a node port
(:func:`app.core.dump.holds_node_ports`). JSON, not YAML: a dump of every Pod is large
(150,000 Pods: ~1 GB), and PyYAML holds the whole document's node tree while it reads
(bench/README.md §11: the YAML of 150,000 Pods did not fit in 23 GiB; the JSON took
40 s and 3.6 GiB)."""
POOLS_DUMP_COMMAND = "kubectl get namespaces,nodeaddresspools.node-ipam-lb.io -o yaml"
"""The NodeAddressPools and the Namespaces' labels (docs/design.md §4.13), in a file of
their own: on a cluster without the CRD, ``kubectl get`` of the resource fails, which would
fail the whole :data:`DUMP_COMMAND`."""
DUMP_ADVICE = (
    f"dump them with {DUMP_COMMAND}, and the Pods with {PODS_DUMP_COMMAND} (one -f per output)"
)


def incomplete_dump_warnings(views: DumpViews, settings: SelectionSettings) -> list[str]:
    """``Warning: ...`` lines (each at most once) for a dump that lacks a kind the answer
    depends on, which would otherwise read as a confident answer about the cluster: no
    Node at all (every managed Service ``<pending>``), or no EndpointSlice at all while a
    managed Service has ``externalTrafficPolicy: Local`` (every such Service "no eligible
    Node has a ready endpoint", docs/design.md §4.3), or NodeAddressPools that select
    namespaces by label without any Namespace (§4.13). Only for files: a live cluster is
    listed whole."""
    lines = []
    if views.services and not views.nodes:
        lines.append(f"Warning: the input has no Nodes: {DUMP_ADVICE}")
    if not views.endpoint_slices and any(
        svc.external_traffic_policy == LOCAL and is_managed(svc, settings)[0]
        for svc in views.services
    ):
        lines.append(f"Warning: the input has no EndpointSlices: {DUMP_ADVICE}")
    if not views.namespace_labels and any(p.namespace_selectors for p in views.pools.pools):
        lines.append(
            "Warning: the input has NodeAddressPools with namespaceSelectors but no"
            " Namespaces, so they match no namespace here: dump them with"
            f" {POOLS_DUMP_COMMAND}"
        )
    return lines


DumpSource = Callable[[], Dump]
"""Produces the objects to preview (files, or the live cluster); raises :class:`DumpError`."""


def run_preview(
    *,
    paths: Sequence[str],
    output: str,
    settings: dict[str, Any] | SelectionSettings,
    stdout: TextIO,
    stderr: TextIO,
    now: float | None = None,
    scope: Scope | None = None,
    source: DumpSource | None = None,
    host_port_pods: bool = True,
    unhealthy: Mapping[str, str] = NO_UNHEALTHY,
    controller_notes: Sequence[str] = (),
) -> int:
    """Read ``paths`` (or call ``source``), preview every Service in ``scope``, print in
    ``output`` format; return the exit code.

    ``settings`` are :class:`SelectionSettings` or its keyword arguments (validated here).
    ``host_port_pods`` (the ``host-port-pods`` setting, docs/design.md §10) decides which
    Pods of the files count: those that hold a node port, or with ``False`` only the
    ``hostNetwork: true`` ones, as the controller would read them (a ``source`` has read
    its Pods already). ``unhealthy`` and ``controller_notes`` are what the live preview
    learnt of the running controller (:mod:`app.preview.controllerview`): its health view,
    and one ``Warning:`` line each for what it could not know or a "what if", printed when
    a managed Service is shown. Never raises for bad input: errors are one ``error: ...``
    line on ``stderr``.
    """
    if output not in OUTPUT_FORMATS:
        print(
            f"error: --output: Unsupported value: {output!r}: supported values:"
            f" {', '.join(OUTPUT_FORMATS)}",
            file=stderr,
        )
        return EXIT_UNUSABLE
    scope = scope or Scope()
    try:
        selection_settings = (
            settings if isinstance(settings, SelectionSettings) else SelectionSettings(**settings)
        )
        dump = source() if source is not None else load_dump(paths, host_port_pods=host_port_pods)
        views = project(
            dump, match_node_labels_annotation=selection_settings.match_node_labels_annotation
        )
    except (DumpError, ValueError) as err:
        print(f"error: {err}", file=stderr)
        return EXIT_UNUSABLE
    for name in dump.empty:
        print(f"Warning: {name}: no Kubernetes objects", file=stderr)
    for line in dump.warnings:
        print(f"Warning: {line}", file=stderr)
    if source is None:
        for line in incomplete_dump_warnings(views, selection_settings):
            print(line, file=stderr)
    for line in views.duplicates:
        print(f"Warning: {line}", file=stderr)
    hazard = ipvs_hazard(proxy_mode(dump.kube_proxy), selection_settings.ip_mode)
    if hazard is not None:  # kube-proxy in ipvs mode with ipMode VIP (docs/design.md §4.10)
        print(f"Warning: {hazard}", file=stderr)
    cilium = ciliumkpr.assess(
        dump.cilium_config,
        dump.cilium_agent_images,
        load_balancer_class=selection_settings.load_balancer_class,
        default_lb_service_ipam=selection_settings.default_lb_service_ipam,
    ).hazard
    if cilium is not None and any(
        cilium.concerns(svc.load_balancer_class) and is_managed(svc, selection_settings)[0]
        for svc in views.services
    ):  # Cilium's wildcard entries on the node addresses of such Services (§4.12)
        print(f"Warning: {cilium.message}", file=stderr)
    missing = [
        (ns or scope.namespace, name)
        for ns, name in scope.names
        if not any(scope.only(ns, name).wanted(s) for s in views.services)
    ]
    for ns, name in missing:
        if source is None:  # files: no server was asked
            where = f' in namespace "{ns}"' if ns else ""
            print(f'error: services "{name}" not found{where} in the input', file=stderr)
        else:
            print(
                f'Error from server (NotFound): services "{name}" not found in namespace'
                f' "{ns or "default"}"',
                file=stderr,
            )
    failed = bool(missing)
    if controller_notes and any(
        scope.wanted(svc) and is_managed(svc, selection_settings)[0] for svc in views.services
    ):
        for note in controller_notes:
            print(f"Warning: {note}", file=stderr)
    selections = preview_dump(
        views,
        settings=selection_settings,
        now=time.time() if now is None else now,
        scope=scope,
        unhealthy=unhealthy,
    )
    if output in ("table", "wide"):
        listed = list(selections)
        if not listed:
            if not missing:
                print(f"No resources found{scope.where()}.", file=stderr)
            return EXIT_SERVICE_ERROR if failed else EXIT_OK
        services = [svc for svc in views.services if scope.wanted(svc)]
        print(format_table(listed, services, wide=output == "wide"), file=stdout)
        for line in warning_lines(listed):
            print(line, file=stderr)
        return EXIT_SERVICE_ERROR if failed or any(s.error for s in listed) else EXIT_OK

    def tracked() -> Iterator[Selection]:
        nonlocal failed
        for sel in selections:
            failed = failed or bool(sel.error)
            yield sel

    (write_json if output == "json" else write_yaml)(tracked(), stdout)
    return EXIT_SERVICE_ERROR if failed else EXIT_OK
