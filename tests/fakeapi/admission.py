"""The admission chain: calls the webhooks of Mutating/ValidatingWebhookConfiguration objects.

Follows kube-apiserver's ``plugin/pkg/admission/webhook`` (generic dispatcher, mutating then
validating, ``webhookerrors.ToStatusErr``): rules (operations, apiGroups, apiVersions,
resources incl. ``x/y`` subresources, scope), ``namespaceSelector``, ``objectSelector`` (old or
new object), ``matchConditions`` (the CEL subset of :mod:`tests.fakeapi.cel`; any false skips,
an evaluation error follows ``failurePolicy``), ``timeoutSeconds`` (default 10),
``failurePolicy`` (default Fail), ``sideEffects`` vs ``dryRun``, JSONPatch responses, warnings.
Webhooks are called over HTTPS verified against ``caBundle``; an in-cluster service reference
``<name>.<namespace>.svc:<port>`` is dialled on 127.0.0.1 at the port mapped in
:attr:`AdmissionChain.service_ports` while TLS still verifies the ``.svc`` host name.
``reinvocationPolicy: IfNeeded`` is not modelled (webhooks run once).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import ipaddress
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import jsonpatch

from tests.fakeapi.cel import CelError, evaluate
from tests.fakeapi.errors import ApiError, status_body
from tests.fakeapi.resources import Resource
from tests.fakeapi.selectors import match_label_selector_object

MUTATING = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
VALIDATING = "validatingwebhookconfigurations.admissionregistration.k8s.io"


@dataclass
class Attributes:
    """What is being admitted (``admission.Attributes``)."""

    resource: Resource
    subresource: str
    operation: str
    namespace: str
    name: str
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    dry_run: bool
    user: dict[str, Any]
    namespace_labels: Mapping[str, str] | None


class WebhookFailure(Exception):
    """Calling the webhook failed (transport, TLS, timeout, bad response)."""


def _matches_list(values: list[str] | None, want: str) -> bool:
    return values is not None and ("*" in values or want in values)


def _rule_matches(rule: Mapping[str, Any], a: Attributes) -> bool:
    r = a.resource
    if not _matches_list(rule.get("operations"), a.operation):
        return False
    if not _matches_list(rule.get("apiGroups"), r.group):
        return False
    if not _matches_list(rule.get("apiVersions"), r.version):
        return False
    scope = rule.get("scope", "*")
    if (scope == "Cluster" and r.namespaced) or (scope == "Namespaced" and not r.namespaced):
        return False
    want = f"{r.plural}/{a.subresource}" if a.subresource else r.plural
    for res in rule.get("resources") or []:
        main, _, sub = res.partition("/")
        if res in ("*/*", want) or (res == "*" and not a.subresource):
            return True
        if sub == "*" and main == r.plural and a.subresource:
            return True
        if main == "*" and sub == a.subresource and a.subresource:
            return True
    return False


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return (obj or {}).get("metadata", {}).get("labels") or {}


def _request(a: Attributes, uid: str) -> dict[str, Any]:
    r = a.resource
    return {
        "uid": uid,
        "kind": {"group": r.group, "version": r.version, "kind": r.kind},
        "resource": {"group": r.group, "version": r.version, "resource": r.plural},
        **({"subResource": a.subresource} if a.subresource else {}),
        "requestKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "requestResource": {"group": r.group, "version": r.version, "resource": r.plural},
        **({"requestSubResource": a.subresource} if a.subresource else {}),
        "name": a.name,
        **({"namespace": a.namespace} if a.namespace else {}),
        "operation": a.operation,
        "userInfo": a.user,
        "object": a.obj,
        "oldObject": a.old,
        "dryRun": a.dry_run,
        "options": {
            "kind": f"{a.operation.capitalize()}Options",
            "apiVersion": "meta.k8s.io/v1",
        },
    }


@dataclass
class AdmissionChain:
    """Runs the webhook chain; ``service_ports[(namespace, name, port)]`` = local port."""

    service_ports: dict[tuple[str, str, int], int] = field(default_factory=dict)
    _ssl: dict[str, ssl.SSLContext] = field(default_factory=dict)

    def _context(self, ca_bundle: str | None) -> ssl.SSLContext:
        key = ca_bundle or ""
        if key not in self._ssl:
            ctx = ssl.create_default_context()
            if ca_bundle:
                try:
                    ctx = ssl.create_default_context(cadata=base64.b64decode(ca_bundle).decode())
                except (ValueError, ssl.SSLError) as err:
                    raise WebhookFailure(f"invalid caBundle: {err}") from None
            self._ssl[key] = ctx
        return self._ssl[key]

    def _target(self, client_config: Mapping[str, Any]) -> tuple[str, str | None]:
        if client_config.get("url"):
            url = str(client_config["url"])
            host = urlsplit(url).hostname or ""
            try:
                loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise WebhookFailure(f"the fake API only calls webhooks on loopback, not {host!r}")
            return url, None
        svc = client_config.get("service") or {}
        ns, name, port = svc.get("namespace", ""), svc.get("name", ""), int(svc.get("port", 443))
        local = self.service_ports.get((ns, name, port))
        if local is None:
            raise WebhookFailure(
                f'Post "https://{name}.{ns}.svc:{port}{svc.get("path", "")}": no port mapping '
                f"for service {ns}/{name}:{port} (set service_ports)"
            )
        path = svc.get("path") or "/"
        return f"https://127.0.0.1:{local}{path}", f"{name}.{ns}.svc"

    async def _call(self, hook: Mapping[str, Any], review: dict[str, Any]) -> dict[str, Any]:
        cfg = hook.get("clientConfig") or {}
        url, sni = self._target(cfg)
        timeout = float(hook.get("timeoutSeconds", 10))
        # kube-apiserver's webhook client tells the webhook its deadline in the query string.
        url += ("&" if "?" in url else "?") + f"timeout={timeout:g}s"
        extensions = {"sni_hostname": sni} if sni else {}
        try:
            async with httpx.AsyncClient(
                verify=self._context(cfg.get("caBundle")), timeout=timeout
            ) as client:
                resp = await client.post(
                    url,
                    json=review,
                    headers={"Host": sni} if sni else {},
                    extensions=extensions,
                )
        except httpx.TimeoutException:
            raise WebhookFailure(
                f'Post "{url}": context deadline exceeded (timeout {timeout:g}s)'
            ) from None
        except (httpx.HTTPError, ssl.SSLError, OSError) as err:
            raise WebhookFailure(f'Post "{url}": {err}') from None
        if resp.status_code != 200:
            raise WebhookFailure(f"expected response code 200, got {resp.status_code}")
        try:
            body = resp.json()
            response = body["response"]
        except (ValueError, KeyError, TypeError):
            raise WebhookFailure("failed to decode the AdmissionReview response") from None
        if not isinstance(response, dict) or response.get("uid") != review["request"]["uid"]:
            raise WebhookFailure(
                f"expected response.uid={review['request']['uid']!r}, "
                f"got {response.get('uid') if isinstance(response, dict) else None!r}"
            )
        return response

    def _should_call(self, hook: Mapping[str, Any], a: Attributes) -> bool:
        """Rules and selectors decide; raises CelError for a failing match condition."""
        if not any(_rule_matches(rule, a) for rule in hook.get("rules") or []):
            return False
        if a.resource.namespaced and a.namespace_labels is not None:
            ns_sel = match_label_selector_object(hook.get("namespaceSelector"))
            if not ns_sel(a.namespace_labels):
                return False
        elif a.resource.kind == "Namespace":
            ns_sel = match_label_selector_object(hook.get("namespaceSelector"))
            if not (ns_sel(_labels(a.obj)) or (a.old is not None and ns_sel(_labels(a.old)))):
                return False
        obj_sel = match_label_selector_object(hook.get("objectSelector"))
        if not (obj_sel(_labels(a.obj)) or (a.old is not None and obj_sel(_labels(a.old)))):
            return False
        env = {"object": a.obj, "oldObject": a.old, "request": _request(a, "")}
        results: list[bool] = []
        errors: list[str] = []
        for cond in hook.get("matchConditions") or []:
            try:
                results.append(evaluate(str(cond.get("expression", "")), env))
            except CelError as err:
                errors.append(f"{cond.get('name', '')}: {err}")
        if False in results:
            return False
        if errors:
            raise CelError("; ".join(errors))
        return True

    async def _one(
        self, hook: Mapping[str, Any], a: Attributes, warnings: list[str]
    ) -> dict[str, Any] | None:
        """Call one webhook; ``None`` = not called or ignored, else the AdmissionResponse."""
        name = str(hook.get("name", ""))
        fail = hook.get("failurePolicy", "Fail") != "Ignore"
        try:
            if not self._should_call(hook, a):
                return None
        except CelError as err:
            if not fail:
                return None
            raise ApiError(
                status_body(
                    code=403,
                    reason="Forbidden",
                    message=f'{a.resource.plural} "{a.name}" is forbidden: failed to evaluate '
                    f'match conditions of webhook "{name}": {err}',
                )
            ) from None
        if a.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise ApiError(
                status_body(
                    code=400, message=f'admission webhook "{name}" does not support dry run'
                )
            )
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": _request(a, str(uuid.uuid4())),
        }
        try:
            if "v1" not in (hook.get("admissionReviewVersions") or []):
                raise WebhookFailure("webhook does not accept v1 AdmissionReview")
            response = await self._call(hook, review)
        except WebhookFailure as err:
            if not fail:
                return None
            raise ApiError(
                status_body(
                    code=500,
                    reason="InternalError",
                    message=f'Internal error occurred: failed calling webhook "{name}": '
                    f"failed to call webhook: {err}",
                )
            ) from None
        warnings.extend(str(w) for w in response.get("warnings") or [])
        if not response.get("allowed"):
            raise _denied(name, response.get("status"))
        return response

    async def admit(
        self, a: Attributes, configs: list[dict[str, Any]], warnings: list[str]
    ) -> None:
        """Run mutating webhooks serially, patching ``a.obj`` in place; appends warnings.

        Raises :class:`ApiError` for a denial or a failure under ``failurePolicy: Fail``.
        """
        for hook in _hooks(configs):
            response = await self._one(hook, a, warnings)
            if response and response.get("patch") and a.obj is not None:
                if response.get("patchType", "JSONPatch") != "JSONPatch":
                    raise _internal(hook, f"unsupported patchType {response.get('patchType')!r}")
                try:
                    ops = jsonpatch.JsonPatch.from_string(base64.b64decode(response["patch"]))
                    patched = ops.apply(copy.deepcopy(a.obj))
                except Exception as err:  # any undecodable/inapplicable patch is the webhook's
                    raise _internal(hook, f"JSON patch could not be applied: {err}") from None
                a.obj.clear()
                a.obj.update(patched)

    async def validate(
        self, a: Attributes, configs: list[dict[str, Any]], warnings: list[str]
    ) -> None:
        """Run validating webhooks in parallel; appends warnings; the first denial wins."""
        per_hook: list[list[str]] = []
        tasks = []
        for hook in _hooks(configs):
            per_hook.append([])
            tasks.append(self._one(hook, a, per_hook[-1]))
        results = await asyncio.gather(*tasks, return_exceptions=True)
        warnings.extend(w for ws in per_hook for w in ws)
        for result in results:
            if isinstance(result, BaseException):
                raise result


def _hooks(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ordered = sorted(configs, key=lambda c: c.get("metadata", {}).get("name", ""))
    return [h for c in ordered for h in c.get("webhooks") or []]


def _internal(hook: Mapping[str, Any], why: str) -> ApiError:
    return ApiError(
        status_body(
            code=500,
            reason="InternalError",
            message="Internal error occurred: failed calling webhook "
            f'"{hook.get("name", "")}": {why}',
        )
    )


def _denied(name: str, result: Any) -> ApiError:
    """``webhookerrors.ToStatusErr``: code < 400 becomes 400; message names the webhook."""
    result = dict(result) if isinstance(result, dict) else {}
    code = int(result.get("code") or 0)
    code = code if code >= 400 else 400
    denied = f'admission webhook "{name}" denied the request'
    if result.get("message"):
        message = f"{denied}: {result['message']}"
    elif result.get("reason"):
        message = f"{denied}: {result['reason']}"
    else:
        message = f"{denied} without explanation"
    body = status_body(code=code, message=message, reason=str(result.get("reason", "")))
    if result.get("details"):
        body["details"] = result["details"]
    return ApiError(body)


def format_warning(text: str) -> str:
    """RFC 7234 warning value as kube-apiserver writes it: ``299 - "<text>"``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'
