"""Service defaulting, type-dependent field dropping and validation, as kube-apiserver does it.

Sources: kubernetes ``pkg/apis/core/v1/defaults.go`` (``SetDefaults_Service``),
``pkg/registry/core/service/strategy.go`` (``dropTypeDependentFields``, status reset),
``pkg/registry/core/service/storage`` (``patchAllocatedValues``: allocated values survive an
update that omits them) and ``pkg/apis/core/validation`` (``validateLoadBalancerClassField``,
``ValidateLoadBalancerStatus``). Only the rules our tests depend on are modelled.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import re
from typing import Any

from tests.fakeapi.errors import invalid

Cause = tuple[str, str, str]

SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class Allocator:
    """Fake ClusterIP (10.96.0.0/12, fd00:10:96::/112) and NodePort (30000-32767) allocator."""

    def __init__(self) -> None:
        self._v4 = itertools.count(10)
        self._v6 = itertools.count(10)
        self._ports = itertools.count(30000)

    def cluster_ip(self, family: str) -> str:
        if family == "IPv6":
            return str(ipaddress.IPv6Address("fd00:10:96::") + next(self._v6))
        return str(ipaddress.IPv4Address("10.96.0.0") + next(self._v4))

    def node_port(self) -> int:
        return 30000 + (next(self._ports) - 30000) % 2768


def qualified_name_errors(value: str, path: str) -> list[Cause]:
    """apimachinery `ValidateQualifiedName` (`[prefix/]name`), as one field error."""
    prefix, _, name = value.rpartition("/")
    bad = (
        not name
        or len(name) > 63
        or not _QUALIFIED_NAME.fullmatch(name)
        or (prefix != "" and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)))
        or value.count("/") > 1
    )
    if not bad:
        return []
    msg = (
        f'Invalid value: "{value}": name part must consist of alphanumeric characters, '
        "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
        "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    )
    return [(path, "FieldValueInvalid", msg)]


_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def name_errors(name: str, *, dns1035: bool) -> list[Cause]:
    """``metadata.name`` rules: DNS-1035 label for Services, DNS-1123 subdomain otherwise
    (apimachinery ``validation.IsDNS1035Label`` / ``IsDNS1123Subdomain``)."""
    path = "metadata.name"
    if dns1035 and (len(name) > 63 or not _DNS1035_LABEL.fullmatch(name)):
        return [
            (
                path,
                "FieldValueInvalid",
                f'Invalid value: "{name}": a DNS-1035 label must consist of lower case '
                "alphanumeric characters or '-', start with an alphabetic character, and end "
                "with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
                "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
            )
        ]
    if not dns1035 and (len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name)):
        return [
            (
                path,
                "FieldValueInvalid",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower '
                "case alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            )
        ]
    return []


def _is_lb(svc: dict[str, Any]) -> bool:
    return bool(svc.get("spec", {}).get("type") == "LoadBalancer")


def prepare_update(new: dict[str, Any], old: dict[str, Any]) -> None:
    """Carry allocated values over and drop fields that no longer apply (in place).

    ``patchAllocatedValues`` + ``dropTypeDependentFields``: switching ``type`` away from
    LoadBalancer clears an unchanged ``loadBalancerClass`` and ``status.loadBalancer``.
    """
    spec, old_spec = new.setdefault("spec", {}), old.get("spec", {})
    new_type, old_type = spec.get("type", "ClusterIP"), old_spec.get("type", "ClusterIP")
    if new_type != "ExternalName" and not spec.get("clusterIP") and old_spec.get("clusterIP"):
        spec["clusterIP"] = old_spec["clusterIP"]
        spec["clusterIPs"] = old_spec.get("clusterIPs", [old_spec["clusterIP"]])
    if new_type in ("NodePort", "LoadBalancer"):
        old_ports = {
            (p.get("port"), p.get("protocol", "TCP")): p for p in old_spec.get("ports", [])
        }
        for port in spec.get("ports") or []:
            prior = old_ports.get((port.get("port"), port.get("protocol", "TCP")))
            if not port.get("nodePort") and prior and prior.get("nodePort"):
                port["nodePort"] = prior["nodePort"]
    if old_type == "LoadBalancer" and new_type != "LoadBalancer":
        if spec.get("loadBalancerClass") == old_spec.get("loadBalancerClass"):
            spec.pop("loadBalancerClass", None)
        if spec.get("allocateLoadBalancerNodePorts") == old_spec.get(
            "allocateLoadBalancerNodePorts"
        ):
            spec.pop("allocateLoadBalancerNodePorts", None)
        new.setdefault("status", {})["loadBalancer"] = {}
    if old_type in ("NodePort", "LoadBalancer") and new_type not in ("NodePort", "LoadBalancer"):
        if spec.get("externalTrafficPolicy") == old_spec.get("externalTrafficPolicy"):
            spec.pop("externalTrafficPolicy", None)
        for port in spec.get("ports") or []:
            port.pop("nodePort", None)


def apply_defaults(svc: dict[str, Any], allocator: Allocator) -> None:
    """``SetDefaults_Service`` plus IP/port allocation (in place)."""
    spec = svc.setdefault("spec", {})
    svc_type = spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        if "targetPort" not in port and "port" in port:
            port["targetPort"] = port["port"]
        wants_port = svc_type == "NodePort" or (
            svc_type == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts", True)
        )
        if wants_port and not port.get("nodePort"):
            port["nodePort"] = allocator.node_port()
    if svc_type in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if svc_type == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    if svc_type != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if not spec.get("ipFamilies"):
            # A single-stack IPv4 cluster (one --service-cluster-ip-range): PreferDualStack
            # gets IPv4 only; RequireDualStack is refused by validate().
            spec["ipFamilies"] = ["IPv4"]
        if not spec.get("clusterIP"):
            ips = [allocator.cluster_ip(f) for f in spec["ipFamilies"]]
            spec["clusterIP"], spec["clusterIPs"] = ips[0], ips
        elif not spec.get("clusterIPs"):
            spec["clusterIPs"] = [spec["clusterIP"]]
    default_ip_mode(svc)


def default_ip_mode(svc: dict[str, Any]) -> None:
    """``ipMode: VIP`` on each ingress entry with an ``ip`` and no ``ipMode`` (LoadBalancer)."""
    if not _is_lb(svc):
        return
    for entry in (svc.get("status", {}).get("loadBalancer", {}) or {}).get("ingress") or []:
        if isinstance(entry, dict) and entry.get("ip") and "ipMode" not in entry:
            entry["ipMode"] = "VIP"


def validate(svc: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Raise 422 Invalid (``errors.NewInvalid``) when ``svc`` breaks a modelled Service rule."""
    causes: list[Cause] = []
    spec = svc.get("spec", {})
    svc_type = spec.get("type")
    if svc_type not in SERVICE_TYPES:
        supported = ", ".join(f'"{t}"' for t in SERVICE_TYPES)
        causes.append(
            (
                "spec.type",
                "FieldValueNotSupported",
                f'Unsupported value: "{svc_type}": supported values: {supported}',
            )
        )
    causes += _load_balancer_class_errors(svc, old)
    old_policy = (old or {}).get("spec", {}).get("ipFamilyPolicy")
    if spec.get("ipFamilyPolicy") == "RequireDualStack" != old_policy:  # when it is set
        causes.append(
            (
                "spec.ipFamilyPolicy",
                "FieldValueInvalid",
                'Invalid value: "RequireDualStack": this cluster is not configured for '
                "dual-stack services",
            )
        )
    etp = spec.get("externalTrafficPolicy")
    if etp is not None and svc_type not in ("NodePort", "LoadBalancer"):
        causes.append(
            (
                "spec.externalTrafficPolicy",
                "FieldValueInvalid",
                f"Invalid value: \"{etp}\": may only be set when `type` is 'NodePort' or "
                "'LoadBalancer'",
            )
        )
    elif etp is not None and etp not in ("Cluster", "Local"):
        causes.append(
            (
                "spec.externalTrafficPolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{etp}": supported values: "Cluster", "Local"',
            )
        )
    if svc_type != "ExternalName" and spec.get("clusterIP") != "None" and not spec.get("ports"):
        causes.append(("spec.ports", "FieldValueRequired", "Required value"))
    causes += load_balancer_status_errors(svc)
    if causes:
        raise invalid("Service", svc.get("metadata", {}).get("name", ""), causes)


