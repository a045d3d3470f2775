"""Cilium's kube-proxy replacement, where the cluster says it, and the hazard of its wildcard
service entries for node addresses published as load-balancer ingress (pure).

docs/design.md §4.12. The upstream facts, read in Cilium's source of each release named
(``pkg/loadbalancer/reconciler/bpf_reconciler.go``, ``bpf/lib/lb.h``,
``bpf/lib/nodeport.h``, ``bpf/bpf_host.c``, ``pkg/datapath/linux/config/config.go``,
``pkg/lbipamconfig/cell.go``) and in the issues:

- **What breaks.** Cilium 1.19 added *wildcard service entries* (cilium/cilium PR #40684):
  for the address of a LoadBalancer (or external-scope ClusterIP) frontend the agent also
  writes a service-map entry of port 0, protocol ANY and no backend.
  ``lb4_lookup_service(key, east_west=false)`` falls back to it when no Service has the
  packet's port, and the caller drops the packet. That north-south lookup is
  ``nodeport_lb4`` on traffic entering a node's devices (``bpf_host.c``), compiled in with
  ``ENABLE_NODEPORT``, which the agent defines with ``kube-proxy-replacement`` or
  ``enable-bpf-masquerade`` true (``config.go``). Socket load balancing (``bpf-lb-sock``,
  ``bpf-lb-sock-hostns-only``) looks up east-west only and never uses the entry. So when
  a *node's own* address is a frontend, that node drops every packet to it on a port no
  Service has: SSH, the kubelet, the replies to the node's own outgoing connections
  (cilium/cilium#43206 "KPR misbehaving when a kubernetes service of type LB advertise a
  node IP in its status"; #44430 SSH and host egress broken after upgrading to 1.19;
  #44487 the node named by a Gateway address goes NotReady on v1.19.1; #44730 SSH lost
  on v1.19.1 with RKE2's ServiceLB; #46010, Talos hosts offline with 1.19 and KPR, where
  the wildcard entries are one suspect among others).
- **Which Services.** Before v1.19.0 was released, PRs #43565 and #43721 limited the
  entries to Services whose ``spec.loadBalancerClass`` Cilium allocates for:
  ``io.cilium/bgp-control-plane``, ``io.cilium/l2-announcer``, and class-less Services
  when the agent's ``default-lb-service-ipam`` is ``lbipam`` (its default, also when the
  key is absent). ``io.cilium/node``, our class, gets none in any 1.19 release
  (``useWildcard`` in v1.19.0 to v1.19.4, ``isWildcardClass`` from v1.19.5). Earlier
  1.19.0 pre-releases gave every LoadBalancer frontend one.
- **Fixed.** PR #45572 ("do not allow service wildcard entries against node IPs") makes
  the agent skip the entry for an address of its own node (``isLocalAddr`` in
  ``BPFOps.Update``): in v1.19.5 and in 1.20 (read in v1.20.2; it reached main in April
  2026, before v1.20.0), absent from v1.19.0 to v1.19.4 and from the 1.20.0 pre-releases
  cut before it. 1.18 and older have no wildcard entries (they came with 1.19, #44730,
  and the issues above report 1.18 working). PR #46647 later adds the hidden switch
  ``bpf-lb-enable-wildcard-entries`` (v1.20.2; unknown to the affected releases, so it
  avoids nothing there).

So the hazard holds when the agents load-balance north-south, run an affected release,
and one of our Services has a class Cilium gives entries to: class-less ones when our
``default-lb-service-ipam`` is ``nodeipam`` and the agent's is ``lbipam``, or every one
when our ``load-balancer-class`` is one of Cilium's own allocating classes.

Where the cluster says it: the ConfigMap ``kube-system/cilium-config`` (the Helm chart's
keys ``kube-proxy-replacement``, ``enable-bpf-masquerade``, ``default-lb-service-ipam``),
and the release in the image tag of the ``cilium-agent`` container of the agent Pods
(``kube-system``, label ``k8s-app=cilium``, the chart's DaemonSet). Nothing here raises on
what it reads: garbage leaves the hazard unknown, with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.hazards import CILIUM_WILDCARD_ENTRIES, Hazard
from app.core.text import elide

CONFIG_MAP = ("kube-system", "cilium-config")
"""``(namespace, name)`` of the agent's ConfigMap (Cilium's Helm chart)."""
AGENT_NAMESPACE = "kube-system"
AGENT_LABEL = ("k8s-app", "cilium")
"""The label of the agent Pods (the chart's ``cilium`` DaemonSet)."""
AGENT_CONTAINER = "cilium-agent"
AGENT_FIELD_SELECTOR = f"metadata.namespace={AGENT_NAMESPACE}"
"""The cluster-wide Pod List the controller reads the agents from (Pods of kube-system)."""
WILDCARD_CLASSES = frozenset({"io.cilium/bgp-control-plane", "io.cilium/l2-announcer"})
"""Classes Cilium gives wildcard entries to (``isWildcardClass``, ``BGPLoadBalancerClass``
and ``L2AnnounceLoadBalancerClass``), besides class-less Services with ``lbipam``."""
FIXED_IN = "v1.19.5"
"""The first 1.19 release with PR #45572."""
ADVICE_UPGRADE = f"upgrade Cilium to {FIXED_IN} or later (cilium/cilium#45572)"
_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})
_FALSE = frozenset({"0", "f", "F", "false", "FALSE", "False"})
"""What the agent's flags take for a boolean (viper: Go's ``strconv.ParseBool``)."""
_VERSION = re.compile(r"v?(\d{1,4})\.(\d{1,4})\.(\d{1,4})(?:-([0-9A-Za-z][0-9A-Za-z.+_-]*))?")
_PRE = re.compile(r"(pre|rc|snapshot|alpha|beta)", re.I)
_SHOWN = 60
"""Characters of a read value a message quotes."""


