"""The NodesServing condition (app.core.conditions): metav1.Condition's rules hold by
construction (kube-apiserver does not check them on a Service), the message stays short,
lastTransitionTime moves only with status, the stored condition reads back equal."""

from __future__ import annotations

import re
from typing import Any

import pytest

from app.core.conditions import (
    ALL_NODES_UNHEALTHY,
    DELETE,
    MESSAGE_LIMIT_BYTES,
    Serving,
    ServingMessages,
    invalid_selector,
    nodes_message,
    rfc3339,
    serving,
)
from app.core.decision import Outcome
from app.core.nodeindex import NodeIndex
from app.core.verdicts import ASSIGNED, PENDING_CODES
from app.core.views import NODES_SERVING, node_view, service_view

# apimachinery pkg/apis/meta/v1/validation ValidateCondition (conditionReasonRegexp,
# maxReasonLen, maxMessageLen, validConditionStatuses) and IsQualifiedName for the type.
REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def condition_errors(item: dict[str, Any]) -> list[str]:
    """metav1validation.ValidateCondition of one ``status.conditions`` item, as
    ``<field>: <reason>`` strings (empty: valid)."""
    errors = []
    prefix, _, name = str(item.get("type", "")).rpartition("/")
    if not (NAME.match(name) and len(name) <= 63 and (not prefix or SUBDOMAIN.match(prefix))):
        errors.append("type: not a qualified name")
    if len(item.get("type", "")) > 316:
        errors.append("type: longer than 316")
    if item.get("status") not in ("True", "False", "Unknown"):
        errors.append("status: not True, False or Unknown")
    reason = item.get("reason", "")
    if not REASON.match(reason) or len(reason) > 1024:
        errors.append("reason: not a CamelCase reason of at most 1024 characters")
    if len(item.get("message", "").encode()) > 32768:
        errors.append("message: longer than 32768 bytes")
    if not RFC3339.match(item.get("lastTransitionTime") or ""):
        errors.append("lastTransitionTime: required")
    generation = item.get("observedGeneration")
    if generation is not None and generation < 0:
        errors.append("observedGeneration: negative")
    return errors


def outcome(ips: tuple[str, ...], *, code: str = ASSIGNED, note: str | None = None) -> Outcome:
    return Outcome(
        ingress=tuple({"ip": ip, "ipMode": "VIP"} for ip in ips),
        error=None,
        reason=note or "selected",
        recheck_at=None,
        empty_note=note,
        hidden_note=None,
        code=code,
        selected=len(ips),
        hidden=0,
    )


def nodes(count: int, name_length: int = 10) -> NodeIndex:
    return NodeIndex(
        node_view(
            {
                "metadata": {"name": f"n{i:0{name_length - 1}d}"},
                "status": {
                    "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"}]
                },
            }
        )
        for i in range(count)
    )


def test_the_type_is_a_qualified_name_of_our_domain() -> None:
    item, _ = Serving("True", ASSIGNED, "x", None).written(None, 0)
    assert item["type"] == NODES_SERVING == "node-ipam-lb.io/NodesServing"
    assert condition_errors(item) == []


@pytest.mark.parametrize("code", [*PENDING_CODES, "NoPool", "PortNotInPool"])
def test_every_pending_code_is_a_valid_reason(code: str) -> None:
    item, _ = serving(outcome((), code=code, note=f"{code}: why"), "", generation=None).written(
        None, 1.8e9
    )
    assert (item["status"], item["reason"], item["message"]) == ("False", code, f"{code}: why")
    assert condition_errors(item) == []


def test_true_reasons_and_the_invalid_selector_are_valid_reasons() -> None:
    for reason in (ASSIGNED, ALL_NODES_UNHEALTHY):
        assert REASON.match(reason)
    item, _ = invalid_selector("x" * 100_000, kept=3, generation=4).written(None, 1.8e9)
    assert (item["status"], item["reason"], item["observedGeneration"]) == (
        "True",
        "InvalidNodeSelector",
        4,
    )
    assert len(item["message"].encode()) <= MESSAGE_LIMIT_BYTES
    assert item["message"].endswith("the 3 address(es) published before stay until it parses")
    assert condition_errors(item) == []


