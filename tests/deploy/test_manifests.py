"""The manifests under deploy/ render offline and are what an operator can apply as is.

Every rendered object validates against the Kubernetes OpenAPI schemas (strict: unknown
fields are errors) of the oldest supported minor (1.30: matchConditions GA) and of the
newest schema shipped with kubernetes-validate. cert-manager objects have no schema there
and are checked structurally.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from kubernetes_validate.utils import latest_version

from app.config import Settings
from tests.deploy.render import (
    KUSTOMIZATIONS,
    NAMESPACE,
    SECRET_NAME,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_SERVICE,
    container,
    env,
    find,
    of_kind,
    render,
)

SCHEMA_VERSIONS = ("1.30.0", latest_version())
CLUSTER_SCOPED = {
    "CustomResourceDefinition",
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_rendered_object_validates_against_the_kubernetes_schema(
    kustomization: str, version: str
) -> None:
    objects = render(kustomization)
    assert objects, f"{kustomization} rendered nothing"
    checked = 0
    for obj in objects:
        if obj["apiVersion"].startswith("cert-manager.io/"):
            continue
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked >= 10


ELSEWHERE = {
    ("Role", "node-ipam-lb-kube-proxy"): "kube-system",
    ("RoleBinding", "node-ipam-lb-kube-proxy"): "kube-system",
    ("Role", "node-ipam-lb-admission-probe"): "default",
    ("RoleBinding", "node-ipam-lb-admission-probe"): "default",
}
"""The Roles, and their bindings, that live in another namespace: get ConfigMap
kube-proxy in kube-system (docs/design.md §4.10), and create (dry-run) Services in the
admission probe's namespace (§5, Health)."""


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_object_lives_in_the_node_ipam_lb_namespace(kustomization: str) -> None:
    for obj in render(kustomization):
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], where
        elif (obj["kind"], obj["metadata"]["name"]) in ELSEWHERE:
            expected = ELSEWHERE[obj["kind"], obj["metadata"]["name"]]
            assert obj["metadata"].get("namespace") == expected, where
        else:
            assert obj["metadata"].get("namespace") == NAMESPACE, where


def test_deployment_runs_two_leader_elected_replicas_spread_across_nodes() -> None:
    objects = render("deploy")
    deployment = find(objects, "Deployment", "node-ipam-lb")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert env(objects)["NODE_IPAM_LEADER_ELECT"] == "true"
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"].items() <= pod_labels(objects).items()
    assert pod["serviceAccountName"] == "node-ipam-lb"