@dataclass(frozen=True, slots=True, order=True)
class Version:
    """A Cilium release from an image tag: ``suffix`` is what follows ``-`` (``pre.3``,
    ``rc.1``, ``cee.1``; empty for a release)."""

    major: int
    minor: int
    patch: int
    suffix: str = ""

    @property
    def prerelease(self) -> bool:
        """True for a ``-pre.N``, ``-rc.N`` (or alpha, beta, snapshot) tag; another suffix
        (a vendor build such as ``-cee.1``) is read as the release it builds on."""
        return bool(_PRE.match(self.suffix))

    def __str__(self) -> str:
        tail = f"-{self.suffix}" if self.suffix else ""
        return f"v{self.major}.{self.minor}.{self.patch}{tail}"


def parse_version(tag: str) -> Version | None:
    """The :class:`Version` of an image tag (``v1.19.3``, ``1.19.3``, ``v1.19.0-rc.1``),
    or ``None`` when the tag is not one (``latest``, a commit). Never raises."""
    match = _VERSION.fullmatch(tag) if isinstance(tag, str) else None
    if match is None:
        return None
    major, minor, patch, suffix = match.groups()
    return Version(int(major), int(minor), int(patch), suffix or "")


def image_version(image: str) -> Version | None:
    """The :class:`Version` of a container image reference's tag
    (``quay.io/cilium/cilium:v1.19.3@sha256:…``; a registry port is not a tag), ``None``
    for a reference without a version tag (digest only, ``latest``). Never raises."""
    if not isinstance(image, str):
        return None
    name = image.split("@", 1)[0]
    _, colon, tag = name.rpartition(":")
    if not colon or "/" in tag:
        return None
    return parse_version(tag)


def agent_images(pods: Iterable[Any]) -> list[str]:
    """The distinct images (sorted) of the ``cilium-agent`` containers of the agent Pods
    among ``pods`` (``kube-system``, label ``k8s-app=cilium``); anything else, and
    anything malformed, is skipped. Never raises."""
    found: set[str] = set()
    key, value = AGENT_LABEL
    for pod in pods:
        if not isinstance(pod, Mapping):
            continue
        meta, spec = pod.get("metadata"), pod.get("spec")
        if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
            continue
        labels = meta.get("labels")
        if meta.get("namespace") != AGENT_NAMESPACE or not isinstance(labels, Mapping):
            continue
        if labels.get(key) != value or not isinstance(spec.get("containers"), list):
            continue
        for container in spec["containers"]:
            if isinstance(container, Mapping) and container.get("name") == AGENT_CONTAINER:
                image = container.get("image")
                if isinstance(image, str) and image:
                    found.add(image)
    return sorted(found)


def is_agent_pod(obj: Mapping[str, Any]) -> bool:
    """True when ``obj`` (a Pod) is a Cilium agent Pod whose image :func:`agent_images`
    reads. Never raises."""
    return bool(agent_images([obj]))