def _load_balancer_class_errors(svc: dict[str, Any], old: dict[str, Any] | None) -> list[Cause]:
    path = "spec.loadBalancerClass"
    cls = svc.get("spec", {}).get("loadBalancerClass")
    causes: list[Cause] = []
    changed = old is not None and cls != old.get("spec", {}).get("loadBalancerClass")
    if old is not None and _is_lb(old) and _is_lb(svc) and changed:
        shown = "null" if cls is None else json.dumps(cls)  # Go's %#v: a nil *string is null
        causes.append(
            (path, "FieldValueInvalid", f"Invalid value: {shown}: may not change once set")
        )
    if _is_lb(svc):
        if cls is not None:
            causes += qualified_name_errors(str(cls), path)
    elif cls is not None:
        causes.append(
            (
                path,
                "FieldValueForbidden",
                "Forbidden: may only be used when `type` is 'LoadBalancer'",
            )
        )
    return causes


def load_balancer_status_errors(svc: dict[str, Any]) -> list[Cause]:
    """``ValidateLoadBalancerStatus``: each ingress ``ip`` is an IP; ``ipMode`` needs ``ip``."""
    causes: list[Cause] = []
    ingress = (svc.get("status", {}).get("loadBalancer") or {}).get("ingress") or []
    if not isinstance(ingress, list):
        return [
            ("status.loadBalancer.ingress", "FieldValueInvalid", "Invalid value: must be a list")
        ]
    for i, entry in enumerate(ingress):
        path = f"status.loadBalancer.ingress[{i}]"
        if not isinstance(entry, dict):
            causes.append((path, "FieldValueInvalid", "Invalid value: must be an object"))
            continue
        ip = entry.get("ip")
        if ip:
            try:
                ipaddress.ip_address(str(ip))
            except ValueError:
                causes.append(
                    (
                        f"{path}.ip",
                        "FieldValueInvalid",
                        f'Invalid value: "{ip}": must be a valid IP address, (e.g. 10.9.8.7 or '
                        "2001:db8::ffff)",
                    )
                )
        mode = entry.get("ipMode")
        if mode is not None and not ip:
            causes.append(
                (
                    f"{path}.ipMode",
                    "FieldValueForbidden",
                    "Forbidden: may not be specified when `ip` is not set",
                )
            )
        elif mode is not None and mode not in ("VIP", "Proxy"):
            causes.append(
                (
                    f"{path}.ipMode",
                    "FieldValueNotSupported",
                    f'Unsupported value: "{mode}": supported values: "Proxy", "VIP"',
                )
            )
    return causes
