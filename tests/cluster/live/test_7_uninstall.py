"""The documented uninstalls (deploy/README.md) leave nothing behind: ``helm uninstall``,
then ``kubectl apply -k deploy/`` and its uninstall. Last: they remove the release.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tests.cluster.cluster import Cluster
from tests.cluster.helpers import (
    NAMESPACE,
    SELECTOR,
    answers,
    apply,
    figure,
    kubectl,
    rolled_out,
    service_manifest,
)
from tests.cluster.release import (
    INTERNAL_NODES,
    MALFORMED,
    applied,
    every_address_answers_cluster,
    ingress_ips,
    until_denied,
)
from tests.deploy.helmchart import RELEASE, environment
from tests.deploy.readme import code_blocks, section
from tests.deploy.render import ROOT
from tests.support.waiting import wait_for


def run_uninstall_block(cluster: Cluster, block: str, env: dict[str, str]) -> None:
    """Run a deploy/README.md uninstall block verbatim (``bash -euo pipefail``, from the
    repository root); assert it exits 0 and that the namespace controller then really
    deletes namespace node-ipam-lb."""
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    wait_for(
        "namespace node-ipam-lb to be gone",
        lambda: kubectl(cluster, "get", "namespace", NAMESPACE, "--ignore-not-found") == "",
        timeout=90,
        interval=0.5,
    )


def test_documented_helm_uninstall_leaves_nothing(release: Cluster, helm: Path) -> None:
    (block,) = [b for b in code_blocks(section("Uninstall"), "sh") if "helm uninstall" in b]
    env = {
        **environment(release.kubeconfig_path),
        "PATH": f"{helm.parent}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(release.kubeconfig_path),
    }
    run_uninstall_block(release, block, env)
    left = kubectl(
        release,
        "get",
        "clusterroles,clusterrolebindings,mutatingwebhookconfigurations,"
        "validatingwebhookconfigurations",
        "-l",
        f"app.kubernetes.io/instance={RELEASE}",
        "-o",
        "name",
    )
    assert left == ""
    # The Services keep their last status (no finalizer): traffic still flows.
    assert every_address_answers_cluster(release)


def test_kubectl_apply_k_deploy_then_the_documented_uninstall(release: Cluster) -> None:
    """After the Helm release is gone: ``kubectl apply -k deploy/`` (the default image
    name ``node-ipam-lb`` with the kustomization's tag, as on kind after ``kind load``),
    both Pods Ready, a new Service gets addresses that answer, the webhook Pod denies a
    malformed selector; then deploy/README.md's kustomize uninstall block, verbatim."""
    started = time.monotonic()
    kubectl(release, "apply", "-k", str(ROOT / "deploy"))
    rolled_out(release, NAMESPACE, "node-ipam-lb")
    # Issue 31: once rollout status returns the webhook is in force; one apply, no retry.
    at_once = applied(
        release, service_manifest("bad-at-once-k", 9995, "Cluster", MALFORMED), "--dry-run=server"
    )
    assert at_once is not None, "admitted: rollout status returned before the webhook was in force"
    assert "denied the request" in at_once and SELECTOR in at_once, at_once
    figure("kubectl apply -k deploy/ -> rollout complete (s)", round(time.monotonic() - started, 1))
    apply(release, service_manifest("web-kustomize", 8083, "Cluster", INTERNAL_NODES))
    ips = wait_for(
        "web-kustomize's addresses",
        lambda: ingress_ips(release, "web-kustomize"),
        timeout=90,
        interval=0.5,
    )
    wait_for(
        "each of them to answer",
        lambda: all(answers(release, ip, 8083) for ip in ips),
        timeout=90,
        interval=0.5,
    )
    figure(
        "kubectl apply -k deploy/ -> a new Service answers (s)",
        round(time.monotonic() - started, 1),
    )
    bad = service_manifest("bad-kustomize", 9998, "Cluster", "role in (edge")
    assert "denied the request" in until_denied(release, bad, timeout=90)[0]
    (block,) = [b for b in code_blocks(section("Uninstall"), "sh") if "delete -k deploy/" in b]
    env = {**os.environ, "KUBECONFIG": str(release.kubeconfig_path)}
    run_uninstall_block(release, block, env)
