"""``status.conditions`` of a Service (core/v1 ``ServiceStatus.conditions``, ``[]metav1.Condition``,
``patchStrategy: merge``, ``patchMergeKey: type``): how kube-apiserver patches and validates
them, which the reconciler's ``node-ipam-lb.io/NodesServing`` condition relies on
(docs/design.md §5)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakeapi_contract.conftest import ApiServer, Kubectl

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
OURS = "node-ipam-lb.io/NodesServing"
THEIRS = "example.com/Probed"


def _condition(kind: str, status: str = "True", reason: str = "Assigned") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": f"set by the owner of {kind}",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
        "observedGeneration": 1,
    }


def _service(api_server: ApiServer, ns: str) -> str:
    """A LoadBalancer Service ``s`` carrying another controller's condition; its status path."""
    code, body, _ = api_server.request(
        "POST",
        f"/api/v1/namespaces/{ns}/services",
        {"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}},
    )
    assert code == 201, body
    # Services carry no metadata.generation: our condition has no observedGeneration.
    assert "generation" not in body["metadata"]
    path = f"/api/v1/namespaces/{ns}/services/s/status"
    code, body, _ = api_server.request(
        "PATCH", path, {"status": {"conditions": [_condition(THEIRS)]}}, content_type=SMP
    )
    assert code == 200, body
    return path


def _types(body: dict[str, Any]) -> list[str]:
    return [c["type"] for c in body["status"].get("conditions") or []]


def test_strategic_patch_adds_a_condition_beside_another_controllers(
    api_server: ApiServer, ns: str
) -> None:
    path = _service(api_server, ns)
    patch = {
        "status": {
            "loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]},
            "conditions": [_condition(OURS)],
        }
    }
    code, body, _ = api_server.request("PATCH", path, patch, content_type=SMP)
    assert code == 200, body
    assert sorted(_types(body)) == sorted([OURS, THEIRS])
    assert body["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.1", "ipMode": "VIP"}]
    # A second patch of ours replaces our entry field by field and keeps theirs.
    flipped = _condition(OURS, status="False", reason="PortInUse")
    patch = {"status": {"loadBalancer": {"ingress": []}, "conditions": [flipped]}}
    code, body, _ = api_server.request("PATCH", path, patch, content_type=SMP)
    assert code == 200, body
    ours = next(c for c in body["status"]["conditions"] if c["type"] == OURS)
    assert (ours["status"], ours["reason"]) == ("False", "PortInUse")
    assert THEIRS in _types(body)


def test_strategic_patch_delete_directive_removes_only_our_condition(
    api_server: ApiServer, ns: str
) -> None:
    path = _service(api_server, ns)
    api_server.request(
        "PATCH", path, {"status": {"conditions": [_condition(OURS)]}}, content_type=SMP
    )
    patch = {
        "status": {
            "loadBalancer": {"ingress": []},
            "conditions": [{"$patch": "delete", "type": OURS}],
        }
    }
    code, body, _ = api_server.request("PATCH", path, patch, content_type=SMP)
    assert code == 200, body
    assert _types(body) == [THEIRS]
    # Deleting what is not there is no error.
    code, body, _ = api_server.request("PATCH", path, patch, content_type=SMP)
    assert (code, _types(body)) == (200, [THEIRS])


def test_merge_patch_replaces_the_whole_condition_list(api_server: ApiServer, ns: str) -> None:
    """Why the reconciler's write is a strategic merge patch: a JSON merge patch (RFC 7386)
    replaces every list, so another controller's condition would be lost."""
    path = _service(api_server, ns)
    patch = {"status": {"conditions": [_condition(OURS)]}}
    code, body, _ = api_server.request("PATCH", path, patch, content_type=MERGE)
    assert (code, _types(body)) == (200, [OURS])


@pytest.mark.parametrize(
    "garbage",
    [
        {"reason": "not a reason!"},
        {"status": "Maybe"},
        {"type": "Not A Qualified Name"},
        {"message": ""},
    ],
    ids=["reason", "status", "type", "empty message"],
)
def test_service_status_conditions_are_not_validated(
    api_server: ApiServer, ns: str, garbage: dict[str, str]
) -> None:
    """kube-apiserver's ``ValidateServiceStatusUpdate`` checks ``status.loadBalancer`` only,
    not ``metav1validation.ValidateConditions`` (which CRDs and e.g. ServiceCIDR get): the
    controller must make its condition valid itself (``app.core.conditions``)."""
    path = _service(api_server, ns)
    patch = {"status": {"conditions": [{**_condition(OURS), **garbage}]}}
    code, body, _ = api_server.request("PATCH", path, patch, content_type=SMP)
    assert code == 200, body
    stored = next(c for c in body["status"]["conditions"] if c["type"] == garbage.get("type", OURS))
    assert {k: stored.get(k, "") for k in garbage} == garbage


def test_kubectl_reads_our_condition_by_jsonpath_not_by_describe(
    api_server: ApiServer, ns: str, kubectl: Kubectl
) -> None:
    """The commands deploy/README gives for reading the condition; ``kubectl describe
    service`` prints no Service condition at all."""
    path = _service(api_server, ns)
    api_server.request(
        "PATCH", path, {"status": {"conditions": [_condition(OURS)]}}, content_type=SMP
    )
    query = f'jsonpath={{.status.conditions[?(@.type=="{OURS}")].message}}'
    done = kubectl("get", "service", "s", "-o", query)
    assert (done.returncode, done.stdout) == (0, f"set by the owner of {OURS}"), done.stderr
    columns = (
        f'custom-columns=NAME:.metadata.name,SERVING:.status.conditions[?(@.type=="{OURS}")].status'
    )
    done = kubectl("get", "service", "-o", columns)
    assert done.stdout.split() == ["NAME", "SERVING", "s", "True"], done.stderr
    done = kubectl("wait", "service/s", f"--for=condition={OURS}", "--timeout=10s")
    assert done.returncode == 0, done.stderr
    shown = kubectl("describe", "service", "s")
    assert shown.returncode == 0, shown.stderr
    assert "Type:" in shown.stdout and OURS not in shown.stdout
