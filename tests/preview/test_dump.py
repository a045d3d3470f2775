"""app.core.dump: reading what kubectl prints, in every shape it prints it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from app.core.dump import DumpError, load_dump, project
from tests.core.builders import node_obj, service_obj

Write = Callable[..., str]


def test_list_multi_document_and_json_give_the_same_objects(write: Write) -> None:
    objs = [node_obj("n1"), service_obj("web")]
    as_list = write(yaml.safe_dump({"kind": "List", "apiVersion": "v1", "items": objs}), "a.yaml")
    multi = write(yaml.safe_dump_all(objs), "b.yaml")
    as_json = write(json.dumps({"kind": "List", "items": objs}), "c.json")
    for path in (as_list, multi, as_json):
        dump = load_dump([path])
        assert [o["metadata"]["name"] for o in dump.nodes] == ["n1"]
        assert [o["metadata"]["name"] for o in dump.services] == ["web"]


def test_where_names_file_index_and_object(write: Write) -> None:
    path = write(
        yaml.safe_dump(
            {"kind": "List", "items": [node_obj("n1"), service_obj("web", namespace="shop")]}
        )
    )
    dump = load_dump([path])
    assert dump.where(dump.nodes[0]) == f"{path}: items[0] (Node n1)"
    assert dump.where(dump.services[0]) == f"{path}: items[1] (Service shop/web)"


def test_unknown_kinds_are_counted(write: Write) -> None:
    path = write(
        yaml.safe_dump_all([{"kind": "Pod", "metadata": {"name": "p"}}, None, node_obj("n1")])
    )
    dump = load_dump([path])
    assert dump.skipped == {"Pod": 1}
    assert len(dump.nodes) == 1


def test_only_host_network_pods_are_kept_and_projected(write: Write) -> None:
    """What ``kubectl get pods -A --field-selector spec.hostNetwork=true`` keeps
    (docs/design.md §4.9); a Pod on the Pod network, or of another apiVersion, is skipped."""

    def pod(name: str, host_network: object, api_version: str = "v1") -> dict[str, object]:
        spec = {"nodeName": "n1", "containers": [{"name": "c", "ports": [{"containerPort": 9100}]}]}
        if host_network is not None:
            spec["hostNetwork"] = host_network
        meta = {"name": name, "namespace": "monitoring"}
        return {"apiVersion": api_version, "kind": "Pod", "metadata": meta, "spec": spec}

    path = write(
        yaml.safe_dump_all(
            [pod("exporter", True), pod("web", None), pod("off", False),
             pod("quoted", "true"), pod("other", True, "example.com/v1"), pod("exporter", True)]
        )
    )  # fmt: skip
    dump = load_dump([path])
    assert [o["metadata"]["name"] for o in dump.pods] == ["exporter", "exporter"]
    assert dump.skipped == {"Pod": 4}
    assert dump.where(dump.pods[0]) == f"{path}: document 1 (Pod monitoring/exporter)"
    views = project(load_dump([path]))
    assert [(p.name, p.node_name, p.ports) for p in views.pods] == [
        ("exporter", "n1", (("TCP", 9100),))
    ]
    assert views.duplicates[0].startswith("Pod monitoring/exporter is in the input 2 times")


def test_pods_that_hold_node_ports_are_kept_and_the_rest_skipped(write: Write) -> None:
    """What ``kubectl get pods -A -o yaml`` holds (every Pod; docs/design.md §4.9): a
    host-network Pod's containerPort, another Pod's hostPort (sidecar init containers
    included) are kept; a Pod that holds nothing (no hostPort, not bound, ended, a plain
    init container's hostPort) is skipped and counted. ``host_port_pods=False`` keeps
    the host-network ones only (the setting off)."""

    def pod(
        name: str,
        *,
        host_network: bool = False,
        node: str | None = "n1",
        phase: str = "Running",
        init: str | None = None,
        **port: object,
    ) -> dict[str, Any]:
        """A Pod declaring containerPort 8080 (and ``port``'s fields) in its container, or
        with ``init`` in an init container of that ``restartPolicy`` (``""``: none)."""
        container: dict[str, Any] = {"name": "c", "ports": [{"containerPort": 8080, **port}]}
        spec: dict[str, Any] = {"containers": [container]}
        if init is not None:
            spec = {"containers": [{"name": "app"}], "initContainers": [container]}
            if init:
                container["restartPolicy"] = init
        if node:
            spec["nodeName"] = node
        if host_network:
            spec["hostNetwork"] = True
        meta = {"name": name, "namespace": "ns"}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
                "status": {"phase": phase}}  # fmt: skip

    objects = [
        pod("web"), pod("exporter", host_network=True), pod("ingress", hostPort=80),
        pod("dns", hostPort=53, protocol="UDP", hostIP="10.0.0.1"),
        pod("unbound", node=None, hostPort=81), pod("ended", phase="Failed", hostPort=81),
        pod("init", init="", hostPort=81), pod("s", init="Always", hostPort=81),
    ]  # fmt: skip
    path = write(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    dump = load_dump([path])
    assert [o["metadata"]["name"] for o in dump.pods] == ["exporter", "ingress", "dns", "s"]
    assert dump.skipped == {"Pod": 4}
    views = project(load_dump([path]))
    assert [(p.name, p.ports) for p in views.pods] == [
        ("exporter", (("TCP", 8080),)), ("ingress", (("TCP", 80),)), ("dns", (("UDP", 53),)),
        ("s", (("TCP", 81),)),
    ]  # fmt: skip
    off = load_dump([path], host_port_pods=False)
    assert [o["metadata"]["name"] for o in off.pods] == ["exporter"]
    assert off.skipped == {"Pod": 7}
    assert [p.name for p in project(load_dump([path], host_port_pods=False)).pods] == ["exporter"]


def test_a_pod_that_cannot_be_projected_is_unusable_input_not_skipped(write: Write) -> None:
    """A Pod with a field of the wrong type may hold a port: it is reported, naming it."""
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "namespace": "ns"},
           "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": "80"}]}}  # fmt: skip
    path = write(yaml.safe_dump({"kind": "List", "items": [bad]}))
    assert len(load_dump([path]).pods) == 1
    where = r"items\[0\] \(Pod ns/bad\): spec.containers\[0\].ports"
    with pytest.raises(DumpError, match=where):
        project(load_dump([path]))


def test_later_file_wins_and_views_are_sorted(write: Write) -> None:
    first = write(
        yaml.safe_dump_all([node_obj("b", internal=["10.0.0.1"]), node_obj("a")]), "1.yaml"
    )
    second = write(yaml.safe_dump(node_obj("b", internal=["10.0.0.2"])), "2.yaml")
    views = project(load_dump([first, second]))
    assert [n.name for n in views.nodes] == ["a", "b"]
    assert [a.ip for a in views.nodes[1].addresses] == ["10.0.0.2"]


def test_view_errors_carry_the_origin(write: Write) -> None:
    bad = node_obj("n1")
    bad["status"]["conditions"] = "Ready"
    path = write(yaml.safe_dump({"kind": "List", "items": [bad]}))
    with pytest.raises(
        DumpError, match=r"items\[0\] \(Node n1\): status.conditions: Invalid value"
    ):
        project(load_dump([path]))


def test_unquoted_yaml_timestamps_are_understood(write: Write) -> None:
    text = yaml.safe_dump(node_obj("n1", ready="False", ready_since=1_700_000_000)).replace(
        "'2023", "2023"
    )
    text = text.replace("Z'", "Z")
    views = project(load_dump([write(text)]))
    assert views.nodes[0].ready_since == 1_700_000_000
