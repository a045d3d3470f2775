"""``node-ipam-lb preview`` without ``-f``: read the live cluster (docs/design.md §8).

The objects come through the client layer (:mod:`app.kube.client`), found like ``kubectl``
finds its cluster (:func:`app.kube.client.connect`), and are then projected
and selected by the same code as a dump (:func:`app.core.dump.project`,
:func:`app.core.nodeipam.select`). Read, whatever the :class:`~app.preview.run.Scope`
(which only picks the Services shown), as the controller's informers read them: every
Node (selection reads them all), the Services and EndpointSlices of all namespaces and
the Pods of all namespaces that hold a node port (every Pod is listed, page by page, and
only those :func:`app.core.dump.holds_node_ports` keeps are held; with ``host-port-pods``
off, ``fieldSelector=spec.hostNetwork=true``), since port ownership is decided against
every Service and port-holding Pod (docs/design.md §4.9); and kubeadm's ConfigMap
``kube-system/kube-proxy`` when it can be read (kube-proxy's mode, docs/design.md §4.10: a
403 or any other failure of that one read leaves the mode unknown, never the preview).

The running controller's settings and node-health view come from its record Lease
(:meth:`LiveCluster.controller`, :mod:`app.preview.controllerview`): one GET, never fatal.

A user who may not list cluster-wide (RBAC: 403) still gets a preview, with one
``Warning:`` line (:attr:`Dump.warnings <app.core.dump.Dump.warnings>`) saying what the
answer lacks and which permission would fix it: Services and EndpointSlices are then read
as the scope names them (those of the namespace, or each named Service and its slices),
and Pods not at all. With ``-A`` the cluster-wide list is the scope's own
read, and a 403 there stays an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.core import ciliumkpr
from app.core.dump import Dump, DumpError, holds_node_ports
from app.core.kubeproxy import CONFIG_MAP
from app.core.text import elide
from app.kube.client import (
    ApiError,
    ConnectError,
    KubernetesAPI,
    connect,
    pod_field_selector,
)
from app.preview.controllerview import ControllerView, controller_view
from app.preview.run import Scope

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
FORBIDDEN = 403


class LiveCluster:
    """A connection to the cluster of the kubeconfig (or the Pod's in-cluster config).

    ``namespace`` is the default namespace (the kubeconfig context's, else ``default``).
    ``host_port_pods`` is the ``host-port-pods`` setting (docs/design.md §10): which Pods
    are listed and kept (module docstring).

    Raises:
        DumpError: no usable configuration (the message names ``--kubeconfig`` or
            ``KUBECONFIG`` and the reason).
    """

    def __init__(
        self,
        *,
        kubeconfig: Path | None,
        context: str | None,
        request_timeout: float = 30.0,
        host_port_pods: bool = True,
    ) -> None:
        self.host_port_pods = host_port_pods
        try:
            found = connect(kubeconfig, context=context)
        except ConnectError as err:
            raise DumpError(str(err)) from err
        api_client, self.namespace = found.api_client, found.namespace
        self._api = KubernetesAPI(api_client, request_timeout=request_timeout)
        self._host = str(getattr(getattr(api_client, "configuration", None), "host", ""))

    def controller(self, *, namespace: str, name: str) -> ControllerView:
        """The running controller's published settings and node-health view: the record
        Lease ``namespace/name`` (``<leader-election-id>-node-health``), read with one GET;
        a failed read is a note of the view, never an error."""
        try:
            lease = self._api.read_lease(namespace=namespace, name=name)
        except ApiError as err:
            return controller_view(err, where=f"{namespace}/{name}")
        return controller_view(lease, where=f"{namespace}/{name}")

    def read(self, scope: Scope) -> Dump:
        """Every Node, and the Services, EndpointSlices and port-holding Pods of all
        namespaces, as a :class:`Dump` (``scope`` picks only what is shown, and what is
        read when a cluster-wide list is forbidden: see the module docstring).

        A 403 on the cluster-wide Services or EndpointSlices (unless ``scope`` is every
        namespace) falls back to the scope's own reads; a 403 on the Pods reads none;
        each adds one line to ``Dump.warnings``.

        Raises:
            DumpError: any other failed API call, or a 403 on a read the scope itself needs
                (``<server>: <status>: <message>``, e.g. naming the missing permission).
        """
        dump = Dump()
        try:
            dump.nodes = self._api.list_items("nodes")
            try:
                dump.services = self._api.list_items("services")
                dump.endpoint_slices = self._api.list_items("endpointslices")
            except ApiError as err:
                if err.status != FORBIDDEN or (scope.namespace is None and not scope.names):
                    raise
                dump.services, dump.endpoint_slices = self._scoped(scope)
                dump.warnings.append(_scoped_warning(scope, err))
            try:
                dump.pods = self._api.list_items(
                    "pods",
                    field_selector=pod_field_selector(self.host_port_pods),
                    keep=lambda pod: holds_node_ports(pod, host_port_pods=self.host_port_pods),
                )
            except ApiError as err:
                if err.status != FORBIDDEN:
                    raise
                dump.warnings.append(_no_pods_warning(err))
            dump.pools, dump.namespaces = self._pools(dump.warnings)
        except ApiError as err:
            raise DumpError(f"{self._host}: {err}") from err
        dump.kube_proxy = self._kube_proxy()
        dump.cilium_config, dump.cilium_agent_images = self._cilium()
        for kind, objects in (
            ("Node", dump.nodes),
            ("Service", dump.services),
            ("EndpointSlice", dump.endpoint_slices),
            ("Pod", dump.pods),
        ):
            for obj in objects:
                meta = obj.get("metadata") or {}
                shown = "/".join(str(p) for p in (meta.get("namespace"), meta.get("name")) if p)
                dump.origins[id(obj)] = f"{self._host} ({kind} {shown})"
        return dump

    def _scoped(self, scope: Scope) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The Services and EndpointSlices of ``scope`` only: those of its namespace, or
        each named Service and the slices labelled with its name.

        Raises:
            ApiError: a failed call (a named Service that does not exist is left out; the
                preview says it was not found).
        """
        if not scope.names:
            return (
                self._api.list_items("services", namespace=scope.namespace),
                self._api.list_items("endpointslices", namespace=scope.namespace),
            )
        services: list[dict[str, Any]] = []
        slices: list[dict[str, Any]] = []
        for ns, name in scope.names:
            namespace = ns or scope.namespace or self.namespace
            svc = self._api.read_service(namespace=namespace, name=name)
            if svc is not None:
                services.append(svc)
                slices += self._api.list_items(
                    "endpointslices",
                    namespace=namespace,
                    label_selector=f"{SERVICE_NAME_LABEL}={name}",
                )
        return services, slices

    def _pools(self, warnings: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The NodeAddressPools and, when one has ``namespaceSelectors``, the Namespaces
        (docs/design.md §4.12). No CRD (404): none. Forbidden: none, with a warning saying
        the answer may differ from the controller's.

        Raises:
            ApiError: any other failed call.
        """
        try:
            pools = self._api.list_items("nodeaddresspools")
        except ApiError as err:
            if err.status == 404:
                return [], []
            if err.status != FORBIDDEN:
                raise
            warnings.append(
                f"cannot list NodeAddressPools ({err.reason}): the answer assumes there are"
                " none; if an administrator made some, the controller narrows or refuses"
                " Services this preview shows addressed"
            )
            return [], []
        if not any(
            ((p.get("spec") or {}).get("serviceAllocation") or {}).get("namespaceSelectors")
            for p in pools
            if isinstance(p.get("spec"), dict)
        ):
            return pools, []
        try:
            return pools, self._api.list_items("namespaces")
        except ApiError as err:
            if err.status != FORBIDDEN:
                raise
            warnings.append(
                f"cannot list Namespaces ({err.reason}): pools' namespaceSelectors match no"
                " namespace in this answer"
            )
            return pools, []

    def _cilium(self) -> tuple[dict[str, Any] | None, list[str] | None]:
        """Cilium's ConfigMap ``kube-system/cilium-config`` and the images of its agent Pods
        (``kube-system``, label ``k8s-app=cilium``; docs/design.md §4.12), each ``None``
        when absent, not readable (403) or not read (any other error): a warning's input,
        not worth failing the preview for; the agents are read only with the ConfigMap."""
        namespace, name = ciliumkpr.CONFIG_MAP
        try:
            config = self._api.read_config_map(namespace=namespace, name=name)
        except ApiError:
            return None, None
        if config is None:
            return None, None
        try:
            pods = self._api.list_items(
                "pods",
                namespace=ciliumkpr.AGENT_NAMESPACE,
                label_selector="=".join(ciliumkpr.AGENT_LABEL),
            )
        except ApiError:
            return config, None
        return config, ciliumkpr.agent_images(pods)

    def _kube_proxy(self) -> dict[str, Any] | None:
        """kubeadm's ConfigMap ``kube-system/kube-proxy``, or ``None``: absent (not a
        kubeadm cluster), not readable (RBAC: 403) or not read (any other error): a
        warning's input, not worth failing the preview for."""
        namespace, name = CONFIG_MAP
        try:
            return self._api.read_config_map(namespace=namespace, name=name)
        except ApiError:
            return None


def _scoped_warning(scope: Scope, err: ApiError) -> str:
    """The line saying port ownership was decided against the scope's Services only."""
    if scope.names:
        against = "the named Services only"
    else:
        against = f'the Services of namespace "{scope.namespace}" only'
    return (
        f"cannot list services and endpointslices in all namespaces ({elide(str(err), 300)}):"
        f" port ownership (docs/design.md §4.9) was decided against {against}, so a Service"
        " of another namespace holding the same port is not seen; to decide it against every"
        " Service, as the controller does, grant list on services and"
        " endpointslices.discovery.k8s.io cluster-wide (a ClusterRole)"
    )


def _no_pods_warning(err: ApiError) -> str:
    """The line saying Pods were not read."""
    return (
        f"cannot list pods in all namespaces ({elide(str(err), 300)}): Pods were not read,"
        " so none of their host-network containerPorts or hostPorts blocks a node address"
        " here as it does in the controller (port ownership, docs/design.md §4.9); to"
        " include them, grant list on pods cluster-wide (a ClusterRole)"
    )
