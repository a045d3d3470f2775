"""Admission rules (docs/design.md §7), pinned on the pure decisions of app/core/admission.py."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from app.core import admission
from app.core.decision import Decider
from app.core.options import SelectionSettings
from tests.core.admission.builders import (
    ANNOTATION,
    endpoint_slice,
    node,
    patched,
    review,
    service,
)

NODEIPAM = SelectionSettings(default_lb_service_ipam="nodeipam")
LBIPAM = SelectionSettings(default_lb_service_ipam="lbipam")
NONE = SelectionSettings(default_lb_service_ipam="none")
OURS = "io.cilium/node"
NODES = (node("edge-1", {"role": "edge"}, "10.0.0.1"), node("core-1", {"role": "core"}, "10.0.0.2"))


def snapshot(*slices: Any, nodes: Any = NODES) -> admission.ClusterSnapshot:
    return admission.ClusterSnapshot(nodes=nodes, endpoint_slices=slices, now=1_000_000.0)


def validate(body: dict[str, Any], *, settings: SelectionSettings = LBIPAM, snap: Any = None):
    return admission.validate(admission.parse_review(body), settings=settings, snapshot=snap)


# -- deny -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "why"),
    [
        ("role in (edge", "role in (edge"),
        ("a=b,", "a=b,"),
        ("-bad-key", "-bad-key"),
        ("zone>eu", "zone>eu"),
    ],
    ids=["unclosed set", "trailing comma", "key starts with dash", "gt needs an integer"],
)
def test_malformed_selector_is_denied_with_a_field_error(selector: str, why: str) -> None:
    decision = validate(review(service(cls=OURS, selector=selector)))
    assert not decision.allowed
    assert decision.message is not None
    assert decision.message.startswith(
        f'metadata.annotations[{ANNOTATION}]: Invalid value: "{why}": '
    )
    assert len(decision.message) > len(
        f'metadata.annotations[{ANNOTATION}]: Invalid value: "{why}": '
    )
    assert decision.verdict == "denied"


NOT_OURS = [
    ("ClusterIP", service(type="ClusterIP", selector="a in ("), "spec.type is ClusterIP"),
    (
        "another loadBalancerClass",
        service(cls="example.com/other", selector="a in ("),
        'spec.loadBalancerClass is "example.com/other"',
    ),
    (
        "class-less under default-lb-service-ipam lbipam",
        service(selector="a in ("),
        "spec.loadBalancerClass is unset",
    ),
]


@pytest.mark.parametrize(("svc", "why"), [c[1:] for c in NOT_OURS], ids=[c[0] for c in NOT_OURS])
def test_malformed_selector_on_a_service_we_do_not_manage_is_a_warning(
    svc: dict[str, Any], why: str
) -> None:
    """docs/design.md §7: the annotation on a Service we do not manage is ignored and
    warned about, malformed or not; another controller's Service is not ours to refuse."""
    decision = validate(review(svc))
    assert decision.allowed
    ignored, invalid = decision.warnings
    assert ignored.startswith(f"{ANNOTATION} is ignored: {why}")
    assert invalid.startswith(f"{ANNOTATION} is invalid: ")
    assert invalid.endswith("(at byte 6)"), "the parse error's end: where the problem is"
    assert all(len(w) <= admission.MAX_WARNING_CHARS for w in decision.warnings)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (service(type="ClusterIP", selector="a in ("), service(cls=OURS, selector="a in (")),
        (service(type="NodePort", selector="a in ("), service(selector="a in (")),
    ],
    ids=["ClusterIP to LoadBalancer of our class", "NodePort to class-less LoadBalancer"],
)
def test_an_update_that_makes_a_service_ours_with_a_malformed_selector_is_denied(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    """Ratcheting keeps only what was already ours (as for ports, §7): a malformed value
    admitted while the Service was not ours is denied once the Service would be, even
    unchanged (else a ClusterIP detour would slip it past the webhook)."""
    settings = NODEIPAM if new["spec"].get("loadBalancerClass") is None else LBIPAM
    decision = validate(review(new, operation="UPDATE", old=old), settings=settings)
    assert not decision.allowed
    assert decision.message is not None
    assert decision.message.startswith(
        f'metadata.annotations[{ANNOTATION}]: Invalid value: "a in (": '
    )


def test_an_update_that_leaves_our_service_with_a_malformed_selector_is_a_warning() -> None:
    body = review(
        service(type="ClusterIP", selector="a in ("),
        operation="UPDATE",
        old=service(cls=OURS, selector="a in ("),
    )
    decision = validate(body)
    assert decision.allowed and decision.warnings[0].startswith(f"{ANNOTATION} is ignored")


def test_malformed_selector_on_a_service_being_deleted_is_admitted() -> None:
    svc = service(cls=OURS, selector="a in (")
    svc["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    old = service(cls=OURS, selector="role=edge")
    assert validate(review(svc, operation="UPDATE", old=old)) == admission.Decision()


def test_malformed_selector_changed_on_update_is_denied() -> None:
    body = review(
        service(cls=OURS, selector="a in ("),
        operation="UPDATE",
        old=service(cls=OURS, selector="role=edge"),
    )
    assert not validate(body).allowed


def test_malformed_selector_left_unchanged_on_update_is_allowed_with_a_warning() -> None:
    """Validation ratcheting: a Service of ours stored before the webhook can still be
    edited."""
    body = review(
        service(cls=OURS, selector="a in ("),
        operation="UPDATE",
        old=service(cls=OURS, selector="a in ("),
    )
    decision = validate(body)
    assert decision.allowed
    assert decision.warnings and decision.warnings[0].startswith(f"{ANNOTATION} is invalid")


def test_denial_response_echoes_uid_with_403_status() -> None:
    request = admission.parse_review(review(service(cls=OURS, selector="!"), uid="abc-123"))
    decision = admission.validate(request, settings=LBIPAM, snapshot=None)
    body = admission.review_response(request, decision)
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == "abc-123"
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["code"] == 403
    assert body["response"]["status"]["message"].startswith(f"metadata.annotations[{ANNOTATION}]")


# -- allow and warn ---------------------------------------------------------------------

WARN_CASES = [
    # (id, service, settings, snapshot, expected warning prefixes)
    (
        "valid selector matching nodes",
        service(cls=OURS, selector="role=edge"),
        LBIPAM,
        snapshot(),
        [],
    ),
    ("no annotation", service(cls=OURS), LBIPAM, snapshot(), []),
    ("ClusterIP without annotation", service(type="ClusterIP"), LBIPAM, snapshot(), []),
    (
        "empty selector selects all nodes",
        service(cls=OURS, selector=""),
        LBIPAM,
        snapshot(),
        [f"{ANNOTATION} is empty"],
    ),
    (
        "whitespace-only selector is empty too",
        service(cls=OURS, selector=" \t"),
        LBIPAM,
        None,
        [f"{ANNOTATION} is empty"],
    ),
    (
        "annotation on a ClusterIP Service",
        service(type="ClusterIP", selector="role=edge"),
        LBIPAM,
        snapshot(),
        [f"{ANNOTATION} is ignored: spec.type is ClusterIP"],
    ),
    (
        "annotation on a class-less Service while default is lbipam",
        service(selector="role=edge"),
        LBIPAM,
        snapshot(),
        [f"{ANNOTATION} is ignored: spec.loadBalancerClass is unset"],
    ),
    (
        "annotation on another class",
        service(cls="example.com/lb", selector="role=edge"),
        NODEIPAM,
        snapshot(),
        [f"{ANNOTATION} is ignored: spec.loadBalancerClass is"],
    ),
    (
        "class-less Service is ours when default is nodeipam",
        service(selector="role=edge"),
        NODEIPAM,
        snapshot(),
        [],
    ),
    (
        "selector matching no node now",
        service(cls=OURS, selector="role=gpu"),
        LBIPAM,
        snapshot(),
        [f"{ANNOTATION} matches no node now"],
    ),
    (
        "selector matching no node is not checked while the cache is not synced",
        service(cls=OURS, selector="role=gpu"),
        LBIPAM,
        None,
        [],
    ),
    (
        "selector in a cluster without nodes",
        service(cls=OURS, selector="role=edge"),
        LBIPAM,
        snapshot(nodes=()),
        [f"{ANNOTATION} matches no node now"],
    ),
    (
        "externalTrafficPolicy Local with no ready endpoint",
        service(cls=OURS, etp="Local"),
        LBIPAM,
        snapshot(),
        ["externalTrafficPolicy is Local and no node has a ready endpoint now"],
    ),
    (
        "externalTrafficPolicy Local with an endpoint on a node",
        service(cls=OURS, etp="Local"),
        LBIPAM,
        snapshot(endpoint_slice("web", "core-1")),
        [],
    ),
    (
        "externalTrafficPolicy Local with the only endpoint outside the selector",
        service(cls=OURS, etp="Local", selector="role=edge"),
        LBIPAM,
        snapshot(endpoint_slice("web", "core-1")),
        ["externalTrafficPolicy is Local and no node has a ready endpoint now"],
    ),
    (
        "externalTrafficPolicy Local is not checked while the cache is not synced",
        service(cls=OURS, etp="Local"),
        LBIPAM,
        None,
        [],
    ),
    (
        "externalTrafficPolicy Local on an unmanaged Service",
        service(etp="Local"),
        LBIPAM,
        snapshot(),
        [],
    ),
]


@pytest.mark.parametrize(
    ("svc", "settings", "snap", "expected"),
    [case[1:] for case in WARN_CASES],
    ids=[case[0] for case in WARN_CASES],
)
def test_valid_service_is_allowed_with_warnings(
    svc: dict[str, Any], settings: SelectionSettings, snap: Any, expected: list[str]
) -> None:
    for operation in ("CREATE", "UPDATE"):
        body = review(svc, operation=operation, old=svc if operation == "UPDATE" else None)
        decision = validate(body, settings=settings, snap=snap)
        assert decision.allowed
        assert decision.patch == ()
        assert len(decision.warnings) == len(expected), decision.warnings
        for warning, prefix in zip(decision.warnings, expected, strict=True):
            assert warning.startswith(prefix)
            assert len(warning) <= admission.MAX_WARNING_CHARS


def test_memoised_warnings_equal_a_fresh_select_for_every_case() -> None:
    """serve keeps one Decider across requests: every case, asked twice through one shared
    Decider per settings, gets exactly the unmemoised warnings."""
    memos: dict[int, Decider] = {}
    for _, svc, settings, snap, _ in WARN_CASES:
        memo = memos.setdefault(id(settings), Decider(settings))
        body = review(svc)
        plain = validate(body, settings=settings, snap=snap)
        shared = None if snap is None else dataclasses.replace(snap, memo=memo)
        for attempt in ("miss", "hit"):
            assert validate(body, settings=settings, snap=shared) == plain, attempt
    assert sum(m.hits for m in memos.values()) > 0
    assert sum(m.misses for m in memos.values()) > 0


def test_warnings_stay_within_120_characters_for_long_names() -> None:
    long_class = "example.com/" + "x" * 63
    settings = SelectionSettings(
        load_balancer_class="a" * 40 + "/b", default_lb_service_ipam="none"
    )
    decision = validate(review(service(cls=long_class, selector="k=v")), settings=settings)
    assert decision.warnings
    assert all(len(w) <= admission.MAX_WARNING_CHARS for w in decision.warnings)
    # Cut in the middle (app.core.text.elide): what it is about and how it ends both stay.
    first = decision.warnings[0]
    assert first.startswith("io.cilium.nodeipam/match-node-labels is ignored: sp")
    assert "characters)…" in first
    assert first.endswith('"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/b"')


@pytest.mark.parametrize(
    ("operation", "kind"),
    [
        ("DELETE", ("", "v1", "Service")),
        ("CONNECT", ("", "v1", "Service")),
        ("CREATE", ("apps", "v1", "Deployment")),
        ("CREATE", ("", "v1", "ConfigMap")),
    ],
    ids=["Service DELETE", "Service CONNECT", "Deployment CREATE", "ConfigMap CREATE"],
)
def test_other_operations_and_kinds_are_allowed_untouched(
    operation: str, kind: tuple[str, str, str]
) -> None:
    body = review({"unrelated": "object"}, operation=operation, kind=kind)
    request = admission.parse_review(body)
    for decision in (
        admission.validate(request, settings=NODEIPAM, snapshot=snapshot()),
        admission.mutate(request, settings=NODEIPAM),
    ):
        assert decision == admission.Decision()
    response = admission.review_response(request, admission.Decision())["response"]
    assert response == {"uid": "uid-1", "allowed": True}


def test_service_being_deleted_gets_no_warnings() -> None:
    svc = service(selector="", etp="Local")
    svc["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    decision = validate(review(svc, operation="UPDATE", old=svc), snap=snapshot())
    assert decision == admission.Decision()


def test_dry_run_gets_the_same_answer() -> None:
    svc = service(selector="")
    wet = validate(review(svc), settings=NODEIPAM)
    dry = validate(review(svc, dry_run=True), settings=NODEIPAM)
    assert admission.parse_review(review(svc, dry_run=True)).dry_run
    assert wet == dry and wet.warnings


# -- mutate -----------------------------------------------------------------------------

MUTATE_CASES = [
    # (id, settings, operation, old, new, patched?)
    ("nodeipam: class-less LoadBalancer CREATE", NODEIPAM, "CREATE", None, service(), True),
    (
        "nodeipam: CREATE with another class",
        NODEIPAM,
        "CREATE",
        None,
        service(cls="x.io/lb"),
        False,
    ),
    ("nodeipam: CREATE with our class", NODEIPAM, "CREATE", None, service(cls=OURS), False),
    ("nodeipam: ClusterIP CREATE", NODEIPAM, "CREATE", None, service(type="ClusterIP"), False),
    ("nodeipam: CREATE without type", NODEIPAM, "CREATE", None, service(type=None), False),
    (
        "nodeipam: UPDATE switching ClusterIP to LoadBalancer",
        NODEIPAM,
        "UPDATE",
        service(type="ClusterIP"),
        service(),
        True,
    ),
    (
        "nodeipam: UPDATE switching NodePort to LoadBalancer with a class",
        NODEIPAM,
        "UPDATE",
        service(type="NodePort"),
        service(cls="x.io/lb"),
        False,
    ),
    (
        "nodeipam: UPDATE of a class-less LoadBalancer (class is immutable)",
        NODEIPAM,
        "UPDATE",
        service(),
        service(),
        False,
    ),
    (
        "nodeipam: UPDATE switching LoadBalancer to ClusterIP",
        NODEIPAM,
        "UPDATE",
        service(),
        service(type="ClusterIP"),
        False,
    ),
    ("lbipam: class-less LoadBalancer CREATE", LBIPAM, "CREATE", None, service(), False),
    (
        "lbipam: UPDATE switching to LoadBalancer",
        LBIPAM,
        "UPDATE",
        service(type="ClusterIP"),
        service(),
        False,
    ),
    ("none: class-less LoadBalancer CREATE", NONE, "CREATE", None, service(), False),
]


@pytest.mark.parametrize(
    ("settings", "operation", "old", "new", "want_patch"),
    [case[1:] for case in MUTATE_CASES],
    ids=[case[0] for case in MUTATE_CASES],
)
def test_load_balancer_class_defaulting(
    settings: SelectionSettings,
    operation: str,
    old: dict[str, Any] | None,
    new: dict[str, Any],
    want_patch: bool,
) -> None:
    request = admission.parse_review(review(new, operation=operation, old=old))
    decision = admission.mutate(request, settings=settings)
    assert decision.allowed and not decision.warnings
    response = admission.review_response(request, decision)["response"]
    if not want_patch:
        assert decision.patch == () and "patch" not in response
        return
    assert decision.verdict == "patched"
    result = patched(new, response)
    assert result["spec"]["loadBalancerClass"] == OURS
    assert {k: v for k, v in result["spec"].items() if k != "loadBalancerClass"} == new["spec"]
    again = admission.parse_review(review(result, operation=operation, old=old))
    assert admission.mutate(again, settings=settings).patch == (), "defaulting is idempotent"


def test_defaulting_uses_the_configured_class() -> None:
    settings = SelectionSettings(
        load_balancer_class="example.com/node", default_lb_service_ipam="nodeipam"
    )
    request = admission.parse_review(review(service()))
    decision = admission.mutate(request, settings=settings)
    assert decision.patch == (
        {"op": "add", "path": "/spec/loadBalancerClass", "value": "example.com/node"},
    )


def test_explicit_null_class_is_treated_as_unset() -> None:
    svc = service()
    svc["spec"]["loadBalancerClass"] = None
    request = admission.parse_review(review(svc))
    response = admission.review_response(request, admission.mutate(request, settings=NODEIPAM))
    assert patched(svc, response["response"])["spec"]["loadBalancerClass"] == OURS


@pytest.mark.parametrize(
    ("tokens", "pointer"),
    [
        (("spec", "loadBalancerClass"), "/spec/loadBalancerClass"),
        (
            ("metadata", "annotations", ANNOTATION),
            "/metadata/annotations/io.cilium.nodeipam~1match-node-labels",
        ),
        (("a~b", "c/~d"), "/a~0b/c~1~0d"),
    ],
)
def test_json_pointer_escapes_per_rfc_6901(tokens: tuple[str, ...], pointer: str) -> None:
    assert admission.json_pointer(*tokens) == pointer


# -- malformed reviews ------------------------------------------------------------------

GOOD = review(service())
MALFORMED = [
    ("a JSON array", [GOOD], "body"),
    ("a JSON string", "AdmissionReview", "body"),
    ("wrong apiVersion", {**GOOD, "apiVersion": "admission.k8s.io/v1beta1"}, "apiVersion/kind"),
    ("wrong kind", {**GOOD, "kind": "TokenReview"}, "apiVersion/kind"),
    ("no request", {k: v for k, v in GOOD.items() if k != "request"}, "request"),
    ("request is a list", {**GOOD, "request": []}, "request"),
    ("no uid", {**GOOD, "request": {**GOOD["request"], "uid": None}}, "request.uid"),
    ("empty uid", {**GOOD, "request": {**GOOD["request"], "uid": ""}}, "request.uid"),
    (
        "no operation",
        {**GOOD, "request": {**GOOD["request"], "operation": None}},
        "request.operation",
    ),
    ("no kind", {**GOOD, "request": {**GOOD["request"], "kind": "Service"}}, "request.kind"),
    ("no object", {**GOOD, "request": {**GOOD["request"], "object": None}}, "request.object"),
    (
        "object is a ConfigMap",
        {
            **GOOD,
            "request": {**GOOD["request"], "object": {"apiVersion": "v1", "kind": "ConfigMap"}},
        },
        "request.object",
    ),
    ("object spec is a list", review({**service(), "spec": []}), "request.object.spec"),
    (
        "annotations are a list",
        review({**service(), "metadata": {"name": "web", "annotations": ["x"]}}),
        "request.object.metadata.annotations",
    ),
    ("UPDATE without oldObject", review(service(), operation="UPDATE"), "request.oldObject"),
]


@pytest.mark.parametrize(
    ("body", "field"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED]
)
def test_malformed_review_is_rejected_naming_the_field(body: Any, field: str) -> None:
    with pytest.raises(admission.ReviewError) as err:
        admission.parse_review(body)
    assert str(err.value).startswith(f"{field}:")


def test_annotation_value_that_is_not_a_string_is_a_bad_review() -> None:
    svc = service()
    svc["metadata"]["annotations"] = {ANNOTATION: 7}
    with pytest.raises(admission.ReviewError, match=r"metadata.annotations\[io.cilium"):
        validate(review(svc))


def test_generate_name_service_is_checked() -> None:
    svc = service(selector="")
    del svc["metadata"]["name"]
    svc["metadata"]["generateName"] = "web-"
    decision = validate(review(svc), settings=NODEIPAM, snap=snapshot())
    assert decision.allowed and decision.warnings[0].startswith(f"{ANNOTATION} is empty")
