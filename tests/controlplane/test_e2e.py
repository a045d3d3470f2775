"""End to end on a real kube-apiserver, as an operator would do it: ``kubectl apply -k
deploy/``, ``node-ipam-lb serve`` on the host **as deploy/'s ServiceAccount** (a TokenRequest
token, so the real RBAC authorizer judges every call it makes), deploy/'s webhook
configurations pointed at it (``clientConfig.url`` + ``caBundle``, as envtest does), then
the kind example and the changes a cluster sees.

One module-scoped world (one ``serve``, the deploy/ namespace); every wait has a deadline.
``serve`` runs the default-nodeipam variant (``--default-lb-service-ipam nodeipam``, what
``deploy/overlays/default-nodeipam`` sets), so the mutating webhook defaults the class.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cases import read_expected
from tests.controller.support import distinct_port
from tests.controlplane.plane import ControlPlane
from tests.controlplane.serving import (
    CLASS,
    DEPLOY,
    EXCLUDE,
    ROOT,
    WAIT,
    apply_deploy,
    refused,
    start_serve,
    stop,
    wait_ready,
    warnings,
)
from tests.devenv import manifests
from tests.support.waiting import wait_for

pytestmark = pytest.mark.controlplane

EXPECTED = ROOT / "examples" / "kind-4node" / "expected-port-ownership.txt"


@dataclass
class World:
    plane: ControlPlane
    url: str  # https://127.0.0.1:<port> of serve
    ca: Path
    log: Path
    process: subprocess.Popen[bytes]

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.plane.kubectl(*args, input=stdin, check=False)

    def ingress(self, namespace: str, name: str) -> list[str] | None:
        got = self.kubectl("get", "service", name, "-n", namespace, "-o", "json")
        if got.returncode != 0:
            return None
        entries = json.loads(got.stdout)["status"].get("loadBalancer", {}).get("ingress") or []
        return [e.get("ip", "") for e in entries]


def _apply_ok(target: World | ControlPlane, text: str, *extra: str) -> str:
    plane = target.plane if isinstance(target, World) else target
    result = plane.kubectl("apply", *extra, "-f", "-", input=text, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return str(result.stdout + result.stderr)


@pytest.fixture(scope="module")
def world(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    apply_deploy(control_plane)
    workdir = tmp_path_factory.mktemp("e2e")
    process, url, ca, log = start_serve(
        control_plane, workdir, "serve", "--default-lb-service-ipam", "nodeipam"
    )
    try:
        wait_ready(process, url, ca, log)
        configs = manifests.webhook_configurations(url, ca.read_bytes())
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": configs})
        _apply_ok(control_plane, text)
        world = World(control_plane, url, ca, log, process)
        # kube-apiserver sees new webhook configurations through its informer: wait until
        # the validating webhook answers (a server-side dry run of a bad Service is denied).
        bad = manifests.bad_service()

        def denied() -> bool:
            got = world.kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(bad))
            return got.returncode != 0 and "denied the request" in got.stderr

        wait_for("the validating webhook is called", denied)
        yield world
    finally:
        stop(process)


def _fresh_namespace(plane: ControlPlane) -> str:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    plane.kubectl("create", "namespace", name)
    return name


def _expected() -> dict[tuple[str, str], list[str] | None]:
    wanted: dict[tuple[str, str], list[str] | None] = {}
    for line in EXPECTED.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.partition(":")
        namespace, _, name = key.strip().partition("/")
        value = value.strip()
        wanted[(namespace, name)] = (
            None if value == "untouched" else [ip for ip in value.split(",") if ip]
        )
    return wanted


# -- deploy/ -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overlay",
    sorted(p.name for p in (DEPLOY / "overlays").iterdir() if p.is_dir()),
)
def test_every_overlay_is_accepted_by_the_real_server(world: World, overlay: str) -> None:
    """Each overlay, rendered by kubectl's kustomize, passes the real server's validation
    (a server-side dry run; deploy/ itself was applied for real by the fixture).
    cert-manager's Certificate/Issuer kinds and the Prometheus Operator's PrometheusRule
    need their CRDs, which this plane lacks: they are left out, with every other object of
    that overlay still checked (the PrometheusRule's spec by ``promtool check rules``,
    tests/monitoring/test_rules.py)."""
    rendered = world.kubectl("kustomize", str(DEPLOY / "overlays" / overlay))
    assert rendered.returncode == 0, rendered.stderr
    objects = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    crds = ("cert-manager.io/", "monitoring.coreos.com/")
    kept = [o for o in objects if not o["apiVersion"].startswith(crds)]
    assert kept
    listing = json.dumps({"apiVersion": "v1", "kind": "List", "items": kept})
    out = _apply_ok(world, listing, "--dry-run=server")
    assert out.count("(server dry run)") == len(kept), out


# -- webhooks ------------------------------------------------------------------------------


def test_malformed_selector_is_denied_with_our_message(world: World) -> None:
    namespace = _fresh_namespace(world.plane)
    bad = manifests.bad_service()
    bad["metadata"]["namespace"] = namespace
    got = world.kubectl("apply", "-f", "-", stdin=json.dumps(bad))
    assert got.returncode == 1
    assert 'admission webhook "validate.node-ipam-lb.io" denied the request: ' in got.stderr
    assert "io.cilium.nodeipam/match-node-labels" in got.stderr
    assert world.kubectl("get", "service", "bad-selector", "-n", namespace).returncode == 1


def test_kubectl_prints_our_warnings(world: World) -> None:
    namespace = _fresh_namespace(world.plane)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "plain",
            "namespace": namespace,
            "annotations": {"io.cilium.nodeipam/match-node-labels": "pool=edge"},
        },
        "spec": {"ports": [{"port": 80}]},
    }
    got = world.kubectl("apply", "-f", "-", stdin=json.dumps(service))
    assert got.returncode == 0, got.stderr
    assert "Warning: io.cilium.nodeipam/match-node-labels is ignored" in got.stderr


def test_class_is_defaulted_under_default_nodeipam(world: World) -> None:
    namespace = _fresh_namespace(world.plane)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "classless", "namespace": namespace},
        # Ours once defaulted, over every Node: a port of its own, or it would own the
        # kind example's TCP/80 applied later on this shared server (§4.9).
        "spec": {
            "type": "LoadBalancer",
            "ports": [{"port": distinct_port(namespace, "classless")}],
        },
    }
    _apply_ok(world, json.dumps(service))
    got = json.loads(world.kubectl("get", "svc", "classless", "-n", namespace, "-o", "json").stdout)
    assert got["spec"]["loadBalancerClass"] == CLASS


# -- the kind example and what a cluster does to it ----------------------------------------


@pytest.fixture(scope="module")
def example(world: World) -> Iterator[World]:
    """The kind example applied as a client would; deleted afterwards (the session's other
    tests apply it verbatim, with other cluster IPs)."""
    objects = manifests.example_objects()
    listing = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    _apply_ok(world, listing)
    yield world
    world.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=listing)
    for obj in objects:  # a finalizer with nobody left to remove it would keep it
        if obj["kind"] == "Service":
            name = obj["metadata"]["name"]
            patch = '{"metadata":{"finalizers":null}}'
            world.kubectl("patch", "svc", name, "-n", "default", "--type=merge", "-p", patch)


def _converged(world: World, wanted: dict[tuple[str, str], list[str] | None]) -> bool:
    for (namespace, name), ips in wanted.items():
        got = world.ingress(namespace, name)
        if ips is None:
            if got:
                return False
        elif (got or []) != ips:  # a Service that gets no address keeps no ingress
            return False
    return True


def test_example_converges_to_expected(example: World) -> None:
    wanted = _expected()
    deadline = time.monotonic() + WAIT
    while not _converged(example, wanted):
        if time.monotonic() > deadline:
            pytest.fail(
                f"expected.txt not reached within {WAIT:g} s; serve says:\n" + warnings(example.log)
            )
        time.sleep(0.2)
    table = example.kubectl("get", "svc", "-n", "default", "nginx-cluster").stdout
    header, row = table.splitlines()[:2]
    assert header.split()[3] == "EXTERNAL-IP"
    assert row.split()[3] == "10.89.0.6,10.89.0.7,10.89.0.9"


def test_kubectl_get_events_shows_ours(example: World) -> None:
    wait_for("the example converges", lambda: _converged(example, _expected()))

    def listed() -> str:
        out = example.kubectl("get", "events", "-n", "default").stdout
        return out if "service/nginx-cluster" in out else ""

    table = wait_for("kubectl get events lists an Event about nginx-cluster", listed)
    assert "AddressesAssigned" in table or "Normal" in table, table


def test_kubectl_describe_svc_shows_our_events(example: World) -> None:
    """kubectl describe selects a Service's Events by involvedObject.uid (regarding.uid):
    ours must carry the Service's uid."""
    wait_for("the example converges", lambda: _converged(example, _expected()))
    wait_for(
        "an Event about nginx-cluster exists",
        lambda: "service/nginx-cluster" in example.kubectl("get", "events", "-n", "default").stdout,
    )
    described = example.kubectl("describe", "svc", "nginx-cluster", "-n", "default").stdout
    events = described.split("Events:", 1)[1]
    assert "<none>" not in events.splitlines()[0], described


