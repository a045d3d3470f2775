"""Port ownership, proven with packets (docs/design.md §4.9).

Each test leaves the cluster as it found it: what it creates is deleted (namespaces with
their Pods, Services, the host-network Pod), the validating webhook it removes is put back
(the saved object, caBundle included) and seen denying again.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.cluster.helpers import (
    APP,
    all_from,
    answers,
    apply,
    backend_pods,
    by_whom,
    external_ip_column,
    figure,
    ingress_of,
    kubectl,
    kubectl_json,
    namespaces,
    our_service,
    pod_ready,
    port_in_use,
    requests_to,
    rolled_out,
    team_backend,
)
from tests.cluster.images import BACKEND_IMAGE, product_ref
from tests.cluster.release import (
    INTERNAL_NODES,
    admitted_at_apply,
    denied_at_apply,
    ingress_ips,
    validating_webhook_removed,
)
from tests.support.waiting import wait_for

# Each scenario rolls out Pods, waits for the reconciler and for kube-proxy, and deletes
# a namespace (~20 s) on a loaded 2-core machine.
PORTS_TIMEOUT = 300


SHARED_PORT = 8090


KUBELET_PORT = 10250


HOST_PORT = 8095


NODE_1 = "kubernetes.io/hostname=node-1"


@pytest.mark.timeout(PORTS_TIMEOUT)
def test_two_services_on_one_port_the_first_owns_it_then_the_second(release: Cluster) -> None:
    """``alpha`` (team-a) and then ``beta`` (team-b) on one port over every node: alpha
    publishes, beta stays ``<pending>`` with a ``PortInUse`` Event naming alpha, and every
    request to alpha's addresses is served by team-a's Pods (kube-proxy has one Service on
    each address:port). alpha deleted: beta takes the addresses, team-b serves."""
    port = SHARED_PORT
    with namespaces(release, "team-a", "team-b"):
        apply(release, team_backend("team-a", "team-a"), team_backend("team-b", "team-b"))
        rolled_out(release, "team-a", "backend")
        rolled_out(release, "team-b", "backend")
        pods = {team: backend_pods(release, team) for team in ("team-a", "team-b")}
        apply(release, our_service("team-a", "alpha", port))
        alpha_ips = wait_for(
            "alpha's addresses",
            lambda: ingress_of(release, "team-a", "alpha"),
            timeout=60,
            interval=0.5,
        )
        targets = [(ip, port) for ip in alpha_ips]
        wait_for(
            f"alpha's addresses {alpha_ips} to answer",
            lambda: all(answers(release, ip, port) for ip in alpha_ips),
            timeout=30,
            interval=0.5,
        )
        apply(release, our_service("team-b", "beta", port))
        created = time.monotonic()
        event = wait_for(
            "beta's PortInUse Warning Event",
            lambda: port_in_use(release, "team-b", "beta"),
            timeout=60,
            interval=0.5,
        )
        figure("beta created -> PortInUse Event (s)", round(time.monotonic() - created, 1))
        figure("beta's PortInUse Event", event)
        assert "team-a/alpha" in event, event
        assert ingress_of(release, "team-b", "beta") == [], "beta was published too"
        assert external_ip_column(release, "team-b", "beta") == "<pending>"
        served = requests_to(release, targets, 12)
        figure(f"alpha and beta on {port}: alpha's addresses answered by", by_whom(served))
        assert all_from(served, pods["team-a"]), (
            f"not every answer from team-a's Pods {sorted(pods['team-a'])}: {by_whom(served)}"
        )
        assert ingress_of(release, "team-b", "beta") == [], "beta published meanwhile"
        assert ingress_of(release, "team-a", "alpha") == alpha_ips

        kubectl(release, "-n", "team-a", "delete", "service", "alpha")
        deleted = time.monotonic()
        beta_ips = wait_for(
            "beta to take the addresses",
            lambda: ingress_of(release, "team-b", "beta"),
            timeout=60,
            interval=0.5,
        )
        took = time.monotonic() - deleted

        def team_b_everywhere() -> bool:
            for ip in beta_ips:
                answer = answers(release, ip, port)
                if answer is None or answer.get("pod") not in pods["team-b"]:
                    return False
            return True

        wait_for(
            "team-b to answer on every address of beta", team_b_everywhere, timeout=30, interval=0.5
        )
        answering = time.monotonic() - deleted
        figure("alpha deleted -> beta published (s)", round(took, 1))
        figure("alpha deleted -> team-b answers on every address (s)", round(answering, 1))
        assert sorted(beta_ips) == sorted(alpha_ips), (beta_ips, alpha_ips)
        served = requests_to(release, [(ip, port) for ip in beta_ips], 12)
        figure(f"alpha deleted: beta's addresses on {port} answered by", by_whom(served))
        assert all_from(served, pods["team-b"]), (
            f"not every answer from team-b's Pods {sorted(pods['team-b'])}: {by_whom(served)}"
        )


def node_1_pod(namespace: str) -> dict[str, Any]:
    """A Pod on node-1 (``nodeName``) with two containers: ``backend`` (it logs one line
    at start) and ``shell`` (the project's image, Debian: ``/bin/true`` for exec)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "on-node-1", "namespace": namespace, "labels": {"app": "on-node-1"}},
        "spec": {
            "nodeName": "node-1",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "backend",
                    "image": BACKEND_IMAGE,
                    "imagePullPolicy": "Never",
                    "env": [{"name": "SHUTDOWN_DELAY", "value": "0s"}],
                    "ports": [{"containerPort": 8080}],
                },
                {
                    "name": "shell",
                    "image": product_ref(),
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                },
            ],
        },
    }


