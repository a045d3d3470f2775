"""Pod defaulting, validation, admission and graceful deletion, as kube-apiserver does them.

Sources (v1.35): ``pkg/apis/core/v1/defaults.go`` (``SetDefaults_Pod``, ``_PodSpec``,
``_Container``, ``_ContainerPort``: a host-network Pod's ``hostPort`` defaults to its
``containerPort``), ``pkg/registry/core/pod/strategy.go`` (``PrepareForCreate``: status
reset to ``Pending`` with its QoS class, ``generation`` 1, bumped by a graceful delete;
``CheckGracefulDelete``; ``ToSelectableFields``), ``pkg/apis/core/v1/conversion.go`` (the
Pod field labels), ``pkg/apis/core/validation`` (the few rules below) and the admission
plugins a default kube-apiserver runs on a Pod create: ``ServiceAccount`` (the account,
``default`` unless named, must exist), ``Priority`` and ``DefaultTolerationSeconds``.
Only what the tests meet is modelled: no projected token volume, no ephemeral containers,
no resource-quantity parsing beyond presence.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable
from typing import Any

from tests.fakeapi.errors import forbidden, invalid

Cause = tuple[str, str, str]

FIELD_LABELS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
)
"""The Pod field labels besides ``metadata.name``/``metadata.namespace``
(``AddFieldLabelConversionFunc`` for Pod; anything else is ``400 field label not
supported``)."""
FIELD_ALIASES = (("spec.host", "spec.nodeName"),)
"""``spec.host``, what old clients send, is ``spec.nodeName``."""
FIELD_DEFAULTS = (("spec.hostNetwork", "false"),)
"""``ToSelectableFields`` formats ``spec.hostNetwork`` with ``strconv.FormatBool``: a Pod
without the field is ``false`` to a selector, never ``""``."""

DEFAULT_TOLERATIONS = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)
"""What the ``DefaultTolerationSeconds`` admission plugin adds (5 minutes each)."""

_UPDATABLE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)


def _containers(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for field in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field) or []):
            if isinstance(container, dict):
                out.append((f"spec.{field}[{i}]", container))
    return out


def apply_defaults(obj: dict[str, Any]) -> None:
    """``SetDefaults_Pod`` and friends, in place (on every write, as decoding does)."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    host_network = spec.get("hostNetwork") is True
    for _, container in _containers(spec):
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        image = str(container.get("image") or "")
        tag = image.rpartition("/")[2].partition("@")[0]
        latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        container.setdefault("resources", {})
        for port in container.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                if host_network and not port.get("hostPort") and port.get("containerPort"):
                    port["hostPort"] = port["containerPort"]


def admit_create(
    obj: dict[str, Any], *, service_account_exists: Callable[[str, str], bool]
) -> None:
    """The built-in mutating admission of a Pod create, in place: ``ServiceAccount``
    (``serviceAccountName`` defaults to ``default``, which must exist: 403 otherwise),
    ``Priority`` (0, ``PreemptLowerPriority``) and ``DefaultTolerationSeconds``."""
    meta, spec = obj["metadata"], obj.setdefault("spec", {})
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    if not service_account_exists(meta.get("namespace", ""), account):
        raise forbidden(
            "",
            "pods",
            meta.get("name", ""),
            f"error looking up service account {meta.get('namespace', '')}/{account}: "
            f'serviceaccount "{account}" not found',
        )
    spec["serviceAccountName"] = spec["serviceAccount"] = account
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    keys = {t.get("key") for t in tolerations if isinstance(t, dict)}
    tolerations.extend(copy.deepcopy(t) for t in DEFAULT_TOLERATIONS if t["key"] not in keys)