def _node_patch(world: World, node: str, patch: dict[str, Any], *extra: str) -> None:
    got = world.kubectl("patch", "node", node, "--type=merge", "-p", json.dumps(patch), *extra)
    assert got.returncode == 0, got.stderr


def test_label_unlabel_cordon_and_address_change_converge(example: World) -> None:
    wait_for("the example converges", lambda: _converged(example, _expected()))
    # The exclusion label takes kind-worker3 (10.89.0.9) out of nginx-cluster; unlabel back.
    _node_patch(example, "kind-worker3", {"metadata": {"labels": {EXCLUDE: ""}}})
    wait_for(
        "the excluded node leaves nginx-cluster",
        lambda: example.ingress("default", "nginx-cluster") == ["10.89.0.6", "10.89.0.7"],
    )
    _node_patch(example, "kind-worker3", {"metadata": {"labels": {EXCLUDE: None}}})
    wait_for("unlabelled node comes back", lambda: _converged(example, _expected()))
    # Cordon: Cilium's Node IPAM ignores unschedulable; nothing changes.
    _node_patch(example, "kind-worker3", {"spec": {"unschedulable": True}})
    time.sleep(1.0)
    assert _converged(example, _expected())
    _node_patch(example, "kind-worker3", {"spec": {"unschedulable": None}})
    # The address of kind-worker3 changes (a status write, as the kubelet does).
    node = json.loads(example.kubectl("get", "node", "kind-worker3", "-o", "json").stdout)
    addresses = [
        {**a, "address": "10.89.0.99"} if a["type"] == "InternalIP" else a
        for a in node["status"]["addresses"]
    ]
    _node_patch(
        example, "kind-worker3", {"status": {"addresses": addresses}}, "--subresource=status"
    )
    wait_for(
        "the new address is published",
        lambda: (
            example.ingress("default", "nginx-cluster") == ["10.89.0.6", "10.89.0.7", "10.89.0.99"]
        ),
    )
    addresses = [
        {**a, "address": "10.89.0.9"} if a["type"] == "InternalIP" else a
        for a in node["status"]["addresses"]
    ]
    _node_patch(
        example, "kind-worker3", {"status": {"addresses": addresses}}, "--subresource=status"
    )
    wait_for("the old address comes back", lambda: _converged(example, _expected()))