@pytest.mark.timeout(PORTS_TIMEOUT)
def test_the_kubelet_port_is_never_published_and_logs_and_exec_keep_working(
    release: Cluster,
) -> None:
    """Port 10250 on node-1: denied by the webhook; with the ValidatingWebhookConfiguration
    deleted it is admitted but the reconciler publishes nothing (``PortInUse``, reserved
    port), so kube-apiserver still reaches node-1's kubelet (it dials the InternalIP,
    which kube-proxy would capture for an ingress IP): ``kubectl logs`` and ``kubectl
    exec`` work. The webhook is put back and denies again."""
    namespace = "ports-kubelet"
    service = our_service(namespace, "kubelet-port", KUBELET_PORT, selector=NODE_1, app="on-node-1")
    reserved = f"{KUBELET_PORT}/TCP is reserved for the node itself"
    with namespaces(release, namespace):
        apply(release, node_1_pod(namespace))
        pod_ready(release, namespace, "on-node-1")
        message, _ = denied_at_apply(release, service)
        assert reserved in message, message
        with validating_webhook_removed(release) as name:
            figure("validating webhook removed", name)
            admitted_at_apply(release, service)
            created = time.monotonic()
            event = wait_for(
                "kubelet-port's PortInUse Warning Event",
                lambda: port_in_use(release, namespace, "kubelet-port"),
                timeout=60,
                interval=0.5,
            )
            figure(
                "port 10250 (no webhook): created -> PortInUse Event (s)",
                round(time.monotonic() - created, 1),
            )
            figure("port 10250 (no webhook): PortInUse Event", event)
            assert "reserved" in event, event
            assert ingress_of(release, namespace, "kubelet-port") == [], "10250 published"
            assert release.plane is not None
            logs = release.plane.kubectl(
                "-n", namespace, "logs", "on-node-1", "-c", "backend", check=False
            )
            execd = release.plane.kubectl(
                "-n",
                namespace,
                "exec",
                "on-node-1",
                "-c",
                "shell",
                "--",
                "/bin/true",
                check=False,
            )
            figure(
                "port 10250 (no webhook): kubectl logs / exec on node-1 exit codes",
                (logs.returncode, execd.returncode),
            )
            assert logs.returncode == 0 and "listening on" in logs.stdout, logs.stdout + logs.stderr
            assert execd.returncode == 0, execd.stdout + execd.stderr
            assert ingress_of(release, namespace, "kubelet-port") == [], "10250 published"
            kubectl(release, "-n", namespace, "delete", "service", "kubelet-port")
        message, admitted = denied_at_apply(release, service)
        figure("webhook restored: 10250 copies admitted before the first denial", admitted)
        assert reserved in message, message


