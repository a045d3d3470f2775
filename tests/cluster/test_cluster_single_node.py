"""A one-node cluster, as a small or cloud user runs one (issue 37; deploy/README.md
"Single-node and control-plane-only clusters" and "Nodes behind a 1:1 NAT"), with the
fixtures ``backend`` and ``release`` of conftest.py (the three Services of
``release.SERVICES``, node-ipam-lb installed by Helm with the default values).

A real single-node cluster, not a 3-node one with every node labelled: bringing it up is
the same ~40 s as three nodes (README "Measured": ``up --nodes 1``), and kubeadm's single
control-plane node is exactly one node carrying the label. Its node, node-1, is also the
cluster's last node, the one whose kubelet runs with ``--cloud-provider=external``, so the
1:1 NAT scenario runs here too: it rewrites node-1's ExternalIPs and the release's
``address-types``, which on live/'s shared cluster would change ``web`` (node-3's
ExternalIPs) under the other modules and cost two more ``helm upgrade`` to restore. The
tests run in order and each leaves its setting for the next (this module's release goes
with its cluster):

1. the exclusion label ``node.kubernetes.io/exclude-from-external-load-balancers`` put on
   node-1 (as kubeadm does on a control-plane node), ``ignore-exclude-lb`` off (the
   default): every Service leaves node-1 and is ``<pending>``, with a ``NoEligibleNodes``
   Warning naming ``ExcludedByLabel`` and node-1, and the former address refuses;
2. ``helm upgrade --set settings.ignore-exclude-lb=true``, the label still there: every
   Service published on node-1 again and every address answering from the client
   namespace;
3. node-1 behind a 1:1 NAT (tests/cluster/nat.py: 203.0.113.10 / 2001:db8::10, on no
   interface, DNATed to its InternalIPs by a router namespace of the run, set as its
   ExternalIPs): with ``address-types`` ``ExternalIP`` (the default) ``web`` publishes only
   the public addresses and requests to them fail, while the same addresses on ``web``'s
   nodePort answer (the NAT delivers; kube-proxy has no rule for the InternalIP at port
   80); with ``ExternalIP,InternalIP`` both are published and the public addresses answer.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cluster.cluster import Cluster
from tests.cluster.helpers import (
    APP,
    answers,
    by_whom,
    figure,
    kubectl,
    kubectl_json,
    requests_to,
    service_events,
    service_story,
)
from tests.cluster.nat import one_to_one_nat
from tests.cluster.release import (
    ROLLING_TIMEOUT,
    SERVICES,
    every_address_answers,
    helm_upgrade,
    ingress_ips,
)
from tests.support.waiting import wait_for

EXCLUDE_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
WEB_PORT = SERVICES["web"][0]
CLUSTER_NODES = 1
"""The fixture ``cluster`` (conftest.py) brings up one node for this module."""


def story(cluster: Cluster) -> str:
    return service_story(cluster, *(f"{APP}/{name}" for name in SERVICES))


def excluded_by_label_event(cluster: Cluster, service: str) -> str | None:
    """The message of the Service's ``NoEligibleNodes`` Warning naming ``ExcludedByLabel``."""
    found = [
        str(e.get("message", ""))
        for e in service_events(cluster, APP, service)
        if e.get("type") == "Warning"
        and e.get("reason") == "NoEligibleNodes"
        and "ExcludedByLabel" in str(e.get("message", ""))
    ]
    return found[-1] if found else None


def test_a_single_labelled_node_leaves_every_service_pending_by_default(release: Cluster) -> None:
    (node,) = release.nodes
    before = ingress_ips(release, "web")
    assert before == [node.external_ipv4, node.external_ipv6], story(release)
    kubectl(release, "label", "node", node.name, f"{EXCLUDE_LABEL}=")
    labelled = time.monotonic()
    wait_for(
        "every Service <pending>",
        lambda: all(ingress_ips(release, name) == [] for name in SERVICES),
        timeout=60,
        interval=0.2,
        explain=lambda: story(release),
    )
    figure(
        "single node labelled -> every Service pending (s)", round(time.monotonic() - labelled, 1)
    )
    message = wait_for(
        "a NoEligibleNodes Event naming ExcludedByLabel on web",
        lambda: excluded_by_label_event(release, "web"),
        timeout=30,
        interval=0.5,
        explain=lambda: story(release),
    )
    figure("NoEligibleNodes message", message)
    assert message is not None and node.name in message, message
    wait_for(
        f"{before[0]}:{WEB_PORT} to refuse (kube-proxy dropped web's ingress rule)",
        lambda: answers(release, before[0], WEB_PORT) is None,
        timeout=30,
        interval=0.5,
    )


