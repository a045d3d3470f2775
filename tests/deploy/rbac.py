"""A small RBAC authorizer over rendered Role/ClusterRole rules (test helper).

Follows k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac (``RuleAllows``): a request is
allowed when some rule bound to the subject matches its verb, API group, resource (with
``resource/subresource`` for subresources, ``*`` and ``*/subresource`` wildcards) and,
when the rule lists ``resourceNames``, its object name. A RoleBinding grants only inside
its own namespace; a ClusterRoleBinding grants everywhere, cluster-scoped objects included.
As in the real authorizer, a rule with ``resourceNames`` never matches a request without a
name (``create``, and ``list``/``watch`` without a ``metadata.name`` field selector).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Request:
    """One resource request as the API server's authorizer sees it (RequestInfo)."""

    verb: str  # get list watch create update patch delete deletecollection
    group: str  # "" for core
    resource: str  # plural, e.g. "services"
    subresource: str = ""  # e.g. "status"
    namespace: str = ""  # "" for cluster-scoped objects and cluster-wide list/watch
    name: str = ""  # "" for create, list, watch

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Request:
        """The request of one entry of the fake API's ``request_log()``."""
        return cls(**{field: record[field] for field in cls.__slots__})

    @property
    def action(self) -> str:
        """``verb resource[/subresource]``, e.g. ``patch services/status``."""
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {resource}"

    def __str__(self) -> str:
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        group = self.group or "core"
        where = f" in namespace {self.namespace}" if self.namespace else " (cluster scope)"
        name = f" {self.name!r}" if self.name else ""
        return f"{self.verb} {group} {resource}{name}{where}"


def _rule_allows(rule: Mapping[str, Any], request: Request) -> bool:
    verbs = rule.get("verbs", [])
    groups = rule.get("apiGroups", [])
    resources = rule.get("resources", [])
    names = rule.get("resourceNames", [])
    if not ("*" in verbs or request.verb in verbs):
        return False
    if not ("*" in groups or request.group in groups):
        return False
    if request.subresource:
        combined = f"{request.resource}/{request.subresource}"
        wanted = {combined, "*", f"*/{request.subresource}"}
    else:
        wanted = {request.resource, "*"}
    if not wanted & set(resources):
        return False
    return not names or request.name in names


@dataclass(frozen=True, slots=True)
class Authorizer:
    """RBAC over a set of rendered objects for one ServiceAccount."""

    objects: tuple[Mapping[str, Any], ...]
    namespace: str
    service_account: str

    @classmethod
    def for_service_account(
        cls, objects: Iterable[Mapping[str, Any]], *, namespace: str, name: str
    ) -> Authorizer:
        """Build an authorizer for ``system:serviceaccount:<namespace>:<name>``."""
        return cls(objects=tuple(objects), namespace=namespace, service_account=name)

    def _binds_us(self, binding: Mapping[str, Any]) -> bool:
        return any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == self.service_account
            and s.get("namespace", binding["metadata"].get("namespace")) == self.namespace
            for s in binding.get("subjects", [])
        )

    def _role(self, kind: str, name: str, namespace: str | None) -> Mapping[str, Any] | None:
        for obj in self.objects:
            meta = obj["metadata"]
            same = obj["kind"] == kind and meta["name"] == name
            if same and (kind == "ClusterRole" or meta.get("namespace") == namespace):
                return obj
        return None

    def rules_for(self, namespace: str) -> list[Mapping[str, Any]]:
        """The rules that apply to a request in ``namespace`` ("" = cluster scope)."""
        rules: list[Mapping[str, Any]] = []
        for binding in self.objects:
            if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
                continue
            if not self._binds_us(binding):
                continue
            binding_namespace = binding["metadata"].get("namespace")
            if binding["kind"] == "RoleBinding" and binding_namespace != namespace:
                continue
            ref = binding["roleRef"]
            role = self._role(ref["kind"], ref["name"], binding_namespace)
            if role is not None:
                rules.extend(role.get("rules", []))
        return rules

    def allows(self, request: Request) -> bool:
        """True when some bound rule allows ``request``."""
        return any(_rule_allows(rule, request) for rule in self.rules_for(request.namespace))

    def denied(self, requests: Iterable[Request]) -> list[str]:
        """The distinct ``requests`` these rules deny, as sorted sentences."""
        return sorted({str(r) for r in requests if not self.allows(r)})
