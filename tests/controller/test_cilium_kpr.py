"""Cilium's kube-proxy replacement read by the controller at start, and the hazard of its
wildcard entries said in the log, the gauge and a Warning Event on the Services it concerns
that get addresses (docs/design.md §4.12; the rule itself: tests/core/test_ciliumkpr.py)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from app.core.ciliumkpr import AGENT_FIELD_SELECTOR
from app.core.hazards import CILIUM_WILDCARD_ENTRIES, KUBE_PROXY_IPVS
from app.kube.client import ApiError, Kind
from app.telemetry import metrics
from tests.controller.memory_api import MemoryAPI
from tests.controller.support import Start, kube_proxy, node, service, wait_until

LOGGER = "node_ipam_lb.controller"
REASON = CILIUM_WILDCARD_ENTRIES


def cilium_config(kpr: str = "true", default_lb_service_ipam: str = "lbipam") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cilium-config", "namespace": "kube-system"},
        "data": {
            "kube-proxy-replacement": kpr,
            "default-lb-service-ipam": default_lb_service_ipam,
            "bpf-lb-sock": "true",
        },
    }


def agent(version: str, name: str = "cilium-abcde") -> dict[str, Any]:
    """A Cilium agent Pod of the chart's DaemonSet."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system", "labels": {"k8s-app": "cilium"}},
        "spec": {
            "nodeName": "w1",
            "hostNetwork": True,
            "containers": [
                {"name": "cilium-agent", "image": f"quay.io/cilium/cilium:{version}@sha256:41f1"}
            ],
        },
        "status": {"phase": "Running"},
    }


def gauge() -> float | None:
    return metrics.REGISTRY.get_sample_value("node_ipam_lb_cilium_wildcard_hazard")


def events(api: MemoryAPI, reason: str) -> list[dict[str, Any]]:
    return [e for e in api.events if e["reason"] == reason]