@pytest.mark.timeout(ROLLING_TIMEOUT)
def test_with_ignore_exclude_lb_the_labelled_node_is_published_and_answers(
    release: Cluster, helm: Path
) -> None:
    (node,) = release.nodes
    started = time.monotonic()
    helm_upgrade(helm, release, "--set", "settings.ignore-exclude-lb=true")
    upgraded = time.monotonic()
    listed = wait_for(
        "every Service published on node-1 and every address answering",
        lambda: every_address_answers(release),
        timeout=90,
        interval=0.5,
        explain=lambda: story(release),
    )
    figure("helm upgrade ignore-exclude-lb=true (s)", round(upgraded - started, 1))
    figure("rolled out -> every address answers (s)", round(time.monotonic() - upgraded, 1))
    assert listed is not None
    labels = kubectl_json(release, "get", "node", node.name)["metadata"]["labels"]
    assert EXCLUDE_LABEL in labels, "the label must still be there: the setting, not its absence"
    # node-1 has ExternalIPs: every Service publishes those (the ExternalIP preference).
    assert all(ips == [node.external_ipv4, node.external_ipv6] for ips in listed.values()), listed


def web_published_on(cluster: Cluster, addresses: set[str], which: str) -> None:
    """Wait (60 s) until ``web``'s ingress is exactly ``addresses`` (``which`` names them)."""
    wait_for(
        f"web published on {which}: {sorted(addresses)}",
        lambda: set(ingress_ips(cluster, "web")) == addresses,
        timeout=60,
        interval=0.2,
        explain=lambda: story(cluster),
    )


def node_port(cluster: Cluster, service: str) -> int:
    svc = kubectl_json(cluster, "-n", APP, "get", "service", service)
    return int(svc["spec"]["ports"][0]["nodePort"])


@pytest.mark.timeout(ROLLING_TIMEOUT + 60)
def test_a_natd_node_answers_on_its_public_address_only_with_both_address_types(
    release: Cluster, helm: Path
) -> None:
    (node,) = release.nodes
    nodeport = node_port(release, "web")
    with one_to_one_nat(release, node) as public:
        web_published_on(release, set(public), "the public addresses (ExternalIP)")
        # The NAT delivers: the public addresses reach node-1's nodePort, which kube-proxy
        # serves on every local address, the InternalIP the packet now carries included.
        through = requests_to(release, [(ip, nodeport) for ip in public], 2)
        assert all(isinstance(answer, dict) for _, answer in through), by_whom(through)
        # ... but the published port is not: kube-proxy's rule is for the public address.
        external_only = requests_to(release, [(ip, WEB_PORT) for ip in public], 3)
        figure("NAT, address-types ExternalIP: published port", by_whom(external_only))
        assert all(isinstance(answer, str) for _, answer in external_only), by_whom(external_only)

        started = time.monotonic()
        helm_upgrade(
            helm, release, "--set-string", "settings.address-types=ExternalIP\\,InternalIP"
        )
        both = {*public, node.ipv4, node.ipv6}
        web_published_on(release, both, "the public and the internal addresses")
        wait_for(
            "the public addresses to answer web's port",
            lambda: all(answers(release, ip, WEB_PORT) for ip in public),
            timeout=30,
            interval=0.5,
            explain=lambda: story(release),
        )
        answered = requests_to(release, [(ip, WEB_PORT) for ip in sorted(both)], 3)
        figure("helm upgrade address-types=ExternalIP,InternalIP -> public answers (s)",
               round(time.monotonic() - started, 1))  # fmt: skip
        figure("NAT, address-types ExternalIP,InternalIP", by_whom(answered))
        assert all(isinstance(answer, dict) for _, answer in answered), by_whom(answered)