def qos_class(obj: dict[str, Any]) -> str:
    """``qos.GetPodQOS`` on presence alone: ``BestEffort`` without any cpu/memory request
    or limit, ``Guaranteed`` when every container limits both and requests what it limits
    (or nothing, which defaults to the limits), else ``Burstable``."""
    containers = [c for _, c in _containers(obj.get("spec") or {})]
    resources = [c.get("resources") or {} for c in containers]
    named = ("cpu", "memory")
    if not any(set(r.get(k) or {}) & set(named) for r in resources for k in ("requests", "limits")):
        return "BestEffort"
    for r in resources:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        if any(k not in limits or requests.get(k, limits[k]) != limits[k] for k in named):
            return "Burstable"
    return "Guaranteed"


def initial_status(obj: dict[str, Any]) -> dict[str, Any]:
    """``PrepareForCreate``: whatever status was sent, a new Pod is ``Pending``."""
    return {"phase": "Pending", "qosClass": qos_class(obj)}


def validate(obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """The rules of ``ValidatePodCreate``/``ValidatePodUpdate`` the tests meet; 422 like
    kube-apiserver (every error of the object in one Status)."""
    spec = obj.get("spec") or {}
    causes: list[Cause] = []
    if old is not None:
        before = _mutable_masked(old.get("spec") or {})
        if _mutable_masked(spec) != before:
            # The real message goes on with a diff of the internal Go structs.
            causes.append(("spec", "FieldValueForbidden", f"Forbidden: {_UPDATABLE}"))
    elif not spec.get("containers"):
        causes.append(("spec.containers", "FieldValueRequired", "Required value"))
    host_network = spec.get("hostNetwork") is True
    for where, container in _containers(spec):
        if not container.get("name"):
            causes.append((f"{where}.name", "FieldValueRequired", "Required value"))
        if not container.get("image"):
            causes.append((f"{where}.image", "FieldValueRequired", "Required value"))
        for p, port in enumerate(container.get("ports") or []):
            if not isinstance(port, dict):
                continue
            at = f"{where}.ports[{p}]"
            number = port.get("containerPort")
            if not number:
                causes.append((f"{at}.containerPort", "FieldValueRequired", "Required value"))
            elif not 1 <= int(number) <= 65535:
                causes.append(
                    (
                        f"{at}.containerPort",
                        "FieldValueInvalid",
                        f"Invalid value: {number}: must be between 1 and 65535, inclusive",
                    )
                )
            host_port = port.get("hostPort")
            if host_network and host_port and number and host_port != number:
                causes.append(
                    (
                        f"{at}.hostPort",
                        "FieldValueInvalid",
                        f"Invalid value: {host_port}: must match `containerPort` when "
                        "`hostNetwork` is true",
                    )
                )
    if causes:
        raise invalid("Pod", obj["metadata"].get("name", ""), causes)


def _mutable_masked(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` without what a Pod update may change (images, ``activeDeadlineSeconds``,
    ``tolerations``, ``terminationGracePeriodSeconds``)."""
    masked = copy.deepcopy(spec)
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
        masked.pop(key, None)
    for _, container in _containers(masked):
        container.pop("image", None)
    return masked


def grace_period(obj: dict[str, Any], options: dict[str, Any]) -> int:
    """``CheckGracefulDelete``: the request's ``gracePeriodSeconds``, else the Pod's
    ``terminationGracePeriodSeconds``; 0 for a Pod not bound to a Node or already ended;
    a negative value is 1."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    asked = options.get("gracePeriodSeconds")
    period = int(asked if asked is not None else spec.get("terminationGracePeriodSeconds") or 0)
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        period = 0
    return 1 if period < 0 else period


def mark_deleted(obj: dict[str, Any], period: int) -> bool:
    """Set ``deletionTimestamp`` (now + ``period``) and ``deletionGracePeriodSeconds`` on
    ``obj`` in place, and bump ``generation`` on the first delete; a Pod already
    terminating only takes a shorter period. Returns whether ``obj`` changed."""
    meta = obj["metadata"]
    current = meta.get("deletionGracePeriodSeconds")
    if meta.get("deletionTimestamp") and current is not None and period >= int(current):
        return False
    if not meta.get("deletionTimestamp"):
        meta["generation"] = int(meta.get("generation", 1)) + 1
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=period)
    meta["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    meta["deletionGracePeriodSeconds"] = period
    return True
