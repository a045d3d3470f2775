"""TokenReview (``authentication.k8s.io/v1``) and SubjectAccessReview
(``authorization.k8s.io/v1``): create-only, answered from configured tokens and rules.

Shapes follow kube-apiserver: an unknown token gets ``status: {user: {}, error: ...}`` (no
``authenticated``); a SubjectAccessReview answers ``status.allowed`` with a ``reason``. Only
``nonResourceAttributes`` rules are configurable; every resource-attribute review is denied.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tests.fakeapi import errors
from tests.fakeapi.resources import Resource

Obj = dict[str, Any]


def answer(
    res: Resource,
    body: Any,
    *,
    tokens: Mapping[str, Mapping[str, Any]],
    allowed_non_resource: set[tuple[str, str, str]],
) -> Obj:
    """The created review with its ``status``; raises 400 when ``body`` has no ``spec``.

    ``tokens`` maps a bearer token to its user info; ``allowed_non_resource`` holds
    ``(user, verb, path)`` triples allowed on nonResourceURLs.
    """
    if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
        raise errors.bad_request(f"the body of the request was not a {res.kind} object")
    obj = copy.deepcopy(body)
    obj["kind"], obj["apiVersion"] = res.kind, res.api_version
    obj.setdefault("metadata", {})["creationTimestamp"] = None
    spec = obj["spec"]
    if res.kind == "TokenReview":
        user = tokens.get(str(spec.get("token", "")))
        if user is None:
            obj["status"] = {"user": {}, "error": "invalid bearer token"}
        else:
            obj["status"] = {
                "authenticated": True,
                "user": copy.deepcopy(dict(user)),
                "audiences": spec.get("audiences") or ["https://kubernetes.default.svc"],
            }
        return obj
    attrs = spec.get("nonResourceAttributes") or {}
    key = (str(spec.get("user", "")), str(attrs.get("verb", "")), str(attrs.get("path", "")))
    if spec.get("nonResourceAttributes") and key in allowed_non_resource:
        obj["status"] = {"allowed": True, "reason": "allowed by the fake API access rules"}
    else:
        obj["status"] = {"allowed": False, "reason": "no fake API access rule allows this"}
    return obj
