"""The release the cluster's test modules install and exercise (tests/cluster/README.md):
the backend Deployment with the three Services of ``SERVICES`` (``install_backend``), then
node-ipam-lb installed by ``helm install`` (``install_release``), and what they ask of it:
its ingress, whether every published address answers, the Lease holder, a node selector
changed, a manifest applied or denied, a ``helm upgrade``.

The fixtures ``backend`` and ``release`` (``conftest.py``, and ``live/conftest.py`` for the
tests of ``live/``, which share one cluster) call these.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.cluster.cluster import Cluster
from tests.cluster.helpers import (
    APP,
    NAMESPACE,
    SELECTOR,
    answers,
    apply,
    backend_manifest,
    figure,
    helm_install,
    kubectl,
    kubectl_json,
    rolled_out,
    run_helm,
    service_manifest,
)
from tests.cluster.netns import Node
from tests.controlplane.plane import KubectlError
from tests.deploy.helmchart import CHART, RELEASE
from tests.support.waiting import wait_for

INTERNAL_NODES = "kubernetes.io/hostname in (node-1,node-2)"


# Service name -> (port, externalTrafficPolicy, node selector annotation or None)
SERVICES: dict[str, tuple[int, str, str | None]] = {
    "web": (80, "Cluster", None),
    "web-internal": (8081, "Cluster", INTERNAL_NODES),
    "web-local": (8082, "Local", INTERNAL_NODES),
}


# Tests that roll the release (a helm upgrade replaces both Pods one by one, 20-40 s each
# on a loaded 2-core machine) get more than the suite's 120 s.
ROLLING_TIMEOUT = 240


INSTALLED: dict[str, float] = {}


MALFORMED = "role in (edge"


# kubectl's error for a malformed selector applied with --dry-run=server at once after an
# install returned (None: admitted), by how it was installed (issue 31, "Ready means in force").
AT_ONCE: dict[str, str | None] = {}


def ingress(cluster: Cluster, name: str) -> list[dict[str, str]]:
    svc = kubectl_json(cluster, "-n", APP, "get", "service", name)
    return list(svc["status"].get("loadBalancer", {}).get("ingress", []))


def ingress_ips(cluster: Cluster, name: str) -> list[str]:
    return [entry["ip"] for entry in ingress(cluster, name)]


def node_by_address(cluster: Cluster) -> dict[str, Node]:
    found: dict[str, Node] = {}
    for node in cluster.nodes:
        for ip in (node.ipv4, node.ipv6, node.external_ipv4, node.external_ipv6):
            if ip:
                found[ip] = node
    return found


def every_address_answers(cluster: Cluster) -> dict[str, list[str]] | None:
    """Each Service's listed addresses, once every one of them answers; else None."""
    listed: dict[str, list[str]] = {}
    for name, (port, _, _) in SERVICES.items():
        ips = ingress_ips(cluster, name)
        if not ips or any(answers(cluster, ip, port) is None for ip in ips):
            return None
        listed[name] = ips
    return listed


def until_denied(cluster: Cluster, manifest: dict[str, Any], *, timeout: float) -> tuple[str, int]:
    """Apply ``manifest`` (a Service with a malformed selector) until the webhook denies
    it, deleting each admitted copy; returns (kubectl's error, copies admitted before)."""
    admitted = 0
    name = manifest["metadata"]["name"]

    def denied() -> str | None:
        nonlocal admitted
        try:
            apply(cluster, manifest)
        except KubectlError as err:
            return str(err.stderr)
        admitted += 1
        kubectl(cluster, "-n", APP, "delete", "service", name, "--wait=false")
        return None

    message = wait_for(f"the webhook to deny {name}", denied, timeout=timeout, interval=0.5)
    return message, admitted


def install_backend(cluster: Cluster) -> Cluster:
    """The backend Deployment (3 replicas, one per node) and the three Services, created
    before node-ipam-lb is installed (they stay <pending> until then)."""
    kubectl(cluster, "create", "namespace", APP)
    apply(
        cluster,
        backend_manifest(3, "1"),
        *(service_manifest(name, *spec) for name, spec in SERVICES.items()),
    )
    rolled_out(cluster, APP, "backend")
    return cluster


def install_release(cluster: Cluster, helm: Path) -> Cluster:
    """``helm install`` as deploy/README.md says, default image settings (the image
    ``node-ipam-lb:<version>`` the cluster imported on every node), 2 replicas,
    self-managed certificates; measured until every listed address answers. Records when
    it started in ``INSTALLED`` and what one apply at once after it got in ``AT_ONCE``."""
    started = INSTALLED["at"] = helm_install(helm, cluster)
    # What a CI pipeline does next: one apply, no retry (see the test using it).
    AT_ONCE["helm install --wait"] = applied(
        cluster, service_manifest("bad-at-once", 9997, "Cluster", MALFORMED), "--dry-run=server"
    )
    figure("helm install --wait returned (s)", round(time.monotonic() - started, 1))
    rolled_out(cluster, NAMESPACE, "node-ipam-lb")
    figure("helm install -> rollout complete (s)", round(time.monotonic() - started, 1))
    wait_for(
        "every listed EXTERNAL-IP to answer",
        lambda: every_address_answers(cluster),
        timeout=90,
        interval=0.5,
    )
    figure("helm install -> every EXTERNAL-IP answers (s)", round(time.monotonic() - started, 1))
    return cluster


