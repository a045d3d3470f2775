"""The names and the settings the pure selection core reads (docs/design.md §2-§4).

Names are Cilium's (``io.cilium/node``, ``io.cilium.nodeipam/match-node-labels``,
``default-lb-service-ipam``). :class:`SelectionSettings` is the pure subset of the
process settings (:class:`app.config.Settings`) that selection and admission read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from app.core.ports import (
    DEFAULT_RESERVED_NODE_PORTS,
    PortPolicy,
    parse_namespaces,
    parse_port_exceptions,
    parse_port_ranges,
)
from app.core.selector import qualified_name_errors
from app.core.views import MATCH_NODE_LABELS_ANNOTATION

__all__ = [
    "ADDRESS_TYPES",
    "DEFAULT_LB_SERVICE_IPAM_VALUES",
    "DEFAULT_RESERVED_NODE_PORTS",
    "LOAD_BALANCER_CLASS",
    "MATCH_NODE_LABELS_ANNOTATION",
    "DefaultLBServiceIPAM",
    "IPMode",
    "SelectionSettings",
]

LOAD_BALANCER_CLASS = "io.cilium/node"
EXTERNAL_IP = "ExternalIP"
INTERNAL_IP = "InternalIP"
BOTH_ADDRESS_TYPES = "ExternalIP,InternalIP"
ADDRESS_TYPES = (EXTERNAL_IP, INTERNAL_IP, BOTH_ADDRESS_TYPES)
"""The values of setting ``address-types`` (normalised by :func:`normal_address_types`)."""


def normal_address_types(text: str) -> str:
    """Setting ``address-types`` normalised: ``ExternalIP``, ``InternalIP`` or
    ``ExternalIP,InternalIP`` (either order, spaces allowed, each type once).

    Raises:
        ValueError: another value (naming the setting and the supported values).
    """
    parts = sorted({part.strip() for part in text.split(",")})
    if parts in ([EXTERNAL_IP], [INTERNAL_IP], [EXTERNAL_IP, INTERNAL_IP]):
        return ",".join(parts)
    raise ValueError(
        f"address-types: Unsupported value: {text!r}: supported values: {', '.join(ADDRESS_TYPES)}"
    )


DEFAULT_LB_SERVICE_IPAM_VALUES = ("lbipam", "nodeipam", "none")
DefaultLBServiceIPAM = Literal["lbipam", "nodeipam", "none"]
IPMode = Literal["VIP", "Proxy"]


@dataclass(frozen=True, slots=True)
class SelectionSettings:
    """The settings the pure selection core reads (docs/design.md §2-§4).

    Raises:
        ValueError: ``default_lb_service_ipam`` is not one of ``lbipam``, ``nodeipam``,
            ``none``, or ``ip_mode`` is not ``VIP``/``Proxy``, or the grace period is
            negative, or a port-ownership setting does not parse
            (:func:`app.core.ports.parse_port_ranges`), or ``load_balancer_class`` /
            ``match_node_labels_annotation`` is not a qualified name (apimachinery
            ``IsQualifiedName``, as the API server checks ``spec.loadBalancerClass`` and
            annotation keys). Cilium accepts any string
            here and silently handles nothing; we refuse it.
    """

    load_balancer_class: str = LOAD_BALANCER_CLASS
    default_lb_service_ipam: str = "lbipam"
    match_node_labels_annotation: str = MATCH_NODE_LABELS_ANNOTATION
    per_node_address_fallback: bool = False
    address_types: str = EXTERNAL_IP
    """Which node addresses are published (docs/design.md §4.4): ``ExternalIP`` (Cilium's
    global preference: ExternalIPs when a candidate has one, else InternalIPs),
    ``InternalIP`` (InternalIPs only) or ``ExternalIP,InternalIP`` (both, for nodes behind
    a 1:1 NAT: the public address for clients and DNS, the one the packets carry after
    the NAT for kube-proxy)."""
    exclude_not_ready_nodes: bool = False
    ignore_exclude_lb: bool = False
    """Publish nodes labelled ``node.kubernetes.io/exclude-from-external-load-balancers``
    too (MetalLB's ``ignore-exclude-lb``; KEP-3458 and Cilium honour the label, so the
    default is false): for single-node and control-plane-only clusters, whose only nodes
    kubeadm and Talos label so."""
    not_ready_grace_seconds: float = 60.0
    ip_mode: str = "VIP"
    # Port ownership (docs/design.md §4.9): text as the flags take it, parsed into ``ports``.
    reserved_node_ports: str = DEFAULT_RESERVED_NODE_PORTS
    reserved_port_exceptions: str = ""
    allowed_namespaces: str = ""
    ports: PortPolicy = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "ports",
            PortPolicy(
                reserved=parse_port_ranges(self.reserved_node_ports, flag="reserved-node-ports"),
                exceptions=parse_port_exceptions(
                    self.reserved_port_exceptions, flag="reserved-port-exceptions"
                ),
                namespaces=parse_namespaces(self.allowed_namespaces, flag="allowed-namespaces"),
            ),
        )
        if self.default_lb_service_ipam not in DEFAULT_LB_SERVICE_IPAM_VALUES:
            raise ValueError(
                f"default-lb-service-ipam: Unsupported value: {self.default_lb_service_ipam!r}:"
                f" supported values: {', '.join(DEFAULT_LB_SERVICE_IPAM_VALUES)}"
            )
        types = normal_address_types(self.address_types)
        object.__setattr__(self, "address_types", types)
        if self.per_node_address_fallback and types != EXTERNAL_IP:
            raise ValueError(
                "per-node-address-fallback: Forbidden: applies to address-types ExternalIP"
                f" only (address-types is {types})"
            )
        if self.ip_mode not in ("VIP", "Proxy"):
            raise ValueError(
                f"ip-mode: Unsupported value: {self.ip_mode!r}: supported values: VIP, Proxy"
            )
        if self.not_ready_grace_seconds < 0:
            raise ValueError(
                f"not-ready-grace-seconds: Invalid value: {self.not_ready_grace_seconds}:"
                " must be greater than or equal to 0"
            )
        if not self.load_balancer_class:
            raise ValueError("load-balancer-class: Required value: must not be empty")
        # What the API server accepts in spec.loadBalancerClass (a qualified name) and as an
        # annotation key (a qualified name once lower-cased): another value never matches.
        for flag, value, checked in (
            ("load-balancer-class", self.load_balancer_class, self.load_balancer_class),
            (
                "match-node-labels-annotation",
                self.match_node_labels_annotation,
                self.match_node_labels_annotation.lower(),
            ),
        ):
            errors = qualified_name_errors(checked)
            if errors:
                raise ValueError(f"{flag}: Invalid value: {value!r}: {'; '.join(errors)}")