@pytest.mark.timeout(PORTS_TIMEOUT)
def test_another_services_node_port_is_never_published(release: Cluster) -> None:
    """A Service of our class whose port is ``web``'s allocated nodePort: denied by the
    webhook (naming traffic/web, seen with ``--dry-run=server``); created with the
    ValidatingWebhookConfiguration deleted, it is never published (``PortInUse``), and
    every node address that serves node ports (iptables mode: web's ingress, node-3's
    ExternalIPs, too) keeps answering on the nodePort from the ``traffic`` backend (the
    intruder has a backend of its own, which would answer if kube-proxy captured the port
    for it)."""
    web = kubectl_json(release, "-n", APP, "get", "service", "web")
    node_port = int(web["spec"]["ports"][0]["nodePort"])
    # nftables mode with nodePortAddresses unset serves node ports on the node's primary
    # addresses only (its InternalIPs here), iptables mode on every local address.
    addresses = ingress_ips(release, "web") if release.proxy_mode == "iptables" else []
    for node in release.nodes:
        addresses += [ip for ip in (node.ipv4, node.ipv6) if ip not in addresses]
    targets = [(ip, node_port) for ip in addresses]
    traffic = backend_pods(release, APP)
    before = requests_to(release, targets, 1)
    figure(f"web's nodePort {node_port} before: answered by", by_whom(before))
    assert all_from(before, traffic), f"baseline: {by_whom(before)}"
    namespace = "ports-nodeport"
    service = our_service(namespace, "intruder", node_port)
    with namespaces(release, namespace):
        apply(release, team_backend(namespace, "intruder", replicas=1))
        rolled_out(release, namespace, "backend")
        message, _ = denied_at_apply(release, service, dry_run=True)
        assert "traffic/web" in message and "nodePort" in message, message
        with validating_webhook_removed(release):
            admitted_at_apply(release, service)
            created = time.monotonic()
            event = wait_for(
                "intruder's PortInUse Warning Event",
                lambda: port_in_use(release, namespace, "intruder"),
                timeout=60,
                interval=0.5,
            )
            figure(
                f"nodePort {node_port} as a port (no webhook): created -> PortInUse (s)",
                round(time.monotonic() - created, 1),
            )
            figure(f"nodePort {node_port} as a port (no webhook): PortInUse Event", event)
            assert "traffic/web" in event, event
            assert ingress_of(release, namespace, "intruder") == [], "published"
            after = requests_to(release, targets, 1)
            served = sum(1 for _, a in after if isinstance(a, dict) and a.get("pod") in traffic)
            figure(f"web's nodePort {node_port} with the intruder: answered by", by_whom(after))
            figure("answered by the traffic backend", f"{served} of {len(after)}")
            assert all_from(after, traffic), by_whom(after)
            assert ingress_of(release, namespace, "intruder") == [], "published"
            kubectl(release, "-n", namespace, "delete", "service", "intruder")
        message, _ = denied_at_apply(release, service, dry_run=True)
        assert "traffic/web" in message, message


