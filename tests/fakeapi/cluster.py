"""Object lifecycle rules: create/update/patch/delete/list with kube-apiserver semantics.

Generic registry behaviour (``k8s.io/apiserver/pkg/registry/generic/registry.Store``):
optimistic concurrency on ``resourceVersion`` (409 Conflict), ``generateName``, uid and
creationTimestamp on create, ``generation`` (only for the resources whose strategy sets it)
bumped on spec changes only, no-op writes do not bump the resourceVersion, ``/status``
writes change status and metadata but never spec, main-resource writes never change
status, finalizers delay deletion (deletionTimestamp), namespaced objects need an existing
namespace. Patches of every type are retried on an
internal conflict, like ``GuaranteedUpdate``.
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.fakeapi import (
    errors,
    event_rules,
    event_versions,
    fields,
    patch,
    pod_rules,
    reviews,
    service_rules,
)
from tests.fakeapi.admission import MUTATING, VALIDATING, AdmissionChain, Attributes
from tests.fakeapi.resources import BY_KIND, BY_PATH, Resource
from tests.fakeapi.store import Entry, Obj, Store, View

NAMESPACES = BY_PATH[("", "v1", "namespaces")]
SERVICES = BY_PATH[("", "v1", "services")]
PODS = BY_PATH[("", "v1", "pods")]
SERVICE_ACCOUNTS = BY_PATH[("", "v1", "serviceaccounts")]
CORE_EVENTS = BY_PATH[("", "v1", "events")]
EVENTS_V1 = BY_PATH[("events.k8s.io", "v1", "events")]
ADMIN = {
    "username": "kubernetes-admin",
    "groups": ["kubeadm:cluster-admins", "system:authenticated"],
}
NAME_LABEL = "kubernetes.io/metadata.name"
_NO_ADMISSION = {"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class _Retry(Exception):
    """The object changed while admission ran; redo the update from the new state."""


@dataclass
class Context:
    """Per-request facts: who asks, dry run, and the warnings to send back."""

    user: dict[str, Any] = field(default_factory=lambda: dict(ADMIN))
    dry_run: bool = False
    field_validation: str = ""
    warnings: list[str] = field(default_factory=list)


def now_rfc3339() -> str:
    """Current UTC time as Kubernetes writes ``metav1.Time`` (seconds, ``Z``)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def _copy(obj: Obj) -> Obj:
    """A deep copy of a JSON object (faster than ``copy.deepcopy`` for plain JSON)."""
    result: Obj = json.loads(json.dumps(obj))
    return result


def _loads(entry: Entry) -> Obj:
    result: Obj = json.loads(entry.raw)
    return result