def readyz_of_each_pod(cluster: Cluster) -> dict[str, str]:
    """Each node-ipam-lb Pod's ``/readyz`` text on its health-probe port, through the API
    server's Pod proxy (deploy/README.md: what ``kubectl describe pod`` does not show)."""
    pods = kubectl_json(cluster, "-n", NAMESPACE, "get", "pods")["items"]
    texts = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}:8081/proxy/readyz"
        texts[name] = kubectl(cluster, "get", "--raw", path, check=False)
    return texts


def probe_targets(cluster: Cluster) -> list[tuple[str, int]]:
    return [
        (ip, port)
        for name, (port, policy, _) in SERVICES.items()
        if policy == "Cluster"
        for ip in ingress_ips(cluster, name)
    ]


def helm_upgrade(helm_binary: Path, cluster: Cluster, *args: str) -> None:
    run_helm(
        helm_binary,
        cluster,
        "upgrade",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--reuse-values",
        *args,
    )
    rolled_out(cluster, NAMESPACE, "node-ipam-lb")


def select_nodes(cluster: Cluster, service: str, selector: str) -> None:
    """Set the Service's node selector annotation (``kubectl annotate --overwrite``)."""
    kubectl(
        cluster, "-n", APP, "annotate", "--overwrite", "service", service, f"{SELECTOR}={selector}"
    )


def lease_holder(cluster: Cluster) -> str:
    lease = kubectl_json(cluster, "-n", NAMESPACE, "get", "lease", "node-ipam-lb")
    return str(lease["spec"].get("holderIdentity") or "")


def every_address_answers_cluster(cluster: Cluster) -> bool:
    return all(answers(cluster, ip, port) for ip, port in probe_targets(cluster))


def applied(cluster: Cluster, manifest: dict[str, Any], *args: str) -> str | None:
    """``kubectl apply`` (extra ``args``, e.g. ``--dry-run=server``): ``None`` when
    admitted, else kubectl's error."""
    try:
        kubectl(
            cluster,
            "apply",
            *args,
            "-f",
            "-",
            input=json.dumps({"kind": "List", "apiVersion": "v1", "items": [manifest]}),
        )
    except KubectlError as err:
        return str(err.stderr)
    return None


def denied_at_apply(
    cluster: Cluster, manifest: dict[str, Any], *, dry_run: bool = False, timeout: float = 60
) -> tuple[str, int]:
    """Apply ``manifest`` (a Service) until the webhook denies it, deleting each admitted
    copy (none with ``dry_run``: ``--dry-run=server`` calls the webhooks, stores nothing);
    returns (kubectl's error, copies admitted before)."""
    admitted = 0
    meta = manifest["metadata"]
    args = ("--dry-run=server",) if dry_run else ()

    def denied() -> str | None:
        nonlocal admitted
        error = applied(cluster, manifest, *args)
        if error is not None:
            return error
        admitted += 1
        if not dry_run:
            kubectl(cluster, "-n", meta["namespace"], "delete", "service", meta["name"])
        return None

    message = wait_for(f"the webhook to deny {meta['name']}", denied, timeout=timeout, interval=0.5)
    return message, admitted


def admitted_at_apply(cluster: Cluster, manifest: dict[str, Any], *, timeout: float = 30) -> None:
    """Apply ``manifest`` until admitted: kube-apiserver may call a webhook whose
    configuration was just deleted for a moment (its informer)."""
    errors: list[str] = []

    def admitted() -> bool:
        error = applied(cluster, manifest)
        if error is not None:
            errors.append(error)
        return error is None

    wait_for(
        f"{manifest['metadata']['name']} to be admitted", admitted, timeout=timeout, interval=0.5
    )
    if errors:
        print(f"\n{manifest['metadata']['name']}: denied {len(errors)}x first: {errors[-1]}")


@contextlib.contextmanager
def validating_webhook_removed(cluster: Cluster) -> Iterator[str]:
    """The release's ValidatingWebhookConfiguration deleted; on the way out created again
    from the saved object (labels, annotations, webhooks with their caBundle), so Helm
    still owns it and kube-apiserver can call it at once. Yields its name."""
    (config,) = kubectl_json(
        cluster,
        "get",
        "validatingwebhookconfigurations",
        "-l",
        f"app.kubernetes.io/instance={RELEASE}",
    )["items"]
    name = str(config["metadata"]["name"])
    keep = ("name", "labels", "annotations")
    saved = {
        "apiVersion": config["apiVersion"],
        "kind": config["kind"],
        "metadata": {k: v for k, v in config["metadata"].items() if k in keep},
        "webhooks": config["webhooks"],
    }
    kubectl(cluster, "delete", "validatingwebhookconfiguration", name)
    try:
        yield name
    finally:
        kubectl(cluster, "create", "-f", "-", input=json.dumps(saved))