def host_network_backend(name: str, port: int, node: str) -> dict[str, Any]:
    """The backend on ``node``'s host network, listening on ``port`` (``PORT``), which it
    declares as a containerPort (hostPort = containerPort on the host network)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": APP, "labels": {"app": "host-port-holder"}},
        "spec": {
            "nodeName": node,
            "hostNetwork": True,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "backend",
                    "image": BACKEND_IMAGE,
                    "imagePullPolicy": "Never",
                    "env": [
                        {"name": "POD_NAME", "value": name},
                        {"name": "NODE_NAME", "value": node},
                        {"name": "VERSION", "value": "host"},
                        {"name": "PORT", "value": str(port)},
                        {"name": "SHUTDOWN_DELAY", "value": "0s"},
                    ],
                    "ports": [{"containerPort": port, "protocol": "TCP"}],
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": port},
                        "periodSeconds": 1,
                    },
                }
            ],
        },
    }


@pytest.mark.timeout(PORTS_TIMEOUT)
def test_a_host_network_pods_port_keeps_its_node_out(release: Cluster) -> None:
    """A ``hostNetwork`` Pod on node-1 declaring (and serving) port 8095; a Service of our
    class on 8095 over node-1 and node-2 (InternalIPs: every node selected, node-3's
    ExternalIPs would be all it lists, §4.4) is published on node-2's addresses only
    (``PortInUse`` naming the Pod), so node-1:8095 still reaches the Pod's own server.
    The Pod deleted, node-1's addresses join and answer from the Service's backend."""
    node_1 = next(n for n in release.nodes if n.name == "node-1")
    node_2 = next(n for n in release.nodes if n.name == "node-2")
    holder = "host-port-holder"
    service = our_service(APP, "host-port", HOST_PORT, selector=INTERNAL_NODES)
    traffic = backend_pods(release, APP)
    try:
        apply(release, host_network_backend(holder, HOST_PORT, "node-1"))
        pod_ready(release, APP, holder)
        apply(release, service)
        created = time.monotonic()
        event = wait_for(
            "host-port's PortInUse Warning Event",
            lambda: port_in_use(release, APP, "host-port"),
            timeout=60,
            interval=0.5,
        )
        figure(
            "hostNetwork Pod's port: created -> PortInUse Event (s)",
            round(time.monotonic() - created, 1),
        )
        figure("hostNetwork Pod's port: PortInUse Event", event)
        listed = wait_for(
            "host-port's addresses",
            lambda: ingress_ips(release, "host-port"),
            timeout=30,
            interval=0.5,
        )
        figure("hostNetwork Pod on node-1: host-port published on", listed)
        assert sorted(listed) == sorted([node_2.ipv4, node_2.ipv6]), (
            f"expected node-2's addresses only; published {listed}"
        )
        assert holder in event, event
        wait_for(
            f"host-port's addresses {listed} to answer (kube-proxy's rules)",
            lambda: all(answers(release, ip, HOST_PORT) for ip in listed),
            timeout=30,
            interval=0.5,
        )
        served = requests_to(release, [(ip, HOST_PORT) for ip in listed], 4)
        own = requests_to(release, [(node_1.ipv4, HOST_PORT), (node_1.ipv6, HOST_PORT)], 4)
        figure("host-port's addresses answered by", by_whom(served))
        figure("node-1's addresses on 8095 answered by", by_whom(own))
        assert all_from(served, traffic), by_whom(served)
        assert all_from(own, {holder}), by_whom(own)

        kubectl(release, "-n", APP, "delete", "pod", holder)
        deleted = time.monotonic()
        wait_for(
            "node-1's addresses to join host-port",
            lambda: len(ingress_ips(release, "host-port")) == 4,
            timeout=60,
            interval=0.5,
        )
        figure(
            "hostNetwork Pod deleted -> node-1 published (s)", round(time.monotonic() - deleted, 1)
        )
        wait_for(
            "node-1's addresses to answer from the traffic backend",
            lambda: all_from(
                requests_to(release, [(node_1.ipv4, HOST_PORT), (node_1.ipv6, HOST_PORT)], 1),
                traffic,
            ),
            timeout=30,
            interval=0.5,
        )
    finally:
        kubectl(release, "-n", APP, "delete", "service", "host-port", "--ignore-not-found")
        kubectl(release, "-n", APP, "delete", "pod", holder, "--ignore-not-found")