@dataclass(frozen=True, slots=True)
class CiliumConfig:
    """What the hazard reads of ``cilium-config``, absent keys at the agent's defaults:
    ``kube_proxy_replacement`` and ``bpf_masquerade`` (either compiles the north-south
    load balancer in) false, ``default_lb_service_ipam`` ``lbipam``."""

    kube_proxy_replacement: bool = False
    bpf_masquerade: bool = False
    default_lb_service_ipam: str = "lbipam"

    @property
    def north_south(self) -> bool:
        """True when the agents load-balance traffic entering the nodes (``ENABLE_NODEPORT``),
        the path that drops on a wildcard entry."""
        return self.kube_proxy_replacement or self.bpf_masquerade

    def trigger(self) -> str:
        """The key that turns the north-south load balancer on, as set."""
        if self.kube_proxy_replacement:
            return "kube-proxy-replacement true"
        return "enable-bpf-masquerade true"


def read_config(config_map: Mapping[str, Any] | None) -> CiliumConfig | str:
    """The :class:`CiliumConfig` of the ConfigMap object ``kube-system/cilium-config``, or a
    sentence saying why it cannot be read: no ConfigMap (``None``: Cilium is not
    installed there), no ``data``, a value that is not a string, a boolean key that is not
    a boolean the agent takes. Never raises."""
    where = "ConfigMap {}/{}".format(*CONFIG_MAP)
    if config_map is None:
        return f"no {where}: Cilium is not installed in kube-system"
    if not isinstance(config_map, Mapping):
        return f"{where} is not an object"
    data = config_map.get("data")
    if data is None:  # a ConfigMap without data: every key at its default
        data = {}
    if not isinstance(data, Mapping):
        return f"{where}: data is not a map of strings"
    values: dict[str, Any] = {}
    for key, default in (
        ("kube-proxy-replacement", "false"),
        ("enable-bpf-masquerade", "false"),
        ("default-lb-service-ipam", "lbipam"),
    ):
        raw = data.get(key, default)
        if not isinstance(raw, str):
            return f"{where}: {key} is not a string: {elide(repr(raw), _SHOWN)}"
        if key == "default-lb-service-ipam":
            values[key] = raw
        elif raw.strip() in _TRUE | _FALSE:
            values[key] = raw.strip() in _TRUE
        else:
            return (
                f"{where}: {key} is {elide(repr(raw), _SHOWN)}, not a boolean the agent"
                " takes (true or false)"
            )
    return CiliumConfig(
        kube_proxy_replacement=values["kube-proxy-replacement"],
        bpf_masquerade=values["enable-bpf-masquerade"],
        default_lb_service_ipam=values["default-lb-service-ipam"],
    )


def _affected(version: Version) -> str | None:
    """``"every"`` (a 1.19.0 pre-release: every LoadBalancer Service), ``"classes"`` (the
    wildcard classes only) or ``None`` (not affected) for an agent release."""
    base = (version.major, version.minor, version.patch)
    if base == (1, 19, 0) and version.prerelease:
        return "every"
    if (1, 19, 0) <= base < (1, 19, 5):
        return "classes"
    if base == (1, 20, 0) and version.suffix.lower().startswith("pre"):
        return "classes"
    return None


@dataclass(frozen=True, slots=True)
class Assessment:
    """The outcome of :func:`assess`. ``known`` False: the hazard cannot be decided and
    ``facts`` says why; else ``facts`` says what was found (one INFO log line) and
    ``hazard`` is set when it holds."""

    known: bool
    facts: str
    hazard: Hazard | None = None


