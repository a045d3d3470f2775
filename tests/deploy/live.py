"""Helpers for the deploy tests that run on a real kube-apiserver (``own_control_plane``):
cert-manager's CRDs as a stub, a stand-in for the namespace controller, and a documented
uninstall run under it."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from tests.controlplane.plane import ControlPlane
from tests.deploy.render import ROOT

CRD_STUB = Path(__file__).parent / "data" / "cert-manager-crds-stub.yaml"


def install_crd_stub(plane: ControlPlane) -> None:
    """Create cert-manager's Issuer and Certificate CRDs (a stub: see the file) and wait
    until both are served."""
    plane.kubectl("apply", "-f", str(CRD_STUB))
    for crd in ("issuers.cert-manager.io", "certificates.cert-manager.io"):
        plane.kubectl(
            "wait", "--for=condition=Established", f"crd/{crd}", "--timeout=30s", timeout=40
        )


class NamespaceFinalizer:
    """While active, does what kube-controller-manager's namespace controller does once a
    namespace is ``Terminating``: deletes what is left in it (every namespaced kind our
    manifests use) and then removes the ``kubernetes`` finalizer (``PUT
    .../namespaces/<name>/finalize``), so the namespace is really deleted. Polls every
    0.2 s, from a background thread."""

    KINDS = (
        "deployments.apps,serviceaccounts,roles.rbac.authorization.k8s.io,"
        "rolebindings.rbac.authorization.k8s.io,services,secrets,leases.coordination.k8s.io,"
        "poddisruptionbudgets.policy,networkpolicies.networking.k8s.io,"
        "issuers.cert-manager.io,certificates.cert-manager.io"
    )

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.plane, self.namespace = plane, namespace
        self.finalized = False
        self.leftovers: list[str] = []
        """What was left in the namespace when it became Terminating (``kind/name``)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="namespace-finalizer", daemon=True)

    def __enter__(self) -> NamespaceFinalizer:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}"
        while not self._stop.wait(0.2):
            status, body = self.plane.request("GET", path)
            if status != 200 or not body["metadata"].get("deletionTimestamp"):
                continue
            listed = self.plane.kubectl(
                "-n", self.namespace, "get", self.KINDS, "-o", "name", check=False
            )
            self.leftovers = listed.stdout.split()
            self.plane.kubectl(
                "-n", self.namespace, "delete", self.KINDS, "--all", "--wait=false", check=False
            )
            body["spec"]["finalizers"] = []
            status, _ = self.plane.request("PUT", f"{path}/finalize", body)
            self.finalized = status == 200
            if self.finalized:
                return


def run_documented_uninstall(
    plane: ControlPlane, block: str, *, namespace: str, env: Mapping[str, str]
) -> tuple[subprocess.CompletedProcess[str], NamespaceFinalizer]:
    """Run a README shell ``block`` verbatim in one ``bash -euo pipefail`` from the
    repository root (as an operator pasting it would notice the first failing command),
    with ``env``, while a :class:`NamespaceFinalizer` stands in for the namespace
    controller of ``namespace``. Asserts that the block exited 0 (its output in the
    message) and that the namespace was finalized; returns the run and the finalizer
    (its ``leftovers``)."""
    with NamespaceFinalizer(plane, namespace) as finalizer:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=ROOT,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert finalizer.finalized
    return result, finalizer