def read_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The INFO line of the one read (what was found, or why it is unknown)."""
    return [
        r
        for r in caplog.records
        if r.getMessage()
        in ("cilium kube-proxy replacement", "cilium kube-proxy replacement unknown")
    ]


def seed(api: MemoryAPI) -> MemoryAPI:
    """Two nodes; ``web`` (class io.cilium/node) and ``plain`` (class-less) get both
    addresses; ``nowhere`` (class-less) selects no node."""
    api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    api.apply("nodes", node("w2", internal=["10.0.0.2"]))
    api.apply("services", service("web"))
    api.apply("services", service("plain", lb_class=None))
    api.apply("services", service("nowhere", lb_class=None, selector="role=none"))
    return api


@pytest.fixture
def cluster(memory_api: MemoryAPI) -> MemoryAPI:
    return seed(memory_api)


def test_an_affected_agent_is_an_error_line_the_gauge_and_an_event_on_class_less_services(
    cluster: MemoryAPI, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    metrics.CILIUM_WILDCARD_HAZARD.set(0)
    cluster.config_maps["kube-system/cilium-config"] = cilium_config()
    cluster.apply("pods", agent("v1.19.3"))
    cluster.apply("pods", agent("v1.19.3", name="cilium-fghij"))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        controller = start(leader_elect=False, default_lb_service_ipam="nodeipam")
        wait_until(lambda: events(cluster, REASON), what="the CiliumWildcardEntries Event")
        wait_until(lambda: len(events(cluster, "IPsAssigned")) == 2, what="web, plain assigned")
    [info] = read_lines(caplog)
    assert info.levelno == logging.INFO
    assert "Cilium v1.19.3 (kube-proxy-replacement true" in info.__dict__["fields"]["found"]
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    hazard = controller.kube_proxy_hazard(None)
    assert hazard is not None and hazard.reason == REASON
    assert error.getMessage() == hazard.message
    assert "upgrade Cilium to v1.19.5 or later" in hazard.message
    assert gauge() == 1
    [event] = events(cluster, REASON)
    assert (event["type"], event["action"], event["note"]) == (
        "Warning",
        "SelectNodes",
        hazard.message,
    )
    assert event["regarding"]["name"] == "plain", "io.cilium/node Services get no wildcard entry"
    assert controller.kube_proxy_hazard("io.cilium/node") is None
    assert cluster.ingress("default/plain") == ["10.0.0.1", "10.0.0.2"], "still published"
    assert cluster.calls["get configmaps"] == 2  # kube-proxy's, then Cilium's
    assert AGENT_FIELD_SELECTOR in cluster.field_selectors["list pods"]


@pytest.mark.parametrize(
    ("config", "version", "overrides", "found"),
    [
        (cilium_config(), "v1.19.5", {"default_lb_service_ipam": "nodeipam"}, "not affected"),
        (cilium_config(), "v1.18.6", {"default_lb_service_ipam": "nodeipam"}, "not affected"),
        (cilium_config(), "v1.19.3", {}, "get none: not affected"),
        (
            cilium_config(default_lb_service_ipam="none"),
            "v1.19.3",
            {"default_lb_service_ipam": "nodeipam"},
            "not affected",
        ),
        (
            cilium_config(kpr="false"),
            "v1.19.3",
            {"default_lb_service_ipam": "nodeipam"},
            "does not load-balance traffic entering the nodes",
        ),
    ],
    ids=["fixed", "older", "class-less not ours", "agent default none", "no kpr"],
)
def test_no_hazard_on_a_fixed_release_or_with_a_setting_that_avoids_it(
    cluster: MemoryAPI,
    start: Start,
    caplog: pytest.LogCaptureFixture,
    config: dict[str, Any],
    version: str,
    overrides: dict[str, Any],
    found: str,
) -> None:
    metrics.CILIUM_WILDCARD_HAZARD.set(1)  # the read must set it back to 0
    cluster.config_maps["kube-system/cilium-config"] = config
    cluster.apply("pods", agent(version))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        controller = start(leader_elect=False, **overrides)
        wait_until(lambda: read_lines(caplog), what="the read")
        wait_until(lambda: events(cluster, "IPsAssigned"), what="web assigned")
    [info] = read_lines(caplog)
    assert info.getMessage() == "cilium kube-proxy replacement"
    assert found in info.__dict__["fields"]["found"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert gauge() == 0
    assert controller.kube_proxy_hazard(None) is None
    assert not events(cluster, REASON)


def test_without_kube_proxy_replacement_the_agent_pods_are_not_listed(
    cluster: MemoryAPI, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.config_maps["kube-system/cilium-config"] = cilium_config(kpr="false")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        start(leader_elect=False, default_lb_service_ipam="nodeipam")
        wait_until(lambda: read_lines(caplog), what="the read")
    assert AGENT_FIELD_SELECTOR not in cluster.field_selectors["list pods"]


def refuse(api: MemoryAPI, monkeypatch: pytest.MonkeyPatch, what: str, status: int) -> None:
    """Answer the Cilium read ``what`` (``configmap``, or ``pods``: the agents' List) with
    ``status``; every other call as before."""
    read, listed = api.read_config_map, api.list_page

    def read_config_map(*, namespace: str, name: str) -> dict[str, Any] | None:
        if what == "configmap" and name == "cilium-config":
            raise ApiError(status, "configmaps is forbidden" if status == 403 else "boom")
        return read(namespace=namespace, name=name)

    def list_page(kind: Kind, **kwargs: Any) -> dict[str, Any]:
        if what == "pods" and kwargs.get("field_selector") == AGENT_FIELD_SELECTOR:
            raise ApiError(status, "pods is forbidden")
        return listed(kind, **kwargs)

    monkeypatch.setattr(api, "read_config_map", read_config_map)
    monkeypatch.setattr(api, "list_page", list_page)


@pytest.mark.parametrize(
    ("what", "status", "why"),
    [
        (None, 0, "no ConfigMap kube-system/cilium-config"),
        ("configmap", 403, "no permission to read ConfigMap kube-system/cilium-config (RBAC"),
        ("configmap", 500, "reading ConfigMap kube-system/cilium-config failed"),
        ("pods", 403, "no permission to list the Pods of kube-system (RBAC"),
        ("pods", 500, "listing the Pods of kube-system failed"),
    ],
    ids=["absent", "forbidden", "error", "pods forbidden", "pods error"],
)
def test_an_unknown_configuration_is_one_info_line_saying_why_and_no_hazard(
    cluster: MemoryAPI,
    start: Start,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    what: str | None,
    status: int,
    why: str,
) -> None:
    metrics.CILIUM_WILDCARD_HAZARD.set(1)
    if what is not None:
        cluster.config_maps["kube-system/cilium-config"] = cilium_config()
        cluster.apply("pods", agent("v1.19.3"))
        refuse(cluster, monkeypatch, what, status)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        controller = start(leader_elect=False, default_lb_service_ipam="nodeipam")
        wait_until(lambda: read_lines(caplog), what="the read")
    [info] = read_lines(caplog)
    assert info.getMessage() == "cilium kube-proxy replacement unknown"
    assert why in info.__dict__["fields"]["reason"]
    assert info.levelno == logging.INFO
    assert gauge() == 0
    assert controller.kube_proxy_hazard(None) is None
    wait_until(lambda: events(cluster, "IPsAssigned"), what="web assigned")
    assert not events(cluster, REASON)


def test_garbage_in_the_config_map_leaves_it_unknown(
    cluster: MemoryAPI, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.config_maps["kube-system/cilium-config"] = cilium_config(kpr="strict")
    cluster.apply("pods", agent("v1.19.3"))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        controller = start(leader_elect=False, default_lb_service_ipam="nodeipam")
        wait_until(lambda: read_lines(caplog), what="the read")
    [info] = read_lines(caplog)
    assert "not a boolean the agent takes" in info.__dict__["fields"]["reason"]
    assert controller.kube_proxy_hazard(None) is None


def test_both_hazards_make_one_event_on_a_service_they_both_concern(
    cluster: MemoryAPI, start: Start
) -> None:
    """kube-proxy's ConfigMap says ipvs (a leftover beside Cilium's replacement, say) and
    Cilium's wildcard entries concern class-less Services: ``plain`` gets one Event in the
    one slot, with both texts; ``web`` gets the ipvs one only."""
    cluster.config_maps["kube-system/kube-proxy"] = kube_proxy("ipvs")
    cluster.config_maps["kube-system/cilium-config"] = cilium_config()
    cluster.apply("pods", agent("v1.19.4"))
    controller = start(leader_elect=False, default_lb_service_ipam="nodeipam")
    wait_until(lambda: len(controller._hazards) == 2, what="both reads")

    def notes(name: str) -> list[str]:
        return [
            e["note"] for e in events(cluster, KUBE_PROXY_IPVS) if e["regarding"]["name"] == name
        ]

    # Reconciled between the two reads, plain may first have said the ipvs text alone.
    wait_until(lambda: any("; also: Cilium v1.19.4" in n for n in notes("plain")), what="plain")
    wait_until(lambda: notes("web"), what="web warned")
    assert not any("Cilium" in n for n in notes("web"))
    assert not events(cluster, REASON)
