"""Any JSON in an AdmissionReview gets a decision or a ReviewError (HTTP 400), never a crash."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core import admission
from app.core.options import SelectionSettings
from tests.core.admission.builders import ANNOTATION, node, review, service

NODEIPAM = SelectionSettings(default_lb_service_ipam="nodeipam")
SNAPSHOT = admission.ClusterSnapshot(nodes=(node("n1", {"a": "b"}),), endpoint_slices=(), now=0.0)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
FIELDS = [
    ("request", "object", "spec"),
    ("request", "object", "spec", "type"),
    ("request", "object", "spec", "loadBalancerClass"),
    ("request", "object", "spec", "ipFamilies"),
    ("request", "object", "spec", "externalTrafficPolicy"),
    ("request", "object", "metadata"),
    ("request", "object", "metadata", "name"),
    ("request", "object", "metadata", "annotations"),
    ("request", "object", "metadata", "annotations", ANNOTATION),
    ("request", "object", "metadata", "deletionTimestamp"),
    ("request", "object", "status"),
    ("request", "oldObject"),
    ("request", "oldObject", "spec"),
    ("request", "kind"),
    ("request", "operation"),
    ("request", "namespace"),
    ("request", "uid"),
    ("request",),
]


def put(body: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    target: Any = body
    for key in path[:-1]:
        if not isinstance(target, dict):
            return
        target = target.setdefault(key, {})
    if isinstance(target, dict):
        target[path[-1]] = value


@settings(max_examples=300, deadline=None)
@given(
    field=st.sampled_from(FIELDS),
    value=json_values,
    operation=st.sampled_from(["CREATE", "UPDATE"]),
)
def test_arbitrary_json_anywhere_is_decided_or_rejected(
    field: tuple[str, ...], value: Any, operation: str
) -> None:
    old = service(selector="a=b") if operation == "UPDATE" else None
    body = review(service(selector="a=b", etp="Local"), operation=operation, old=old)
    put(body, field, value)
    try:
        request = admission.parse_review(body)
        validated = admission.validate(request, settings=NODEIPAM, snapshot=SNAPSHOT)
        mutated = admission.mutate(request, settings=NODEIPAM)
    except admission.ReviewError as err:
        assert str(err)
        return
    for decision in (validated, mutated):
        response = admission.review_response(request, decision)["response"]
        assert response["uid"] == request.uid
        assert all(len(w) <= admission.MAX_WARNING_CHARS for w in decision.warnings)