def test_the_message_names_at_most_twenty_nodes_and_stays_far_below_the_limit() -> None:
    index = nodes(5000, name_length=253)
    ips = [f"10.0.{i // 250}.{i % 250}" for i in range(5000)]
    text = nodes_message(ips, index.node_of)
    assert text.startswith("5000 address(es) published on 5000 node(s): ")
    assert len(text.encode()) <= MESSAGE_LIMIT_BYTES < 32768
    short = nodes_message(ips[:25], nodes(25).node_of)
    assert short.endswith("n000000019 and 5 more")
    assert short.count(", ") == 19


def test_two_addresses_of_one_node_name_it_once() -> None:
    owner = {"10.0.0.1": "a", "2001:db8::1": "a", "10.0.0.2": "b", "192.0.2.9": None}
    text = nodes_message(list(owner), owner.get)
    assert text == "4 address(es) published on 2 node(s): a, b"


def test_last_transition_time_moves_with_status_only() -> None:
    _, first = Serving("True", ASSIGNED, "one", None).written(None, 1.8e9)
    item, again = Serving("True", ASSIGNED, "two", None).written(first, 1.8e9 + 60)
    assert item["lastTransitionTime"] == first.last_transition_time == rfc3339(1.8e9)
    item, _ = Serving("False", "Excluded", "two", None).written(again, 1.8e9 + 60)
    assert item["lastTransitionTime"] == rfc3339(1.8e9 + 60) == "2027-01-15T08:01:00Z"


def test_an_unknown_generation_removes_a_stored_observed_generation() -> None:
    _, stored = Serving("True", ASSIGNED, "m", 3).written(None, 0)
    unknown = Serving("True", ASSIGNED, "m", None)
    assert unknown.differs(stored)
    item, _ = unknown.written(stored, 0)
    assert item["observedGeneration"] is None  # null: the strategic merge patch deletes it
    item, _ = unknown.written(None, 0)
    assert "observedGeneration" not in item


@pytest.mark.parametrize(
    "stored_item",
    [
        {"status": "True", "reason": ASSIGNED, "message": "m", "lastTransitionTime": "x"},
        {
            "status": "True",
            "reason": ASSIGNED,
            "message": "m",
            "lastTransitionTime": "x",
            "observedGeneration": 2,
        },
    ],
    ids=["no generation", "generation 2"],
)
def test_what_is_written_reads_back_equal(stored_item: dict[str, Any]) -> None:
    generation = stored_item.get("observedGeneration")
    want = Serving("True", ASSIGNED, "m", generation)
    item, read_back = want.written(None, 1.8e9)
    svc = service_view(
        {
            "metadata": {"name": "web", "generation": generation},
            "status": {"conditions": [{"type": "example.com/Other", "status": "False"}, item]},
        }
    )
    assert svc.serving == read_back
    assert svc.generation == generation
    assert not want.differs(svc.serving)


@pytest.mark.parametrize(
    "garbage",
    [{"status": True}, {"reason": 7}, {"lastTransitionTime": None}, {"message": ["m"]}],
    ids=["status a bool", "reason a number", "no lastTransitionTime", "message a list"],
)
def test_a_garbled_stored_condition_is_written_again(garbage: dict[str, Any]) -> None:
    want = Serving("True", ASSIGNED, "m", None)
    item, _ = want.written(None, 1.8e9)
    svc = service_view(
        {"metadata": {"name": "web"}, "status": {"conditions": [{**item, **garbage}]}}
    )
    assert want.differs(svc.serving)


def test_delete_names_only_our_type() -> None:
    assert DELETE == {"$patch": "delete", "type": NODES_SERVING}


def test_messages_are_kept_per_ingress_and_dropped_with_the_node_snapshot() -> None:
    calls: list[str] = []
    index = nodes(3)

    class Counting(NodeIndex):
        def node_of(self, address: str) -> str | None:
            calls.append(address)
            return index.node_of(address)

    counting = Counting(index.nodes)
    ingress = outcome(("10.0.0.0", "10.0.0.1")).ingress
    assert ingress is not None
    memo = ServingMessages()
    first = memo.message(ingress, counting)
    assert memo.message(ingress, counting) == first
    assert calls == ["10.0.0.0", "10.0.0.1"], "the second call walks nothing"
    other = Counting(index.nodes)
    assert memo.message(ingress, other) == first
    assert len(calls) == 4, "a new snapshot starts over"
