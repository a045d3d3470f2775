"""deploy/ on a real kube-apiserver: every kustomization applies, and the uninstall that
deploy/README.md documents, run verbatim, exits 0 and leaves none of our objects.

These tests own the fixed names (namespace ``node-ipam-lb``, the ClusterRoles and webhook
configurations), so they run on a control plane of this module's own
(``own_control_plane``), not the shared one. No controller-manager or kubelet runs there:
the Deployment is accepted but gets no Pods, and a deleted namespace would stay
``Terminating`` for good, so ``kubectl delete -k`` (which waits for the namespace to be
gone) would never return; :class:`NamespaceFinalizer` stands in for the namespace
controller's last step.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.controlplane.plane import ControlPlane
from tests.deploy.live import install_crd_stub, run_documented_uninstall
from tests.deploy.readme import code_blocks, section
from tests.deploy.render import KUSTOMIZATIONS, NAMESPACE, ROOT, render

CLUSTER_KINDS = (
    "clusterroles.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
    "mutatingwebhookconfigurations.admissionregistration.k8s.io",
    "validatingwebhookconfigurations.admissionregistration.k8s.io",
)


@pytest.fixture(scope="module")
def plane(own_control_plane: ControlPlane) -> ControlPlane:
    """The module's control plane with cert-manager's two CRDs (a stub, see the file)."""
    install_crd_stub(own_control_plane)
    return own_control_plane


def ours(plane: ControlPlane) -> set[str]:
    """``kind/name`` of every cluster-scoped object labelled part-of node-ipam-lb, and of
    the webhook configurations by name (in case a label went missing)."""
    found = set()
    listing = plane.kubectl(
        "get", ",".join(CLUSTER_KINDS), "-l", "app.kubernetes.io/part-of=node-ipam-lb", "-o", "name"
    )
    found.update(listing.stdout.split())
    named = plane.kubectl(
        "get",
        "mutatingwebhookconfiguration,validatingwebhookconfiguration",
        "node-ipam-lb",
        "--ignore-not-found",
        "-o",
        "name",
    )
    found.update(named.stdout.split())
    return found


def expected_cluster_objects(kustomization: str) -> set[str]:
    """``kind.group/name`` (as ``kubectl get -o name`` prints) of the cluster-scoped objects
    the kustomization renders."""
    names = set()
    for obj in render(kustomization):
        group = obj["apiVersion"].rpartition("/")[0]
        resource = f"{obj['kind'].lower()}.{group}"
        if resource in CLUSTER_KINDS:
            names.add(f"{resource}/{obj['metadata']['name']}")
    return names


@pytest.mark.timeout(300)
def test_every_kustomization_applies_and_the_documented_uninstall_exits_0(
    plane: ControlPlane,
) -> None:
    # Apply each variant in turn onto the same cluster, as an operator switching between
    # them would (kubectl apply updates what is there; it prunes nothing).
    for kustomization in KUSTOMIZATIONS:
        applied = plane.kubectl("apply", "-k", str(ROOT / kustomization), timeout=90)
        assert applied.stdout.count("\n") == len(render(kustomization)), applied.stdout
        # Every object it renders is now on the server.
        listed = plane.kubectl("get", "-k", str(ROOT / kustomization), "-o", "name", timeout=60)
        assert len(listed.stdout.split()) == len(render(kustomization)), listed.stdout
    deployment = json.loads(
        plane.kubectl("-n", NAMESPACE, "get", "deployment", "node-ipam-lb", "-o", "json").stdout
    )
    assert deployment["metadata"]["generation"] >= 1
    assert expected_cluster_objects("deploy") <= ours(plane)

    # The Uninstall section's block, verbatim, in one shell that stops at the first
    # failing command (as an operator pasting it would notice).
    (block,) = [b for b in code_blocks(section("Uninstall"), "sh") if "delete -k" in b]
    environ = {**os.environ, "KUBECONFIG": str(plane.kubeconfig_path)}
    result, _ = run_documented_uninstall(plane, block, namespace=NAMESPACE, env=environ)
    # Its last command prints nothing when both webhook configurations are gone: the only
    # lines naming them are the two deletions.
    webhook_lines = [line for line in result.stdout.splitlines() if "webhookconfiguration" in line]
    assert len(webhook_lines) == 2 and all(line.endswith(" deleted") for line in webhook_lines)
    assert "NotFound" not in result.stderr
    assert ours(plane) == set()
    gone = plane.kubectl("get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name")
    assert gone.stdout == ""
