"""Least privilege in the rendered RBAC: what the ServiceAccount may and may not do.

The live counterpart, test_rbac_live.py, checks that every call the running process makes
is allowed; this file pins what must stay denied, and checks the evaluator itself.
"""

from __future__ import annotations

import pytest

from app.core import pools
from tests.deploy.rbac import Authorizer, Request
from tests.deploy.render import KUSTOMIZATIONS, NAMESPACE, SECRET_NAME, env, render

NS = NAMESPACE
GROUP = pools.GROUP

ALLOWED = [
    ("watch Services cluster-wide", Request("watch", "", "services")),
    ("list Nodes", Request("list", "", "nodes")),
    ("watch EndpointSlices", Request("watch", "discovery.k8s.io", "endpointslices")),
    ("list host-network Pods cluster-wide (port ownership)", Request("list", "", "pods")),
    ("watch host-network Pods cluster-wide", Request("watch", "", "pods")),
    ("patch a Service's status", Request("patch", "", "services", "status", "default", "web")),
    ("record an Event on a Service",
     Request("create", "events.k8s.io", "events", "", "default")),
    ("record a core v1 Event where events.k8s.io is not served",
     Request("create", "", "events", "", "default")),
    ("update the series of a repeated Event (client-go's EventSeries)",
     Request("patch", "events.k8s.io", "events", "", "default", "web.17f")),
    ("list its Warning Events at a term start (series cache)",
     Request("list", "events.k8s.io", "events")),
    ("check a bearer token on /metrics",
     Request("create", "authentication.k8s.io", "tokenreviews")),
    ("check access to /metrics",
     Request("create", "authorization.k8s.io", "subjectaccessreviews")),
    ("create the leader Lease", Request("create", "coordination.k8s.io", "leases", "", NS)),
    ("renew the leader Lease",
     Request("update", "coordination.k8s.io", "leases", "", NS, "node-ipam-lb")),
    ("create the certificate Secret", Request("create", "", "secrets", "", NS)),
    ("read the certificate Secret", Request("get", "", "secrets", "", NS, SECRET_NAME)),
    ("renew the certificate Secret", Request("update", "", "secrets", "", NS, SECRET_NAME)),
    ("inject caBundle into our MutatingWebhookConfiguration",
     Request("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "",
             "node-ipam-lb")),
    ("read our ValidatingWebhookConfiguration",
     Request("get", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "",
             "node-ipam-lb")),
    ("get configmap kube-system/kube-proxy (kube-proxy's mode)",
     Request("get", "", "configmaps", "", "kube-system", "kube-proxy")),
    ("get configmap kube-system/cilium-config (Cilium's kube-proxy replacement)",
     Request("get", "", "configmaps", "", "kube-system", "cilium-config")),
    ("list the Pods of kube-system (Cilium's agents, their release)",
     Request("list", "", "pods", "", "kube-system")),
    ("list NodeAddressPools (informer)", Request("list", GROUP, "nodeaddresspools")),
    ("watch NodeAddressPools", Request("watch", GROUP, "nodeaddresspools")),
    ("write a pool's conditions",
     Request("patch", GROUP, "nodeaddresspools", "status", "", "team-a-edge")),
    ("list Namespaces (the labels pools' namespaceSelectors match)",
     Request("list", "", "namespaces")),
    ("watch Namespaces", Request("watch", "", "namespaces")),
]  # fmt: skip

DENIED = [
    ("change a Service's spec", Request("update", "", "services", "", "default", "web")),
    ("patch a Service (not its status)", Request("patch", "", "services", "", "default", "web")),
    ("replace a Service's status (only patch is needed)",
     Request("update", "", "services", "status", "default", "web")),
    ("delete a Service", Request("delete", "", "services", "", "default", "web")),
    ("delete an Event", Request("delete", "events.k8s.io", "events", "", "default", "web.17f")),
    ("patch a Node", Request("patch", "", "nodes", "", "", "worker-1")),
    ("get a Pod (list and watch are enough)", Request("get", "", "pods", "", "default", "web-0")),
    ("change a Pod", Request("patch", "", "pods", "", "default", "web-0")),
    ("delete a Pod", Request("delete", "", "pods", "", "default", "web-0")),
    ("read a Pod's logs", Request("get", "", "pods", "log", "default", "web-0")),
    ("exec into a Pod", Request("create", "", "pods", "exec", "default", "web-0")),
    ("evict a Pod", Request("create", "", "pods", "eviction", "default", "web-0")),
    ("read another Secret in its namespace",
     Request("get", "", "secrets", "", NS, "default-token")),
    ("list Secrets in its namespace", Request("list", "", "secrets", "", NS)),
    ("read a Secret elsewhere", Request("get", "", "secrets", "", "kube-system", SECRET_NAME)),
    ("create a Secret elsewhere", Request("create", "", "secrets", "", "default")),
    ("delete its certificate Secret", Request("delete", "", "secrets", "", NS, SECRET_NAME)),
    ("take over another Lease",
     Request("update", "coordination.k8s.io", "leases", "", NS, "other-controller")),
    ("touch a Lease in kube-system",
     Request("get", "coordination.k8s.io", "leases", "", "kube-system", "node-ipam-lb")),
    ("patch another webhook configuration",
     Request("patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "",
             "cert-manager-webhook")),
    ("delete its own webhook configuration",
     Request("delete", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "",
             "node-ipam-lb")),
    ("list webhook configurations",
     Request("list", "admissionregistration.k8s.io", "validatingwebhookconfigurations")),
    ("get another configmap in kube-system",
     Request("get", "", "configmaps", "", "kube-system", "coredns")),
    ("list configmaps in kube-system", Request("list", "", "configmaps", "", "kube-system")),
    ("watch kube-proxy's configmap",
     Request("watch", "", "configmaps", "", "kube-system", "kube-proxy")),
    ("change kube-proxy's configmap",
     Request("update", "", "configmaps", "", "kube-system", "kube-proxy")),
    ("get a configmap named kube-proxy elsewhere",
     Request("get", "", "configmaps", "", NS, "kube-proxy")),
    ("watch cilium's configmap",
     Request("watch", "", "configmaps", "", "kube-system", "cilium-config")),
    ("change cilium's configmap",
     Request("update", "", "configmaps", "", "kube-system", "cilium-config")),
    ("get a configmap named cilium-config elsewhere",
     Request("get", "", "configmaps", "", NS, "cilium-config")),
    ("read a DaemonSet in kube-system (Cilium's release comes from its Pods)",
     Request("get", "apps", "daemonsets", "", "kube-system", "cilium")),
    ("create a NodeAddressPool (an administrator's grant)",
     Request("create", GROUP, "nodeaddresspools")),
    ("change a pool's spec", Request("update", GROUP, "nodeaddresspools", "", "", "team-a-edge")),
    ("patch a pool's spec", Request("patch", GROUP, "nodeaddresspools", "", "", "team-a-edge")),
    ("delete a pool", Request("delete", GROUP, "nodeaddresspools", "", "", "team-a-edge")),
    ("label a Namespace (and so move it into a pool)",
     Request("patch", "", "namespaces", "", "", "team-b")),
    ("delete a Namespace", Request("delete", "", "namespaces", "", "", "team-b")),
]  # fmt: skip


