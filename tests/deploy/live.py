"""Helpers for the deploy tests that run on a real kube-apiserver (``own_control_plane``):
cert-manager's CRDs as a stub, and a stand-in for the namespace controller."""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType

from tests.controlplane.plane import ControlPlane

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