def test_traffic_policy_and_type_switches_converge(example: World) -> None:
    wait_for("the example converges", lambda: _converged(example, _expected()))

    def patch(svc: str, body: dict[str, Any]) -> None:
        got = example.kubectl("patch", "svc", svc, "-n", "default", "-p", json.dumps(body))
        assert got.returncode == 0, got.stderr

    # eTP Local: only nodes with a ready endpoint of the Service (those of nginx-local in
    # Cilium's expected.txt: select's answer; nginx-cluster keeps TCP/80 there, §4.9).
    patch("nginx-cluster", {"spec": {"externalTrafficPolicy": "Local"}})
    local = read_expected(EXPECTED.parent)["default/nginx-local"]
    wait_for(
        "eTP Local narrows the nodes", lambda: example.ingress("default", "nginx-cluster") == local
    )
    patch("nginx-cluster", {"spec": {"externalTrafficPolicy": "Cluster"}})
    wait_for("eTP Cluster restores", lambda: _converged(example, _expected()))
    # The class is immutable on a real server; switching type away clears it (and the
    # status), switching back with the class makes it ours again. On a Service with a
    # port of its own: nginx-cluster's TCP/80 would go to nginx-local meanwhile and stay
    # there (the Service that already publishes an address keeps it, §4.9).
    switcher = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "switcher", "namespace": "default"},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": CLASS,
            "ports": [{"port": distinct_port("default", "switcher")}],
        },
    }
    _apply_ok(example, json.dumps(switcher))
    everywhere = _expected()[("default", "nginx-cluster")]
    wait_for("switcher converges", lambda: example.ingress("default", "switcher") == everywhere)
    patch("switcher", {"spec": {"type": "ClusterIP", "externalTrafficPolicy": None}})
    wait_for("a ClusterIP Service: no ingress", lambda: not example.ingress("default", "switcher"))
    patch("switcher", {"spec": {"type": "LoadBalancer", "loadBalancerClass": CLASS}})
    wait_for("back to LoadBalancer", lambda: example.ingress("default", "switcher") == everywhere)
    example.kubectl("delete", "svc", "switcher", "-n", "default")