def assess(
    config_map: Mapping[str, Any] | None,
    images: Sequence[str] | None,
    *,
    load_balancer_class: str,
    default_lb_service_ipam: str,
    images_error: str | None = None,
) -> Assessment:
    """Whether Cilium's wildcard entries break the nodes whose addresses we publish
    (docs/design.md §4.12; the rule and its sources: the module docstring).

    Args:
        config_map: the ConfigMap object ``kube-system/cilium-config``, ``None`` when
            absent.
        images: the ``cilium-agent`` images (:func:`agent_images`); ``None`` when the agent
            Pods could not be read (``images_error`` says why).
        load_balancer_class: our ``load-balancer-class`` setting.
        default_lb_service_ipam: our ``default-lb-service-ipam`` setting (``nodeipam``:
            class-less Services are ours).
        images_error: why ``images`` is ``None``.

    Returns:
        An :class:`Assessment`; its hazard names the releases found, what breaks and what
        to upgrade to or set, and concerns the classes of our Services that get wildcard
        entries. Never raises on what it reads: garbage gives ``known`` False.
    """
    config = read_config(config_map)
    if isinstance(config, str):
        return Assessment(False, config)
    settings = (
        f"kube-proxy-replacement {str(config.kube_proxy_replacement).lower()},"
        f" enable-bpf-masquerade {str(config.bpf_masquerade).lower()},"
        f" default-lb-service-ipam {elide(config.default_lb_service_ipam, _SHOWN)}"
    )
    if not config.north_south:
        return Assessment(
            True, f"Cilium does not load-balance traffic entering the nodes ({settings})"
        )
    if images is None:
        return Assessment(False, f"Cilium's release is unknown: {images_error or 'not read'}")
    if not images:
        return Assessment(
            False,
            f"Cilium's release is unknown: no {AGENT_CONTAINER} container in the Pods of"
            f" {AGENT_NAMESPACE} labelled {'='.join(AGENT_LABEL)}",
        )
    versions = {image: image_version(image) for image in images}
    unknown = [image for image, v in versions.items() if v is None]
    found = sorted({v for v in versions.values() if v is not None})
    affected = [v for v in found if _affected(v)]
    shown = ", ".join(str(v) for v in found) or "none"
    if not affected:
        if unknown:
            return Assessment(
                False,
                f"Cilium's release is unknown: image {elide(unknown[0], 200)} has no"
                f" version tag ({settings})",
            )
        return Assessment(
            True,
            f"Cilium {shown} ({settings}): not affected (wildcard entries came with 1.19;"
            f" from {FIXED_IN} they skip the node's own addresses)",
        )
    every = any(_affected(v) == "every" for v in affected)
    classes: set[str | None] = set()
    cilium_lbipam = config.default_lb_service_ipam == "lbipam"
    if default_lb_service_ipam == "nodeipam" and (every or cilium_lbipam):
        classes.add(None)
    if every or load_balancer_class in WILDCARD_CLASSES:
        classes.add(load_balancer_class)
    releases = ", ".join(str(v) for v in affected)
    if not classes:
        return Assessment(
            True,
            f"Cilium {shown} ({settings}) gives wildcard entries to Services of class"
            f" {', '.join(sorted(WILDCARD_CLASSES))} and to class-less ones when its"
            f" default-lb-service-ipam is lbipam; ours ({load_balancer_class}"
            + (", and class-less ones" if default_lb_service_ipam == "nodeipam" else "")
            + ") get none: not affected",
        )
    return Assessment(
        True,
        f"Cilium {shown} ({settings})",
        Hazard(
            CILIUM_WILDCARD_ENTRIES,
            _message(releases, config, classes, load_balancer_class, every=every),
            frozenset(classes),
        ),
    )


def _message(
    releases: str,
    config: CiliumConfig,
    classes: set[str | None],
    load_balancer_class: str,
    *,
    every: bool,
) -> str:
    """The hazard's text: what runs, what breaks, what to upgrade to or set."""
    if every:
        which = "every LoadBalancer Service (a 1.19.0 pre-release)"
    else:
        kinds = []
        if None in classes:
            kinds.append(
                "Services without spec.loadBalancerClass"
                " (Cilium's default-lb-service-ipam is lbipam)"
            )
        if load_balancer_class in classes:
            kinds.append(f"Services of class {load_balancer_class}")
        which = " and ".join(kinds)
    remedies = [ADVICE_UPGRADE]
    if not every and None in classes:
        remedies.append(
            "set default-lb-service-ipam to nodeipam or none in ConfigMap"
            " kube-system/cilium-config and restart the agents, or recreate these Services"
            " with spec.loadBalancerClass io.cilium/node"
        )
    if not every and load_balancer_class in classes:
        remedies.append("set load-balancer-class to io.cilium/node")
    return (
        f"Cilium {releases} load-balances traffic entering the nodes ({config.trigger()} in"
        f" ConfigMap kube-system/cilium-config) and adds a wildcard entry (cilium/cilium"
        f"#40684) for the addresses published for {which}: the node owning such an address"
        " drops every packet to it on a port no Service has, so SSH, the kubelet and the"
        " replies to the node's own connections break (cilium/cilium#43206, #44430,"
        f" #44487); {', or '.join(remedies)} (docs/design.md §4.12)"
    )
