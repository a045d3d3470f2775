"""Which Services reach the webhooks: the rendered matchConditions, evaluated with CEL.

The API server evaluates these expressions before calling us; a Service for which any is
false never reaches the webhook (KEP-3716). Evaluated here with a CEL interpreter so that
a typo in an expression, or a condition that lets too much or too little through, fails.
"""

from __future__ import annotations

from typing import Any

import cel
import pytest

from tests.deploy.render import WEBHOOK_CONFIGURATION, find, render

ANNOTATION = "io.cilium.nodeipam/match-node-labels"


def service(
    type_: str, *, annotations: dict[str, str] | None = None, class_: str | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web", "namespace": "default"}
    if annotations is not None:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {"type": type_, "ports": [{"port": 80}]}
    if class_ is not None:
        spec["loadBalancerClass"] = class_
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def reaches(kind: str, obj: dict[str, Any]) -> bool:
    """True when every matchCondition of the rendered ``kind`` is true for ``obj``."""
    (webhook,) = find(render("deploy"), kind, WEBHOOK_CONFIGURATION)["webhooks"]
    return all(
        cel.evaluate(condition["expression"], {"object": obj}) is True
        for condition in webhook["matchConditions"]
    )


VALIDATING = [
    ("ClusterIP Service without annotation is skipped", service("ClusterIP"), False),
    ("NodePort Service with other annotations is skipped",
     service("NodePort", annotations={"a": "b"}), False),
    ("ClusterIP Service carrying the selector annotation is checked (to warn)",
     service("ClusterIP", annotations={ANNOTATION: "role=edge"}), True),
    ("class-less LoadBalancer Service is checked", service("LoadBalancer"), True),
    ("LoadBalancer Service of another class is checked (annotation may be misplaced)",
     service("LoadBalancer", class_="example.com/lb"), True),
    ("LoadBalancer Service with empty annotation is checked",
     service("LoadBalancer", annotations={ANNOTATION: ""}), True),
]  # fmt: skip

MUTATING = [
    ("ClusterIP Service is skipped", service("ClusterIP"), False),
    ("annotated ClusterIP Service is skipped (nothing to default)",
     service("ClusterIP", annotations={ANNOTATION: "role=edge"}), False),
    ("class-less LoadBalancer Service is defaulted", service("LoadBalancer"), True),
    ("LoadBalancer Service that already has a class is skipped (class is immutable)",
     service("LoadBalancer", class_="io.cilium/node"), False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "expected"), [c[1:] for c in VALIDATING], ids=[c[0] for c in VALIDATING]
)
def test_validating_webhook_sees_load_balancers_and_annotated_services(
    obj: dict[str, Any], expected: bool
) -> None:
    assert reaches("ValidatingWebhookConfiguration", obj) is expected


@pytest.mark.parametrize(
    ("obj", "expected"), [c[1:] for c in MUTATING], ids=[c[0] for c in MUTATING]
)
def test_mutating_webhook_sees_only_class_less_load_balancers(
    obj: dict[str, Any], expected: bool
) -> None:
    assert reaches("MutatingWebhookConfiguration", obj) is expected
