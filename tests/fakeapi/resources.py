"""The resources the fake API serves, and the discovery documents describing them.

Shapes follow kube-apiserver's ``/api``, ``/apis``, ``/api/v1`` and ``/apis/<group>/<version>``
answers (``APIVersions``, ``APIGroupList``, ``APIGroup``, ``APIResourceList``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.fakeapi import pod_rules

RW_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
STATUS_VERBS = ["get", "patch", "update"]


@dataclass(frozen=True)
class Resource:
    """One served resource (``group`` ``""`` = core)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool = False
    create_only: bool = False
    short_names: tuple[str, ...] = ()
    field_labels: tuple[str, ...] = field(default=())
    field_aliases: tuple[tuple[str, str], ...] = ()
    """``(label, what it means)``: labels the field-label conversion renames."""
    field_defaults: tuple[tuple[str, str], ...] = ()
    """``(label, value)``: what a selector sees for a field the object leaves out (a bool
    formatted with ``strconv.FormatBool`` is ``false``, never ``""``)."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """``plural`` for core, ``plural.group`` otherwise (the store's collection key)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def has_generation(self) -> bool:
        """Whether the resource's REST strategy maintains ``metadata.generation`` (set to 1 on
        create, bumped on spec changes). Of the served kinds only these do on v1.35; Nodes,
        Services, Namespaces, Leases, Secrets, ServiceAccounts and Events carry none (a Pod
        also bumps it when a graceful delete starts)."""
        return self.kind in {
            "Pod",
            "EndpointSlice",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        }


RESOURCES: tuple[Resource, ...] = (
    Resource(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        True,
        short_names=("no",),
        field_labels=("spec.unschedulable",),
    ),
    Resource(
        "",
        "v1",
        "services",
        "Service",
        True,
        True,
        short_names=("svc",),
        field_labels=("spec.clusterIP", "spec.type"),
    ),
    Resource(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        True,
        short_names=("ns",),
        field_labels=("status.phase",),
    ),
    Resource(
        "",
        "v1",
        "events",
        "Event",
        True,
        short_names=("ev",),
        field_labels=(
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ),
    ),
    Resource("", "v1", "secrets", "Secret", True, field_labels=("type",)),
    Resource(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        True,
        short_names=("po",),
        field_labels=pod_rules.FIELD_LABELS,
        field_aliases=pod_rules.FIELD_ALIASES,
        field_defaults=pod_rules.FIELD_DEFAULTS,
    ),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True, short_names=("sa",)),
    Resource("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",)),
    Resource(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "EndpointSlice",
        True,
        field_labels=("addressType",),
    ),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True),
    Resource(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        True,
        short_names=("ev",),
        field_labels=(
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "reason",
            "reportingController",
            "type",
        ),
    ),
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
    ),
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        False,
    ),
    Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False, create_only=True),
    Resource(
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "SubjectAccessReview",
        False,
        create_only=True,
    ),
)

BY_PATH: dict[tuple[str, str, str], Resource] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}
BY_KIND: dict[tuple[str, str], Resource] = {(r.api_version, r.kind): r for r in RESOURCES}
GROUPS: dict[str, list[str]] = {}
for _r in RESOURCES:
    if _r.group and _r.version not in GROUPS.setdefault(_r.group, []):
        GROUPS[_r.group].append(_r.version)


def lookup(group: str, version: str, plural: str) -> Resource | None:
    """The resource served at ``/apis/<group>/<version>/<plural>`` (``""`` group = ``/api/v1``)."""
    return BY_PATH.get((group, version, plural))


def api_versions(server_address: str) -> dict[str, Any]:
    """``GET /api``."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def api_group(group: str) -> dict[str, Any]:
    """``GET /apis/<group>``."""
    versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in GROUPS[group]]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": versions,
        "preferredVersion": versions[0],
    }


def api_group_list() -> dict[str, Any]:
    """``GET /apis``."""
    groups = [api_group(g) for g in GROUPS]
    for g in groups:
        del g["kind"], g["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    """``GET /api/v1`` or ``/apis/<group>/<version>``; ``None`` when the version is not served."""
    items: list[dict[str, Any]] = []
    for r in RESOURCES:
        if (r.group, r.version) != (group, version):
            continue
        entry: dict[str, Any] = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": ["create"] if r.create_only else RW_VERBS,
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        items.append(entry)
        if r.has_status:
            items.append(
                {
                    "name": f"{r.plural}/status",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": STATUS_VERBS,
                }
            )
    if not items:
        return None
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": items}


VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-fakeapi",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}