def authorizer(kustomization: str = "deploy") -> Authorizer:
    return Authorizer.for_service_account(render(kustomization), namespace=NS, name="node-ipam-lb")


@pytest.mark.parametrize("request_", [c[1] for c in ALLOWED], ids=[c[0] for c in ALLOWED])
def test_service_account_may(request_: Request) -> None:
    assert authorizer().allows(request_), f"denied: {request_}"


@pytest.mark.parametrize("request_", [c[1] for c in DENIED], ids=[c[0] for c in DENIED])
def test_service_account_may_not(request_: Request) -> None:
    assert not authorizer().allows(request_), f"allowed: {request_}"


def test_another_service_account_gets_nothing() -> None:
    other = Authorizer.for_service_account(render("deploy"), namespace=NS, name="default")
    assert not any(other.allows(request) for _, request in ALLOWED)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_no_rule_uses_wildcards_or_names_on_create(kustomization: str) -> None:
    for obj in render(kustomization):
        for rule in obj.get("rules", []) if obj["kind"] in ("Role", "ClusterRole") else []:
            for field in ("verbs", "apiGroups", "resources", "resourceNames"):
                assert "*" not in rule.get(field, []), (obj["metadata"]["name"], rule)
            if "resourceNames" in rule:
                # RBAC cannot match a name on create/list/watch/deletecollection.
                assert not {"create", "list", "watch", "deletecollection"} & set(rule["verbs"])


def test_secret_permission_names_the_secret_the_process_uses() -> None:
    objects = render("deploy")
    assert env(objects)["NODE_IPAM_CERT_SECRET_NAME"] == SECRET_NAME
    named = {
        name
        for obj in objects
        if obj["kind"] == "Role"
        for rule in obj["rules"]
        if "secrets" in rule["resources"]
        for name in rule.get("resourceNames", [])
    }
    assert named == {SECRET_NAME}


def test_cert_manager_overlay_drops_every_certificate_permission_but_reading_ca_bundle() -> None:
    """cainjector writes caBundle; the process only reads it (/readyz waits until it
    verifies the served certificate) and touches no Secret."""
    auth = authorizer("deploy/overlays/cert-manager")
    hooks = {"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}
    for name, request in ALLOWED:
        expected = request.resource != "secrets" and (
            request.resource not in hooks or request.verb == "get"
        )
        assert auth.allows(request) is expected, name
    for resource in hooks:
        read = Request("get", "admissionregistration.k8s.io", resource, "", "", "node-ipam-lb")
        assert auth.allows(read), resource


def test_precreated_secret_overlay_needs_no_secret_create() -> None:
    auth = authorizer("deploy/overlays/precreated-secret")
    assert not auth.allows(Request("create", "", "secrets", "", NS))
    assert auth.allows(Request("get", "", "secrets", "", NS, SECRET_NAME))
    assert auth.allows(Request("update", "", "secrets", "", NS, SECRET_NAME))
    shipped = [o for o in render("deploy/overlays/precreated-secret") if o["kind"] == "Secret"]
    assert [(s["metadata"]["name"], "data" in s) for s in shipped] == [(SECRET_NAME, False)]


AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
READ = {"get", "list", "watch"}


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_no_role_aggregated_into_a_tenants_roles_writes_anything(kustomization: str) -> None:
    """Tenants hold the built-in ``view``, ``edit`` and ``admin`` ClusterRoles; what we
    aggregate into them only reads (NodeAddressPools are an administrator's grant,
    docs/design.md §4.13), and only into ``view``."""
    aggregated = [
        o
        for o in render(kustomization)
        if o["kind"] == "ClusterRole"
        and any(k.startswith(AGGREGATE) for k in o["metadata"].get("labels", {}))
    ]
    assert [o["metadata"]["name"] for o in aggregated] == ["node-ipam-lb-view"]
    for role in aggregated:
        labels = role["metadata"]["labels"]
        assert {k for k in labels if k.startswith(AGGREGATE)} == {f"{AGGREGATE}view"}
        for rule in role["rules"]:
            assert set(rule["verbs"]) <= READ, rule
            assert rule["resources"] == [pools.PLURAL], rule