class Cluster:
    """The fake cluster state plus the operations the HTTP layer calls."""

    def __init__(self, *, history_limit: int = 200_000) -> None:
        self.store = Store(history_limit=history_limit)
        # One Event resource in two API versions (see event_versions).
        self.store.add_view(
            EVENTS_V1.key,
            View(CORE_EVENTS.key, event_versions.to_events_v1, event_versions.to_core),
        )
        self.allocator = service_rules.Allocator()
        self.admission = AdmissionChain()
        self.tokens: dict[str, dict[str, Any]] = {}
        self.allowed_non_resource: set[tuple[str, str, str]] = set()
        for name in ("default", "kube-system"):
            self.seed([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}])

    # -- helpers ---------------------------------------------------------------------------
    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        entry = self.store.get(NAMESPACES.key, "", namespace)
        return None if entry is None else dict(entry.obj["metadata"].get("labels") or {})

    def _require(self, res: Resource, namespace: str, name: str) -> Entry:
        entry = self.store.get(res.key, namespace, name)
        if entry is None:
            raise errors.not_found(res.group, res.plural, name)
        return entry

    def _require_namespace(self, res: Resource, namespace: str) -> None:
        if res.namespaced and self.store.get(NAMESPACES.key, "", namespace) is None:
            raise errors.not_found("", "namespaces", namespace)

    def _finish(self, res: Resource, obj: Obj, old: Obj | None) -> None:
        """Defaults and validation that run for every write of ``res``."""
        meta = obj["metadata"]
        if res is CORE_EVENTS:
            # Stored in its normal form (the zero values a real server shows), so both
            # versions read alike; checked like legacyValidateEvent for a core/v1 request.
            normalized = event_versions.to_core(event_versions.to_events_v1(obj))
            obj.clear()
            obj.update(normalized)
            causes = event_rules.core_errors(obj)
            if causes:
                raise errors.invalid(res.kind, meta.get("name", ""), causes, group=res.group)
        # Events are validated as the internal core Event whatever the request's group: a
        # real server's Status details carry no group for an events.k8s.io/v1 Event.
        group = "" if res is EVENTS_V1 else res.group
        if old is None:
            name_errors = service_rules.name_errors(meta.get("name", ""), dns1035=res is SERVICES)
            if res is EVENTS_V1:
                name_errors += event_rules.create_errors(obj)
            if name_errors:
                raise errors.invalid(res.kind, meta.get("name", ""), name_errors, group=group)
        elif res is EVENTS_V1:
            update_errors = event_rules.update_errors(obj, old)
            if update_errors:
                raise errors.invalid(res.kind, meta.get("name", ""), update_errors, group=group)
        if res is SERVICES:
            service_rules.apply_defaults(obj, self.allocator)
            service_rules.validate(obj, old)
        if res is PODS:
            pod_rules.apply_defaults(obj)
            pod_rules.validate(obj, old)
        if res.kind == "Secret" and isinstance(obj.get("stringData"), dict):
            # The Secret REST strategy folds stringData into data and never stores it.
            encoded = {
                k: base64.b64encode(str(v).encode()).decode() for k, v in obj["stringData"].items()
            }
            obj["data"] = {**(obj.get("data") or {}), **encoded}
            del obj["stringData"]
        if res is NAMESPACES:
            # SetDefaults_Namespace: the name label is always set (and reset if changed).
            meta["labels"] = {**(meta.get("labels") or {}), NAME_LABEL: meta["name"]}
        if res.has_generation:
            if old is None:
                meta["generation"] = 1
            else:
                bump = _spec_part(obj) != _spec_part(old)
                if res.kind == "EndpointSlice":  # its strategy also bumps on label changes
                    bump = bump or obj["metadata"].get("labels") != old["metadata"].get("labels")
                meta["generation"] = int(old["metadata"].get("generation", 1)) + int(bump)

    async def _admit(
        self, res: Resource, obj: Obj, old: Obj | None, *, op: str, sub: str, ctx: Context
    ) -> None:
        if res.plural in _NO_ADMISSION:
            self._finish(res, obj, old)
            return
        meta = obj["metadata"]
        attrs = Attributes(
            resource=res,
            subresource=sub,
            operation=op,
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            obj=obj,
            old=old,
            dry_run=ctx.dry_run,
            user=ctx.user,
            namespace_labels=self.namespace_labels(meta.get("namespace", ""))
            if res.namespaced
            else None,
        )
        mutating = [e.obj for e in self.store.entries(MUTATING)]
        validating = [e.obj for e in self.store.entries(VALIDATING)]
        if res is SERVICES:
            service_rules.apply_defaults(obj, self.allocator)
        if res is PODS:
            pod_rules.apply_defaults(obj)
            if op == "CREATE":  # the built-in plugins run before the webhooks
                pod_rules.admit_create(
                    obj,
                    service_account_exists=lambda ns, name: (
                        self.store.get(SERVICE_ACCOUNTS.key, ns, name) is not None
                    ),
                )
        if mutating:
            await self.admission.admit(attrs, mutating, ctx.warnings)
        self._finish(res, obj, old)
        if validating:
            await self.admission.validate(attrs, validating, ctx.warnings)

    # -- create ----------------------------------------------------------------------------
    async def create(self, res: Resource, namespace: str, body: Any, ctx: Context) -> Obj:
        """POST a new object; returns the stored object (201)."""
        obj = self._check_body(res, namespace, body, name=None, ctx=ctx)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise errors.error(500, "resourceVersion should not be set on objects to be created")
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.invalid(
                    res.kind,
                    "",
                    [
                        (
                            "metadata.name",
                            "FieldValueRequired",
                            "Required value: name or generateName is required",
                        )
                    ],
                    group=res.group,
                )
            suffix = "".join(random.choices(_GENERATE_ALPHABET, k=5))
            meta["name"] = f"{meta['generateName']}{suffix}"
        self._require_namespace(res, namespace)
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if res is SERVICES:
            obj.pop("status", None)
            obj["status"] = {"loadBalancer": {}}
        if res is NAMESPACES:
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
        if res is PODS:
            obj["status"] = pod_rules.initial_status(obj)
        await self._admit(res, obj, None, op="CREATE", sub="", ctx=ctx)
        if self.store.get(res.key, namespace, meta["name"]) is not None:
            raise errors.already_exists(res.group, res.plural, meta["name"])
        if ctx.dry_run:
            return obj
        return self.store.put(res.key, obj, old=None).obj

    def _check_body(
        self, res: Resource, namespace: str, body: Any, *, name: str | None, ctx: Context
    ) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request(f"the body of the request was not a {res.kind} object")
        obj = _copy(body)
        if obj.get("kind", res.kind) != res.kind or obj.get("apiVersion", res.api_version) != (
            res.api_version
        ):
            raise errors.bad_request(
                f"the API version in the data ({obj.get('apiVersion')}) does not match the "
                f"expected API version ({res.api_version})"
                if obj.get("apiVersion", res.api_version) != res.api_version
                else f"the kind in the data ({obj.get('kind')}) does not match {res.kind}"
            )
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if name is not None and meta.get("name", name) != name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({name})"
            )
        if name is not None:
            meta["name"] = name
        ctx.warnings += fields.check(
            obj, api_version=res.api_version, kind=res.kind, directive=ctx.field_validation
        )
        return obj

    # -- update / patch --------------------------------------------------------------------
    def _prepare_update(self, res: Resource, old: Obj, new: Obj, sub: str) -> Obj:
        if sub == "status":
            # The Node, Service and Namespace status strategies keep the old spec and take
            # the new status *and metadata* (labels, annotations, finalizers): they do not
            # call ResetObjectMetaForStatus (a real v1.35 server keeps a label sent to
            # /status).
            result = copy.deepcopy(old)
            result["metadata"] = new["metadata"]
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            new = result
        meta, old_meta = new["metadata"], old["metadata"]
        for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta.pop("managedFields", None)
        if old_meta.get("deletionTimestamp"):
            added = [
                f for f in meta.get("finalizers") or [] if f not in old_meta.get("finalizers", [])
            ]
            if added:
                shown = "[]string{" + ", ".join(json.dumps(f) for f in added) + "}"
                raise errors.invalid(
                    res.kind,
                    meta["name"],
                    [
                        (
                            "metadata.finalizers",
                            "FieldValueForbidden",
                            "Forbidden: no new finalizers can be added if the object is being "
                            f"deleted, found new finalizers {shown}",
                        )
                    ],
                    group=res.group,
                )
        if sub == "status":
            return new
        if res.has_status:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        if res is SERVICES:
            service_rules.prepare_update(new, old)
        if res is NAMESPACES:
            new["spec"] = copy.deepcopy(old.get("spec", {}))
        return new

    async def _commit_update(
        self, res: Resource, cur: Entry, new: Obj, *, sub: str, ctx: Context
    ) -> Obj:
        old = cur.obj
        new = self._prepare_update(res, old, new, sub)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        await self._admit(res, new, old, op="UPDATE", sub=sub, ctx=ctx)
        meta = new["metadata"]
        now = self.store.get(res.key, meta.get("namespace", ""), meta["name"])
        if (
            now is None
            or now.obj["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"]
        ):
            raise _Retry
        if new == old or ctx.dry_run:
            return new
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self.store.remove(res.key, new).obj
        return self.store.put(res.key, new, old=old).obj

    async def update(
        self, res: Resource, namespace: str, name: str, body: Any, *, sub: str, ctx: Context
    ) -> Obj:
        """PUT (replace) the object or its ``/status``; 409 Conflict on a stale resourceVersion."""
        obj = self._check_body(res, namespace, body, name=name, ctx=ctx)
        wanted = obj["metadata"].get("resourceVersion")
        for _ in range(10):
            cur = self._require(res, namespace, name)
            if wanted and wanted != cur.obj["metadata"]["resourceVersion"]:
                raise errors.conflict(res.group, res.plural, name, errors.STALE)
            try:
                return await self._commit_update(res, cur, copy.deepcopy(obj), sub=sub, ctx=ctx)
            except _Retry:
                continue
        raise errors.conflict(res.group, res.plural, name, errors.STALE)

    async def patch(
        self,
        res: Resource,
        namespace: str,
        name: str,
        body: bytes,
        *,
        content_type: str,
        sub: str,
        ctx: Context,
    ) -> Obj:
        """PATCH with merge, strategic-merge or JSON patch (apply-patch answers 415)."""
        if content_type == patch.APPLY_PATCH:
            raise errors.error(
                415,
                "the fake API does not implement server-side apply "
                f"(Content-Type {patch.APPLY_PATCH}); use client-side apply",
            )
        try:
            doc = json.loads(body or b"null")
        except ValueError as err:
            raise errors.bad_request(f"error decoding patch: {err}") from None
        for _ in range(10):
            cur = self._require(res, namespace, name)
            target = _loads(cur)
            if content_type == patch.MERGE_PATCH:
                if not isinstance(doc, dict):
                    raise errors.bad_request("json: cannot unmarshal non-object into a merge patch")
                result = patch.merge_patch(target, doc)
            elif content_type == patch.STRATEGIC_MERGE_PATCH:
                if not isinstance(doc, dict):
                    raise errors.bad_request("json: cannot unmarshal non-object into a patch")
                schema = patch.kind_schema(res.api_version, res.kind)
                result = patch.strategic_merge_patch(target, doc, schema)
            elif content_type == patch.JSON_PATCH:
                result = patch.json_patch(target, doc)
            else:
                raise errors.error(
                    415,
                    f"the body of the request was in an unknown format - accepted media "
                    f"types include: {patch.JSON_PATCH}, {patch.MERGE_PATCH}, "
                    f"{patch.STRATEGIC_MERGE_PATCH}",
                )
            obj = self._check_body(res, namespace, result, name=name, ctx=ctx)
            wanted = obj["metadata"].get("resourceVersion")
            if wanted and wanted != cur.obj["metadata"]["resourceVersion"]:
                raise errors.conflict(res.group, res.plural, name, errors.STALE)
            try:
                return await self._commit_update(res, cur, obj, sub=sub, ctx=ctx)
            except _Retry:
                continue
        raise errors.conflict(res.group, res.plural, name, errors.STALE)

    # -- delete ----------------------------------------------------------------------------
    def delete(
        self, res: Resource, namespace: str, name: str, options: Any, ctx: Context
    ) -> tuple[int, Obj]:
        """DELETE: honours finalizers and preconditions; returns (HTTP code, body)."""
        cur = self._require(res, namespace, name)
        pre = (options or {}).get("preconditions") or {} if isinstance(options, dict) else {}
        meta = cur.obj["metadata"]
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise errors.conflict(
                res.group,
                res.plural,
                name,
                f"the ResourceVersion in the precondition ({pre['resourceVersion']}) does not "
                f"match the ResourceVersion in record ({meta['resourceVersion']}). The object "
                "might have been modified",
            )
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise errors.conflict(
                res.group,
                res.plural,
                name,
                f"the UID in the precondition ({pre['uid']}) does not match the UID in record "
                f"({meta['uid']}). The object might have been deleted and then recreated",
            )
        obj = _loads(cur)
        if res is PODS:
            return self._delete_pod(cur, obj, options if isinstance(options, dict) else {}, ctx)
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp") or ctx.dry_run:
                return 200, obj
            obj["metadata"]["deletionTimestamp"] = now_rfc3339()
            obj["metadata"]["deletionGracePeriodSeconds"] = 0
            return 200, self.store.put(res.key, obj, old=cur.obj).obj
        if ctx.dry_run:
            return 200, obj
        if res is NAMESPACES:
            self._delete_namespace_contents(name)
        gone = self.store.remove(res.key, obj).obj
        if res is SERVICES:
            return 200, gone
        details: dict[str, Any] = {"name": name, "kind": res.plural, "uid": meta["uid"]}
        details["group"] = res.group
        return 200, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }

    def _delete_pod(
        self, cur: Entry, obj: Obj, options: dict[str, Any], ctx: Context
    ) -> tuple[int, Obj]:
        """A Pod's delete is graceful (``CheckGracefulDelete``): it gets a
        ``deletionTimestamp`` ``gracePeriodSeconds`` ahead (default its
        ``terminationGracePeriodSeconds``; 0 when unbound or ended) and stays until the
        kubelet, or a delete with period 0, ends it; the answer is the Pod. A period-0
        delete writes the mark first, then removes the Pod (two watch events, MODIFIED and
        DELETED, as kube-apiserver sends them)."""
        period = pod_rules.grace_period(obj, options)
        changed = pod_rules.mark_deleted(obj, period)
        if ctx.dry_run:
            return 200, obj
        if changed:
            obj = self.store.put(PODS.key, obj, old=cur.obj).obj
        if period > 0 or obj["metadata"].get("finalizers"):
            return 200, obj
        return 200, self.store.remove(PODS.key, _copy(obj)).obj

    def _delete_namespace_contents(self, namespace: str) -> None:
        for res in BY_PATH.values():
            if res.namespaced:
                for entry in self.store.entries(res.key, namespace):
                    self.store.remove(res.key, _loads(entry))

    # -- reviews ---------------------------------------------------------------------------
    def review(self, res: Resource, body: Any) -> Obj:
        """TokenReview / SubjectAccessReview answers (see :mod:`tests.fakeapi.reviews`)."""
        return reviews.answer(
            res, body, tokens=self.tokens, allowed_non_resource=self.allowed_non_resource
        )

    # -- seeding ---------------------------------------------------------------------------
    def seed(self, objects: list[Obj]) -> list[Obj]:
        """Store objects as they are (status kept), bypassing admission and validation.

        Used for kubectl dumps: ``resourceVersion`` is reassigned, missing uid and
        creationTimestamp are filled in, and missing namespaces are created. Raises
        :class:`ValueError` for an object of a kind the fake API does not serve.
        """
        stored = []
        for raw in objects:
            res = BY_KIND.get((str(raw.get("apiVersion")), str(raw.get("kind"))))
            if res is None or res.create_only:
                raise ValueError(
                    f"cannot seed {raw.get('apiVersion')}/{raw.get('kind')} "
                    f"{raw.get('metadata', {}).get('name')!r}: not served by the fake API"
                )
            obj = _copy(raw)
            meta = obj.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
            meta.pop("managedFields", None)
            if res.has_generation:
                meta.setdefault("generation", 1)
            if res.namespaced:
                meta.setdefault("namespace", "default")
                if self.store.get(NAMESPACES.key, "", meta["namespace"]) is None:
                    self.seed(
                        [
                            {
                                "apiVersion": "v1",
                                "kind": "Namespace",
                                "metadata": {"name": meta["namespace"]},
                            }
                        ]
                    )
            if res is NAMESPACES:
                meta["labels"] = {**(meta.get("labels") or {}), NAME_LABEL: meta["name"]}
                obj.setdefault("spec", {"finalizers": ["kubernetes"]})
                obj.setdefault("status", {"phase": "Active"})
            if res is SERVICES:
                service_rules.apply_defaults(obj, self.allocator)
            if res is PODS:
                pod_rules.apply_defaults(obj)
            cur = self.store.get(res.key, meta.get("namespace", ""), meta["name"])
            stored.append(self.store.put(res.key, obj, old=cur.obj if cur else None).obj)
        return stored
