"""``node-ipam-lb preview`` without ``-f``: read the live cluster (docs/design.md §8).

The objects come through the client layer (:mod:`app.kube.client`), found like ``kubectl``
finds its cluster (:func:`app.kube.client.connect`), and are then projected
and selected by the same code as a dump (:func:`app.core.dump.project`,
:func:`app.core.nodeipam.select`). Only what the :class:`~app.preview.run.Scope` needs is
read: every Node (selection reads them all), and the Services and EndpointSlices of the
namespace (all namespaces with ``-A``), or of each named Service; and kubeadm's ConfigMap
``kube-system/kube-proxy`` when it can be read (kube-proxy's mode, docs/design.md §4.10:
a 403 or any other failure of that one read leaves the mode unknown, never the preview).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.core.dump import Dump, DumpError
from app.core.kubeproxy import CONFIG_MAP
from app.kube.client import (
    ApiError,
    ConnectError,
    KubernetesAPI,
    connect,
)
from app.preview.run import Scope

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


class LiveCluster:
    """A connection to the cluster of the kubeconfig (or the Pod's in-cluster config).

    ``namespace`` is the default namespace (the kubeconfig context's, else ``default``).

    Raises:
        DumpError: no usable configuration (the message names ``--kubeconfig`` or
            ``KUBECONFIG`` and the reason).
    """

    def __init__(
        self, *, kubeconfig: Path | None, context: str | None, request_timeout: float = 30.0
    ) -> None:
        try:
            found = connect(kubeconfig, context=context)
        except ConnectError as err:
            raise DumpError(str(err)) from err
        api_client, self.namespace = found.api_client, found.namespace
        self._api = KubernetesAPI(api_client, request_timeout=request_timeout)
        self._host = str(getattr(getattr(api_client, "configuration", None), "host", ""))

    def read(self, scope: Scope) -> Dump:
        """The Nodes, Services and EndpointSlices ``scope`` needs, as a :class:`Dump`.

        Raises:
            DumpError: an API call failed (``<server>: <status>: <message>``, e.g. a 403
                naming the missing permission).
        """
        dump = Dump()
        try:
            dump.nodes = self._api.list_items("nodes")
            if scope.names:
                for ns, name in scope.names:
                    namespace = ns or scope.namespace or self.namespace
                    svc = self._api.read_service(namespace=namespace, name=name)
                    if svc is not None:
                        dump.services.append(svc)
                        dump.endpoint_slices += self._api.list_items(
                            "endpointslices",
                            namespace=namespace,
                            label_selector=f"{SERVICE_NAME_LABEL}={name}",
                        )
            else:
                dump.services = self._api.list_items("services", namespace=scope.namespace)
                dump.endpoint_slices = self._api.list_items(
                    "endpointslices", namespace=scope.namespace
                )
        except ApiError as err:
            raise DumpError(f"{self._host}: {err}") from err
        dump.kube_proxy = self._kube_proxy()
        for kind, objects in (
            ("Node", dump.nodes),
            ("Service", dump.services),
            ("EndpointSlice", dump.endpoint_slices),
        ):
            for obj in objects:
                meta = obj.get("metadata") or {}
                shown = "/".join(str(p) for p in (meta.get("namespace"), meta.get("name")) if p)
                dump.origins[id(obj)] = f"{self._host} ({kind} {shown})"
        return dump

    def _kube_proxy(self) -> dict[str, Any] | None:
        """kubeadm's ConfigMap ``kube-system/kube-proxy``, or ``None``: absent (not a
        kubeadm cluster), not readable (RBAC: 403) or not read (any other error): a
        warning's input, not worth failing the preview for."""
        namespace, name = CONFIG_MAP
        try:
            return self._api.read_config_map(namespace=namespace, name=name)
        except ApiError:
            return None
