"""``preview`` flags reach the selection core (same names as the settings)."""

from __future__ import annotations

import json

from tests.core.builders import UNSET, node_obj, service_obj
from tests.preview.conftest import parse_table, preview
from tests.preview.support import Write, dump


def test_default_lb_service_ipam_nodeipam_claims_class_less_services(write: Write) -> None:
    path = write(dump(node_obj("n1", internal=["10.0.0.1"]), service_obj("web", cls=UNSET)))
    rows = parse_table(preview("-f", path).stdout)
    assert rows[0]["EXTERNAL-IP"] == "<not managed>"
    assert rows[0]["CLASS"] == "<none>"
    assert "LB-IPAM" in rows[0]["REASON"]
    rows = parse_table(preview("-f", path, "--default-lb-service-ipam", "nodeipam").stdout)
    assert rows[0]["EXTERNAL-IP"] == "10.0.0.1"


def test_load_balancer_class_flag(write: Write) -> None:
    path = write(
        dump(node_obj("n1", internal=["10.0.0.1"]), service_obj("web", cls="example.com/nodes"))
    )
    assert parse_table(preview("-f", path).stdout)[0]["EXTERNAL-IP"] == "<not managed>"
    run = preview("-f", path, "--load-balancer-class", "example.com/nodes")
    assert parse_table(run.stdout)[0]["EXTERNAL-IP"] == "10.0.0.1"


def test_match_node_labels_annotation_flag(write: Write) -> None:
    svc = service_obj("web")
    svc["metadata"]["annotations"] = {"example.com/match": "pool=a"}
    nodes = [
        node_obj("n1", internal=["10.0.0.1"], labels={"pool": "a"}),
        node_obj("n2", internal=["10.0.0.2"]),
    ]
    path = write(dump(*nodes, svc))
    assert parse_table(preview("-f", path).stdout)[0]["EXTERNAL-IP"] == "10.0.0.1,10.0.0.2"
    run = preview("-f", path, "--match-node-labels-annotation", "example.com/match")
    assert parse_table(run.stdout)[0]["EXTERNAL-IP"] == "10.0.0.1"


def test_per_node_address_fallback_flag(write: Write) -> None:
    path = write(
        dump(
            node_obj("pub", internal=["10.0.0.1"], external=["203.0.113.1"]),
            node_obj("priv", internal=["10.0.0.2"]),
            service_obj("web"),
        )
    )
    run = preview("-f", path)
    assert parse_table(run.stdout)[0]["EXTERNAL-IP"] == "203.0.113.1"
    assert "setting per-node-address-fallback" in run.stderr
    run = preview("-f", path, "--per-node-address-fallback")
    assert parse_table(run.stdout)[0]["EXTERNAL-IP"] == "10.0.0.2,203.0.113.1"


def test_exclude_not_ready_nodes_flags(write: Write) -> None:
    path = write(
        dump(
            node_obj("up", internal=["10.0.0.1"]),
            node_obj("down", internal=["10.0.0.2"], ready="False", ready_since=0),
            service_obj("web"),
        )
    )
    assert parse_table(preview("-f", path).stdout)[0]["EXTERNAL-IP"] == "10.0.0.1,10.0.0.2"
    run = preview("-f", path, "--exclude-not-ready-nodes", "--not-ready-grace-seconds", "30")
    assert parse_table(run.stdout)[0]["EXTERNAL-IP"] == "10.0.0.1"


def test_ip_mode_flag(write: Write) -> None:
    path = write(dump(node_obj("n1", internal=["10.0.0.1"]), service_obj("web")))
    item = json.loads(preview("-f", path, "--ip-mode", "Proxy", "-o", "json").stdout)["items"][0]
    assert item["ingress"] == [{"ip": "10.0.0.1", "ipMode": "Proxy"}]


def test_pending_row_shows_a_reason(write: Write) -> None:
    path = write(
        dump(node_obj("n1", internal=["10.0.0.1"]), service_obj("web", selector="pool=gpu"))
    )
    row = parse_table(preview("-f", path).stdout)[0]
    assert row["EXTERNAL-IP"] == "<pending>"
    assert row["REASON"] == "no Node matches the node selector pool=gpu"
