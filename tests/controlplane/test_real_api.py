"""The real-API tier's own checks: the control plane answers like a Kubernetes cluster that
kubectl and the ``kubernetes`` client both accept, for the calls node-ipam-lb relies on.

All tests share one session control plane; each works in its own namespace.
"""

from __future__ import annotations

import base64
import datetime
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests.controller.support import distinct_port
from tests.controlplane.build import kubernetes_version
from tests.controlplane.plane import ControlPlane

pytestmark = pytest.mark.controlplane

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kind-4node" / "cluster.yaml"
LB_CLASS = "io.cilium/node"


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace, deleted afterwards (without a controller-manager it only goes to
    Terminating; its name is never reused)."""
    name = _unique("t")
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[kubernetes.client.ApiClient]:
    """A ``kubernetes`` client authenticated as the admin (system:masters)."""
    with control_plane.api_client() as client:
        yield client


def test_version_is_the_pinned_release(control_plane: ControlPlane) -> None:
    status, body = control_plane.request("GET", "/version")
    assert status == 200
    pinned = kubernetes_version()  # e.g. v1.35.4
    assert body["gitVersion"] == pinned
    assert (body["major"], body["minor"]) == tuple(pinned[1:].split(".")[:2])
    kubectl = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    assert kubectl["serverVersion"]["gitVersion"] == pinned


def test_kubectl_creates_a_namespace(control_plane: ControlPlane) -> None:
    name = _unique("x")
    created = control_plane.kubectl("create", "namespace", name)
    assert f"namespace/{name} created" in created.stdout
    got = json.loads(control_plane.kubectl("get", "namespace", name, "-o", "json").stdout)
    assert got["metadata"]["labels"]["kubernetes.io/metadata.name"] == name
    assert got["status"]["phase"] == "Active"
    again = control_plane.kubectl("create", "namespace", name, check=False)
    assert again.returncode != 0
    assert "AlreadyExists" in again.stderr


def _example_in(namespace: str) -> dict[str, Any]:
    """The example List with its namespaced objects moved to ``namespace``; server-allocated
    Service fields (clusterIP, node ports) are dropped so the server allocates its own."""
    listing: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    for item in listing["items"]:
        if item["kind"] == "Node":
            info = item["status"]["nodeInfo"]
            for field in ("machineID", "systemUUID", "bootID"):
                info.setdefault(field, "")
            continue
        item["metadata"]["namespace"] = namespace
        if item["kind"] == "Service":
            spec = item["spec"]
            for field in ("clusterIP", "clusterIPs", "healthCheckNodePort"):
                spec.pop(field, None)
            for port in spec["ports"]:
                port.pop("nodePort", None)
    return listing


def test_kubectl_applies_a_list_dumped_from_kind(
    control_plane: ControlPlane, namespace: str
) -> None:
    """A v1 List dumped from a kind cluster (the example, repaired) goes in with ``kubectl
    apply``; Node status (addresses) is kept on create, Service status is not."""
    listing = _example_in(namespace)
    applied = control_plane.kubectl("apply", "-f", "-", input=json.dumps(listing))
    assert applied.stdout.count(" created") + applied.stdout.count(" configured") + (
        applied.stdout.count(" unchanged")
    ) == len(listing["items"]), applied.stdout
    nodes = json.loads(control_plane.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    internal = {
        node["metadata"]["name"]: [
            a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"
        ]
        for node in nodes
    }
    assert set(internal) >= {"kind-control-plane", "kind-worker", "kind-worker2", "kind-worker3"}
    assert internal["kind-control-plane"] == ["10.89.0.8"]
    services = json.loads(
        control_plane.kubectl("get", "services", "-n", namespace, "-o", "json").stdout
    )["items"]
    by_name = {s["metadata"]["name"]: s for s in services}
    assert by_name["nginx-cluster"]["spec"]["loadBalancerClass"] == LB_CLASS
    assert by_name["other-class"]["spec"]["loadBalancerClass"] == "example.com/other"
    assert by_name["other-class"]["status"]["loadBalancer"] == {}  # status is not created
    ports = [s["spec"]["ports"][0]["nodePort"] for s in services]
    assert len(set(ports)) == len(ports) == 5
    slices = control_plane.kubectl(
        "get", "endpointslices", "-n", namespace, "-l", "kubernetes.io/service-name=nginx-cluster"
    )
    assert "10.0.2.130,10.0.3.100" in slices.stdout


def test_loadbalancer_service_status_patch(
    api: kubernetes.client.ApiClient, namespace: str
) -> None:
    core = kubernetes.client.CoreV1Api(api)
    service = kubernetes.client.V1Service(
        metadata=kubernetes.client.V1ObjectMeta(name="web"),
        spec=kubernetes.client.V1ServiceSpec(
            type="LoadBalancer",
            load_balancer_class=LB_CLASS,
            selector={"app": "web"},
            ports=[kubernetes.client.V1ServicePort(port=80, target_port=8080, protocol="TCP")],
        ),
    )
    created = core.create_namespaced_service(namespace, service)
    assert created.spec.load_balancer_class == LB_CLASS
    assert created.spec.cluster_ip.startswith("10.96.")  # allocated from the configured range
    assert 30000 <= created.spec.ports[0].node_port <= 32767
    assert not created.status.load_balancer.ingress

    patch = {"status": {"loadBalancer": {"ingress": [{"ip": "10.89.0.8", "ipMode": "VIP"}]}}}
    patched = core.patch_namespaced_service_status("web", namespace, patch)
    assert [(i.ip, i.ip_mode) for i in patched.status.load_balancer.ingress] == [
        ("10.89.0.8", "VIP")
    ]
    assert patched.metadata.resource_version != created.metadata.resource_version
    read = core.read_namespaced_service_status("web", namespace)
    assert read.status.load_balancer.ingress[0].ip == "10.89.0.8"

    # Real validation, which a fake might not do: ipMode needs an ip, and the class is
    # immutable once set.
    bad = {"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example", "ipMode": "VIP"}]}}}
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service_status("web", namespace, bad)
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service(
            "web", namespace, {"spec": {"loadBalancerClass": "example.com/other"}}
        )
    assert err.value.status == 422


def test_serviceaccount_token_is_accepted(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.kubectl("create", "serviceaccount", "robot", "-n", namespace)
    token = control_plane.kubectl("create", "token", "robot", "-n", namespace).stdout.strip()
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sub"] == f"system:serviceaccount:{namespace}:robot"
    assert claims["iss"] == control_plane.url

    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    status, body = control_plane.request(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review, token=token
    )
    assert status == 201, body
    user = body["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{namespace}:robot"
    assert f"system:serviceaccounts:{namespace}" in user["groups"]

    # RBAC is on: the service account may not list nodes until it is granted that.
    status, body = control_plane.request("GET", "/api/v1/nodes", token=token)
    assert status == 403, body
    # The same via kubectl with a token kubeconfig, and a token from the Python helper.
    kubeconfig = control_plane.write_kubeconfig(
        control_plane.workdir / f"kubeconfig-{namespace}",
        user="robot",
        token=control_plane.token_for(namespace, "robot"),
    )
    denied = control_plane.kubectl("--kubeconfig", str(kubeconfig), "get", "nodes", check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()

    status, _ = control_plane.request("GET", "/api/v1/namespaces", token=token[:-4] + "AAAA")
    assert status == 401


def test_client_certificate_users_are_subject_to_rbac(
    control_plane: ControlPlane, namespace: str
) -> None:
    kubeconfig = control_plane.kubeconfig_for("jane", ["dev"])
    denied = control_plane.kubectl(
        "--kubeconfig", str(kubeconfig), "get", "services", "-n", namespace, check=False
    )
    assert "forbidden" in denied.stderr.lower()
    # A Role of our own: the aggregated ClusterRoles (view, edit, admin) stay empty here,
    # since their rules are filled in by kube-controller-manager, which does not run.
    control_plane.kubectl(
        "create", "role", "svc-reader", "-n", namespace, "--verb=get,list", "--resource=services"
    )
    control_plane.kubectl(
        "create", "rolebinding", "dev-read", "-n", namespace, "--role=svc-reader", "--group=dev"
    )
    # The RBAC authorizer sees the binding through its informer: eventually, not at once.
    deadline = time.monotonic() + 10
    while True:
        allowed = control_plane.kubectl(
            "--kubeconfig", str(kubeconfig), "get", "services", "-n", namespace, check=False
        )
        if allowed.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert allowed.returncode == 0, allowed.stderr


def test_events_v1_event_shows_as_core_event(
    control_plane: ControlPlane, api: kubernetes.client.ApiClient, namespace: str
) -> None:
    event: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "web.ipam-1"},
        "eventTime": datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds"),
        "type": "Normal",
        "reason": "AddressesAssigned",
        "action": "Assign",
        "note": "assigned 10.89.0.8",
        "reportingController": "io.cilium/node-ipam-lb",
        "reportingInstance": "node-ipam-lb-test",
        "regarding": {"apiVersion": "v1", "kind": "Service", "namespace": namespace, "name": "web"},
    }
    created = kubernetes.client.EventsV1Api(api).create_namespaced_event(namespace, event)
    assert created.reason == "AddressesAssigned"

    listed = json.loads(
        control_plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    )
    assert listed["apiVersion"] == "v1"  # kubectl's `events` is core/v1
    (core_event,) = [e for e in listed["items"] if e["metadata"]["name"] == "web.ipam-1"]
    assert core_event["reason"] == "AddressesAssigned"
    assert core_event["message"] == "assigned 10.89.0.8"
    assert core_event["involvedObject"]["kind"] == "Service"
    assert core_event["involvedObject"]["name"] == "web"
    assert core_event["reportingComponent"] == "io.cilium/node-ipam-lb"
    table = control_plane.kubectl("get", "events", "-n", namespace).stdout
    assert "AddressesAssigned" in table
    assert "service/web" in table


@pytest.mark.parametrize("lean", [True, False], ids=["kept-alive", "urllib3"])
def test_a_status_patch_returns_the_resource_version_the_server_wrote(
    control_plane: ControlPlane, namespace: str, lean: bool
) -> None:
    """``patch_service_status`` picks ``metadata.resourceVersion`` out of the real answer
    (managedFields, spec and status follow it) on both write paths: the reconciler tells
    the late echo of an earlier write of its own by it."""
    from app.kube.client import KubernetesAPI

    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "rv", "namespace": namespace},
        # A port of its own: the real API server is shared by every module (§4.9).
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": LB_CLASS,
            "ports": [{"port": distinct_port(namespace, "rv")}],
        },
    }
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(service))
    with control_plane.api_client() as client:
        api = KubernetesAPI(client, lean_writes=lean)
        versions = []
        for ip in ("192.0.2.1", "192.0.2.2"):
            patch = {"status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}}}
            versions.append(api.patch_service_status(namespace=namespace, name="rv", patch=patch))
    stored = json.loads(
        control_plane.kubectl("get", "service", "rv", "-n", namespace, "-o", "json").stdout
    )
    assert versions[0] != versions[1]
    assert versions[1] == stored["metadata"]["resourceVersion"]
    assert stored["status"]["loadBalancer"]["ingress"][0]["ip"] == "192.0.2.2"
