"""The Service rules kube-apiserver applies: defaults, ipMode, loadBalancerClass, type switches."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from tests.fakeapi_contract.conftest import ApiServer

LB = {"type": "LoadBalancer", "ports": [{"port": 80}]}


def _create(
    core: client.CoreV1Api, ns: str, spec: dict[str, Any], name: str = "s"
) -> dict[str, Any]:
    core.create_namespaced_service(ns, {"metadata": {"name": name}, "spec": spec})
    stored: dict[str, Any] = json.loads(
        core.read_namespaced_service(name, ns, _preload_content=False).data
    )
    return stored


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            LB,
            {
                "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack",
                "externalTrafficPolicy": "Cluster",
                "sessionAffinity": "None",
                "internalTrafficPolicy": "Cluster",
                "allocateLoadBalancerNodePorts": True,
            },
        ),
        (
            {"ports": [{"port": 80}]},
            {"type": "ClusterIP", "sessionAffinity": "None", "ipFamilies": ["IPv4"]},
        ),
        ({"type": "NodePort", "ports": [{"port": 80}]}, {"externalTrafficPolicy": "Cluster"}),
        (
            {"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]},
            {"ipFamilies": ["IPv4"], "ipFamilyPolicy": "PreferDualStack"},
        ),
    ],
    ids=[
        "LoadBalancer defaults",
        "ClusterIP defaults",
        "NodePort defaults",
        "PreferDualStack on a single-stack cluster",
    ],
)
def test_service_defaults(
    core: client.CoreV1Api, spec: dict[str, Any], expected: dict[str, Any], ns: str
) -> None:
    stored = _create(core, ns, spec)["spec"]
    assert {k: stored.get(k) for k in expected} == expected
    assert (
        stored["clusterIP"].startswith("10.96.") and stored["clusterIPs"][0] == stored["clusterIP"]
    )
    assert stored["ports"][0]["protocol"] == "TCP" and stored["ports"][0]["targetPort"] == 80


def test_cluster_ip_services_get_no_external_traffic_policy(
    core: client.CoreV1Api, ns: str
) -> None:
    assert "externalTrafficPolicy" not in _create(core, ns, {"ports": [{"port": 80}]})["spec"]


def test_ip_mode_defaults_to_vip_on_ingress_with_ip(core: client.CoreV1Api, ns: str) -> None:
    _create(core, ns, LB)
    after = core.patch_namespaced_service_status(
        "s",
        ns,
        {
            "status": {
                "loadBalancer": {
                    "ingress": [
                        {"ip": "192.0.2.1"},
                        {"hostname": "lb.example"},
                        {"ip": "192.0.2.2", "ipMode": "Proxy"},
                    ]
                }
            }
        },
        _preload_content=False,
    )
    ingress = json.loads(after.data)["status"]["loadBalancer"]["ingress"]
    assert ingress == [
        {"ip": "192.0.2.1", "ipMode": "VIP"},
        {"hostname": "lb.example"},
        {"ip": "192.0.2.2", "ipMode": "Proxy"},
    ]


@pytest.mark.parametrize(
    ("ingress", "message"),
    [
        (
            [{"ip": "not-an-ip"}],
            'Service "s" is invalid: status.loadBalancer.ingress[0].ip: Invalid value: '
            '"not-an-ip": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)',
        ),
        (
            [{"hostname": "x", "ipMode": "VIP"}],
            'Service "s" is invalid: status.loadBalancer.ingress[0].ipMode: Forbidden: may not be '
            "specified when `ip` is not set",
        ),
        (
            [{"ip": "192.0.2.1", "ipMode": "Bogus"}],
            'Service "s" is invalid: status.loadBalancer.ingress[0].ipMode: Unsupported value: '
            '"Bogus": supported values: "Proxy", "VIP"',
        ),
    ],
    ids=["ingress ip not an IP", "ipMode without ip", "unknown ipMode"],
)
def test_garbage_status_is_422_and_not_stored(
    core: client.CoreV1Api, ingress: list[dict[str, str]], message: str, ns: str
) -> None:
    _create(core, ns, LB)
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service_status(
            "s", ns, {"status": {"loadBalancer": {"ingress": ingress}}}
        )
    body = json.loads(err.value.body)
    assert (err.value.status, body["reason"], body["message"]) == (422, "Invalid", message)
    assert core.read_namespaced_service_status("s", ns).status.load_balancer.ingress is None


@pytest.mark.parametrize(
    ("create", "patch", "message"),
    [
        (
            {**LB, "loadBalancerClass": "io.cilium/node"},
            {"spec": {"loadBalancerClass": "example.com/other"}},
            'Service "s" is invalid: spec.loadBalancerClass: Invalid value: "example.com/other": '
            "may not change once set",
        ),
        (
            LB,
            {"spec": {"loadBalancerClass": "io.cilium/node"}},
            'Service "s" is invalid: spec.loadBalancerClass: Invalid value: "io.cilium/node": '
            "may not change once set",
        ),
        (
            {**LB, "loadBalancerClass": "io.cilium/node"},
            {"spec": {"loadBalancerClass": None}},
            'Service "s" is invalid: spec.loadBalancerClass: Invalid value: null: '
            "may not change once set",
        ),
        (
            {"ports": [{"port": 80}]},
            {"spec": {"loadBalancerClass": "io.cilium/node"}},
            'Service "s" is invalid: spec.loadBalancerClass: Forbidden: may only be used when '
            "`type` is 'LoadBalancer'",
        ),
    ],
    ids=[
        "class may not change",
        "nil to value on an LB update",
        "value to nil",
        "class on ClusterIP",
    ],
)
def test_load_balancer_class_rules(
    core: client.CoreV1Api, create: dict[str, Any], patch: dict[str, Any], message: str, ns: str
) -> None:
    _create(core, ns, create)
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service("s", ns, patch)
    body = json.loads(err.value.body)
    assert (err.value.status, body["reason"], body["message"]) == (422, "Invalid", message)
    assert body["details"]["causes"][0]["field"] == "spec.loadBalancerClass"


def test_class_can_be_set_on_the_update_that_switches_type_to_load_balancer(
    core: client.CoreV1Api,
    ns: str,
) -> None:
    _create(core, ns, {"ports": [{"port": 80}]})
    after = core.patch_namespaced_service(
        "s", ns, {"spec": {"type": "LoadBalancer", "loadBalancerClass": "io.cilium/node"}}
    )
    assert after.spec.load_balancer_class == "io.cilium/node"


def test_class_on_create_with_bad_format_is_422(core: client.CoreV1Api, ns: str) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(
            ns, {"metadata": {"name": "s"}, "spec": {**LB, "loadBalancerClass": "-bad-"}}
        )
    message = json.loads(err.value.body)["message"]
    assert err.value.status == 422
    assert message.startswith(
        'Service "s" is invalid: spec.loadBalancerClass: Invalid value: "-bad-": name part must '
        "consist of alphanumeric characters"
    )


def test_switching_away_from_load_balancer_clears_class_and_status(
    core: client.CoreV1Api, api_server: ApiServer, ns: str
) -> None:
    _create(core, ns, {**LB, "loadBalancerClass": "io.cilium/node"})
    core.patch_namespaced_service_status(
        "s", ns, {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}}
    )
    core.patch_namespaced_service("s", ns, {"spec": {"type": "ClusterIP"}})
    stored = api_server.get("services", "s", ns)
    assert stored is not None
    assert "loadBalancerClass" not in stored["spec"]
    assert "externalTrafficPolicy" not in stored["spec"]
    assert stored["status"] == {"loadBalancer": {}}
    assert all("nodePort" not in p for p in stored["spec"]["ports"])


def test_cluster_ip_and_node_ports_survive_an_update_that_omits_them(
    core: client.CoreV1Api,
    ns: str,
) -> None:
    first = _create(core, ns, LB)["spec"]
    body = {"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}
    after = core.replace_namespaced_service("s", ns, body).spec
    assert after.cluster_ip == first["clusterIP"]
    assert after.ports[0].node_port == first["ports"][0]["nodePort"]


def test_require_dual_stack_on_a_single_stack_cluster_is_422(
    core: client.CoreV1Api, ns: str
) -> None:
    with pytest.raises(ApiException) as err:
        _create(core, ns, {"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]})
    assert json.loads(err.value.body)["message"] == (
        'Service "s" is invalid: spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this '
        "cluster is not configured for dual-stack services"
    )


def test_service_without_ports_is_422_required(core: client.CoreV1Api, ns: str) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(
            ns, {"metadata": {"name": "s"}, "spec": {"type": "ClusterIP"}}
        )
    assert (
        json.loads(err.value.body)["message"]
        == 'Service "s" is invalid: spec.ports: Required value'
    )
