"""The Helm chart on a real kube-apiserver: the render matrix passes the server's own
validation (``kubectl apply --dry-run=server``), ``helm install`` and ``helm upgrade``
succeed and a changed setting reaches the Deployment, and the uninstall that
deploy/README.md documents, run verbatim, leaves nothing of the release behind,
cluster-scoped objects included.

The chart installs fixed cluster-scoped names, so this module has a control plane of its
own (``own_control_plane``). No controller-manager or kubelet runs: the Deployment gets no
Pods (nothing waits for them here).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controlplane.plane import ControlPlane
from tests.deploy.chart_matrix import MATRIX
from tests.deploy.helmchart import CHART, RELEASE, environment, run
from tests.deploy.live import install_crd_stub, run_documented_uninstall
from tests.deploy.readme import code_blocks, section

NAMESPACE = "node-ipam-lb"
INSTANCE = f"app.kubernetes.io/instance={RELEASE}"
NAMESPACED = (
    "deployments.apps,serviceaccounts,services,secrets,roles.rbac.authorization.k8s.io,"
    "rolebindings.rbac.authorization.k8s.io,poddisruptionbudgets.policy,"
    "networkpolicies.networking.k8s.io,issuers.cert-manager.io,certificates.cert-manager.io"
)
CLUSTER = (
    "clusterroles.rbac.authorization.k8s.io,clusterrolebindings.rbac.authorization.k8s.io,"
    "mutatingwebhookconfigurations.admissionregistration.k8s.io,"
    "validatingwebhookconfigurations.admissionregistration.k8s.io"
)


@pytest.fixture(scope="module")
def plane(own_control_plane: ControlPlane) -> ControlPlane:
    """The module's control plane with namespace node-ipam-lb and cert-manager's CRDs
    (a stub: tests/deploy/data/cert-manager-crds-stub.yaml)."""
    install_crd_stub(own_control_plane)
    return own_control_plane


def helm_live(
    helm: Path, plane: ControlPlane, *args: str, values: dict[str, Any] | None = None
) -> str:
    result = run(helm, *args, kubeconfig=plane.kubeconfig_path, values=values, timeout=120)
    assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def release_objects(plane: ControlPlane) -> set[str]:
    """``kind.group/name`` of everything labelled as this release, in the namespace and
    cluster-wide."""
    names = set()
    for kinds, scope in ((NAMESPACED, ["-n", NAMESPACE]), (CLUSTER, [])):
        listed = plane.kubectl("get", kinds, *scope, "-l", INSTANCE, "-o", "name")
        names.update(listed.stdout.split())
    return names


def deployment_env(plane: ControlPlane) -> dict[str, Any]:
    deployment = json.loads(
        plane.kubectl("-n", NAMESPACE, "get", "deployment", "node-ipam-lb", "-o", "json").stdout
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.timeout(300)
def test_every_matrix_render_passes_the_api_servers_validation(
    helm: Path, plane: ControlPlane
) -> None:
    plane.kubectl("create", "namespace", NAMESPACE, check=False)
    for name, values in MATRIX.items():
        rendered = run(helm, "template", RELEASE, str(CHART), "-n", NAMESPACE, values=values)
        assert rendered.returncode == 0, rendered.stderr
        objects = [
            doc
            for doc in yaml.safe_load_all(rendered.stdout)
            if doc and not doc["apiVersion"].startswith("monitoring.coreos.com/")
        ]  # no ServiceMonitor CRD here: its fields are checked in test_chart.py
        result = plane.kubectl(
            "apply",
            "--dry-run=server",
            "--validate=strict",
            "-f",
            "-",
            input=yaml.safe_dump_all(objects),
            check=False,
            timeout=60,
        )
        assert result.returncode == 0, f"{name}:\n{result.stderr}"
        assert result.stdout.count("(server dry run)") == len(objects), result.stdout


@pytest.mark.timeout(300)
def test_install_upgrade_and_the_documented_uninstall(helm: Path, plane: ControlPlane) -> None:
    helm_live(helm, plane, "install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace")
    installed = release_objects(plane)
    assert "deployment.apps/node-ipam-lb" in installed
    assert "clusterrole.rbac.authorization.k8s.io/node-ipam-lb-metrics-reader" in installed
    assert "mutatingwebhookconfiguration.admissionregistration.k8s.io/node-ipam-lb" in installed
    assert "NODE_IPAM_LOG_LEVEL" not in deployment_env(plane)

    # A changed setting reaches the Deployment; a new value adds its object.
    helm_live(
        helm,
        plane,
        "upgrade",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--reuse-values",
        values={
            "settings": {"log-level": "debug", "default-lb-service-ipam": "nodeipam"},
            "networkPolicy": {"enabled": True},
        },
    )
    env = deployment_env(plane)
    assert env["NODE_IPAM_LOG_LEVEL"] == "debug"
    assert env["NODE_IPAM_DEFAULT_LB_SERVICE_IPAM"] == "nodeipam"
    upgraded = release_objects(plane)
    assert upgraded == installed | {"networkpolicy.networking.k8s.io/node-ipam-lb"}
    history = json.loads(helm_live(helm, plane, "history", RELEASE, "-n", NAMESPACE, "-o", "json"))
    assert [h["revision"] for h in history] == [1, 2]

    # What the process would create at run time (no Pod runs here): the self-managed
    # certificate Secret and the Lease; the documented uninstall removes them too.
    plane.kubectl("-n", NAMESPACE, "create", "secret", "generic", "node-ipam-lb-webhook-tls")
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "node-ipam-lb", "namespace": NAMESPACE},
                "spec": {"holderIdentity": "node-ipam-lb-0_x"},
            }
        ),
    )

    (block,) = [b for b in code_blocks(section("Uninstall"), "sh") if "helm uninstall" in b]
    environ = {
        **environment(plane.kubeconfig_path),
        "PATH": f"{helm.parent}{os.pathsep}{os.environ['PATH']}",
    }
    result, finalizer = run_documented_uninstall(plane, block, namespace=NAMESPACE, env=environ)
    assert f'release "{RELEASE}" uninstalled' in result.stdout
    assert release_objects(plane) == set()
    # Deleted by the documented commands themselves, before the namespace went: what
    # the namespace controller then finds (and would delete) is nothing of ours.
    assert finalizer.leftovers == [], finalizer.leftovers
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        gone = plane.kubectl("get", kind, "node-ipam-lb", "--ignore-not-found", "-o", "name")
        assert gone.stdout == ""
    releases = plane.kubectl(
        "get", "secrets", "-A", "-l", f"owner=helm,name={RELEASE}", "-o", "name"
    )
    assert releases.stdout == "", "helm's release records are left"