def test_endpointslice_readiness_flip_converges(example: World) -> None:
    wait_for("the example converges", lambda: _converged(example, _expected()))
    own_port = distinct_port("default", "nginx-local")

    def port(number: int) -> None:
        # A merge patch replaces the list (a strategic one would add a port by its key).
        entry = {"port": number, "protocol": "TCP", "targetPort": 80}
        body = json.dumps({"spec": {"ports": [entry]}})
        got = example.kubectl(
            "patch", "svc", "nginx-local", "-n", "default", "--type=merge", "-p", body
        )
        assert got.returncode == 0, got.stderr

    # nginx-local loses TCP/80 to nginx-cluster (§4.9): on a port of its own it publishes
    # what select gives it (Cilium's expected.txt), which the flip then changes.
    port(own_port)
    local = read_expected(EXPECTED.parent)["default/nginx-local"]
    wait_for("nginx-local publishes", lambda: example.ingress("default", "nginx-local") == local)
    slices = json.loads(
        example.kubectl(
            "get",
            "endpointslices",
            "-n",
            "default",
            "-l",
            "kubernetes.io/service-name=nginx-local",
            "-o",
            "json",
        ).stdout
    )["items"]
    assert slices
    original = slices[0]
    flipped = json.loads(json.dumps(original))
    for endpoint in flipped["endpoints"]:
        endpoint.setdefault("conditions", {})["ready"] = False
    for meta_key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
        flipped["metadata"].pop(meta_key, None)
        original["metadata"].pop(meta_key, None)
    _apply_ok(example, json.dumps(flipped))
    wait_for(
        "readiness flip changes nginx-local",
        lambda: example.ingress("default", "nginx-local") != local,
    )
    _apply_ok(example, json.dumps(original))
    wait_for("ready again", lambda: example.ingress("default", "nginx-local") == local)
    # Back on TCP/80: nginx-cluster, older or first by name, keeps it (both publish it).
    port(80)
    wait_for("back on port 80 converges", lambda: _converged(example, _expected()))


def test_the_real_server_accepted_every_write(example: World) -> None:
    """No call of ours was refused: no 4xx in serve's log (403 = an RBAC gap in deploy/,
    422 = a status the real server rejects)."""
    wait_for("the example converges", lambda: _converged(example, _expected()))
    refusals = refused(example.log)
    assert not refusals, "\n".join(refusals[:20])
    assert example.process.poll() is None