def test_pod_meets_the_restricted_pod_security_standard() -> None:
    objects = render("deploy")
    pod = find(objects, "Deployment", "node-ipam-lb")["spec"]["template"]["spec"]
    security = container(objects)["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    namespace = find(objects, "Namespace", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_container_has_requests_limits_and_probes_on_the_health_probe_port() -> None:
    objects = render("deploy")
    c = container(objects)
    assert {"cpu", "memory"} <= c["resources"]["requests"].keys()
    assert {"cpu", "memory"} <= c["resources"]["limits"].keys()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    probes = {
        kind: (probe["httpGet"]["path"], probe["httpGet"]["scheme"], probe["httpGet"]["port"])
        for kind in ("livenessProbe", "readinessProbe", "startupProbe")
        for probe in [c[kind]]
    }
    # controller-runtime's layout: plain HTTP on --health-probe-bind-address, a listener of
    # its own, so a probe never queues behind webhook work (docs/design.md §5, §7.1).
    assert probes["livenessProbe"] == ("/healthz", "HTTP", "healthz")
    assert probes["startupProbe"] == ("/healthz", "HTTP", "healthz")
    assert probes["readinessProbe"] == ("/readyz", "HTTP", "healthz")
    bind = env(objects)["NODE_IPAM_HEALTH_PROBE_BIND_ADDRESS"]
    assert Settings(health_probe_bind_address=bind).health_probe_address() == ("", ports["healthz"])


def test_tls_files_are_on_a_writable_volume_since_the_root_filesystem_is_read_only() -> None:
    for kustomization in KUSTOMIZATIONS:
        objects = render(kustomization)
        values = env(objects)
        mounts = {m["mountPath"]: m for m in container(objects)["volumeMounts"]}
        for variable in ("NODE_IPAM_TLS_CERT_FILE", "NODE_IPAM_TLS_PRIVATE_KEY_FILE"):
            directory = values[variable].rsplit("/", 1)[0]
            assert directory in mounts, f"{kustomization}: {variable} not on a mounted volume"
        assert "/tmp" in mounts


def test_pod_disruption_budget_keeps_one_replica_during_drains() -> None:
    objects = render("deploy")
    pdb = find(objects, "PodDisruptionBudget", "node-ipam-lb")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels(objects).items()


def test_webhook_service_reaches_the_https_container_port() -> None:
    objects = render("deploy")
    service = find(objects, "Service", WEBHOOK_SERVICE)
    (port,) = service["spec"]["ports"]
    assert service["spec"]["selector"].items() <= pod_labels(objects).items()
    assert port["targetPort"] in {p["name"] for p in container(objects)["ports"]}


@pytest.mark.parametrize("kind", WEBHOOK_KINDS)
def test_webhook_configuration_follows_the_good_practices(kind: str) -> None:
    objects = render("deploy")
    service = find(objects, "Service", WEBHOOK_SERVICE)
    (webhook,) = find(objects, kind, WEBHOOK_CONFIGURATION)["webhooks"]
    client = webhook["clientConfig"]["service"]
    assert (client["name"], client["namespace"]) == (WEBHOOK_SERVICE, NAMESPACE)
    assert client["port"] == service["spec"]["ports"][0]["port"]
    assert (
        client["path"]
        == {"Mutating": "/mutate", "Validating": "/validate"}[
            kind.removesuffix("WebhookConfiguration")
        ]
    )
    assert webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["timeoutSeconds"] <= 5
    assert webhook["failurePolicy"] in ("Ignore", "Fail")
    assert webhook["matchConditions"]
    (rule,) = webhook["rules"]
    assert (rule["apiGroups"], rule["resources"]) == ([""], ["services"])
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    assert {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": [NAMESPACE],
    } in webhook["namespaceSelector"]["matchExpressions"]
    assert "caBundle" not in webhook["clientConfig"], "the process injects the CA"


def test_failure_policies_are_justified_in_the_readme() -> None:
    from tests.deploy.render import DEPLOY

    readme = (DEPLOY / "README.md").read_text()
    objects = render("deploy")
    for kind in WEBHOOK_KINDS:
        (webhook,) = find(objects, kind, WEBHOOK_CONFIGURATION)["webhooks"]
        assert f"`{webhook['name']}`" in readme
        assert f"`failurePolicy: {webhook['failurePolicy']}`" in readme


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_setting_in_the_deployment_is_a_valid_setting(kustomization: str) -> None:
    # pydantic-settings ignores unknown NODE_IPAM_* variables: a typo would silently turn
    # a feature off, so every variable must name a Settings field and validate.
    values = {}
    for name, value in env(render(kustomization)).items():
        if not name.startswith("NODE_IPAM_"):
            continue
        field = name.removeprefix("NODE_IPAM_").lower()
        assert field in Settings.model_fields, f"{name} is not a setting"
        values[field] = NAMESPACE if isinstance(value, dict) else value
    settings = Settings.model_validate(values)
    settings.selection()
    assert settings.leader_election_namespace == NAMESPACE


def test_default_nodeipam_overlay_sets_cilium_default_lb_service_ipam() -> None:
    assert env(render("deploy/overlays/default-nodeipam"))["NODE_IPAM_DEFAULT_LB_SERVICE_IPAM"] == (
        "nodeipam"
    )
    assert "NODE_IPAM_DEFAULT_LB_SERVICE_IPAM" not in env(render("deploy"))


def test_self_managed_certificates_are_on_by_default() -> None:
    values = env(render("deploy"))
    assert values["NODE_IPAM_CERT_SECRET_NAME"] == SECRET_NAME
    assert values["NODE_IPAM_WEBHOOK_SERVICE_NAME"] == WEBHOOK_SERVICE
    assert values["NODE_IPAM_WEBHOOK_CONFIGURATION_NAME"] == WEBHOOK_CONFIGURATION


class TestCertManagerOverlay:
    """cert-manager CRs are not in the Kubernetes schemas: check the wiring structurally."""

    objects = staticmethod(lambda: render("deploy/overlays/cert-manager"))

    def test_certificate_names_the_webhook_service_and_the_mounted_secret(self) -> None:
        objects = self.objects()
        certificate = find(objects, "Certificate", "node-ipam-lb-webhook")
        assert certificate["apiVersion"] == "cert-manager.io/v1"
        spec = certificate["spec"]
        assert f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc" in spec["dnsNames"]
        assert "server auth" in spec["usages"]
        issuer = find(objects, spec["issuerRef"]["kind"], spec["issuerRef"]["name"])
        assert issuer["apiVersion"] == "cert-manager.io/v1"
        assert issuer["spec"] == {"selfSigned": {}}
        volumes = {
            v["name"]: v
            for v in find(objects, "Deployment", "node-ipam-lb")["spec"]["template"]["spec"][
                "volumes"
            ]
        }
        assert volumes["tls"] == {
            "name": "tls",
            "secret": {"secretName": spec["secretName"], "defaultMode": 0o440},
        }

    @pytest.mark.parametrize("kind", WEBHOOK_KINDS)
    def test_cainjector_fills_the_ca_bundle_of_both_webhooks(self, kind: str) -> None:
        objects = self.objects()
        certificate = find(objects, "Certificate", "node-ipam-lb-webhook")
        annotations = find(objects, kind, WEBHOOK_CONFIGURATION)["metadata"]["annotations"]
        ref = f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
        assert annotations["cert-manager.io/inject-ca-from"] == ref

    def test_process_runs_without_self_managed_certificates_or_their_permissions(self) -> None:
        """No Secret access at all; the webhook configurations only read (get, by name):
        /readyz waits until cainjector's caBundle verifies the served certificate."""
        objects = self.objects()
        assert "NODE_IPAM_CERT_SECRET_NAME" not in env(objects)
        assert env(objects)["NODE_IPAM_WEBHOOK_CONFIGURATION_NAME"] == WEBHOOK_CONFIGURATION
        hooks = {"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}
        for kind in ("Role", "ClusterRole"):
            for role in of_kind(objects, kind):
                for rule in role["rules"]:
                    assert "secrets" not in rule.get("resources", []), role["metadata"]["name"]
                    if hooks & set(rule.get("resources", [])):
                        assert rule["verbs"] == ["get"], rule
                        assert rule["resourceNames"] == [WEBHOOK_CONFIGURATION], rule
        bound = {
            b["roleRef"]["name"]
            for k in ("RoleBinding", "ClusterRoleBinding")
            for b in of_kind(objects, k)
        }
        assert "node-ipam-lb-certificates" not in bound
        assert "node-ipam-lb-webhook-ca" in bound


def pod_labels(objects: list[dict[str, Any]]) -> dict[str, str]:
    """Labels of the Deployment's pod template."""
    deployment = find(objects, "Deployment", "node-ipam-lb")
    return dict(deployment["spec"]["template"]["metadata"]["labels"])


def test_network_policy_admits_only_the_https_and_probe_ports_of_our_pods() -> None:
    objects = render("deploy/overlays/network-policy")
    policy = find(objects, "NetworkPolicy", "node-ipam-lb")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels(objects).items()
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert "from" not in rule  # the API server's source address is not knowable in general
    ports = {p["name"] for p in container(objects)["ports"]}
    assert [p["port"] for p in rule["ports"]] == ["https", "healthz"]  # webhook; kubelet probes
    assert ports == {"https", "healthz"}
    assert not list(of_kind(render("deploy"), "NetworkPolicy")), "optional: not in the default"
