"""The NodeAddressPool CRD on a real kube-apiserver: it is established within the CEL cost
budget, the examples apply, its schema and CEL rules refuse what pool_from_object
refuses (naming the field), the printer columns read well, and deploy/README.md's
CRD upgrade command applies over the CRD that ``helm install`` created.

A control plane of this module's own (``own_control_plane``): the CRD is cluster-scoped.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from app.controller.controller import Controller
from app.core import pools
from tests.controller.support import fast_settings, wait_until
from tests.controlplane.plane import ControlPlane
from tests.deploy import crd
from tests.deploy.readme import code_blocks, section

CRD_NAME = f"{pools.PLURAL}.{pools.GROUP}"


@pytest.fixture(scope="module")
def plane(own_control_plane: ControlPlane) -> ControlPlane:
    """The module's control plane with the CRD created as ``helm install`` creates the
    chart's crds/ (a plain create), then Established."""
    own_control_plane.kubectl("create", "-f", str(crd.CHART_CRD_FILE))
    own_control_plane.kubectl(
        "wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=30s", timeout=40
    )
    return own_control_plane


def test_the_documented_crd_upgrade_applies_over_the_one_helm_created(plane: ControlPlane) -> None:
    (command,) = [
        line
        for block in code_blocks(section("Upgrade"), "sh")
        for line in block.splitlines()
        if line.startswith("kubectl apply") and "crds/" in line
    ]
    argv = command.split("#", 1)[0].split()
    result = plane.kubectl(*argv[1:], check=False)
    assert result.returncode == 0, result.stderr
    assert f"customresourcedefinition.apiextensions.k8s.io/{CRD_NAME} serverside-applied" in (
        result.stdout
    )


def test_the_examples_apply_and_print_their_columns(plane: ControlPlane) -> None:
    for path in ("multi-tenant/pools.yaml", "multi-tenant/services.yaml", "nodeaddresspool.yaml"):
        plane.kubectl("apply", "-f", str(crd.EXAMPLES / path))
    stored = json.loads(plane.kubectl("get", "nap", "team-a-edge", "-o", "json").stdout)
    assert stored["spec"]["ports"] == [
        {"port": 80, "protocol": "TCP"},
        {"port": 443, "protocol": "TCP"},
    ]
    table = plane.kubectl("get", "nodeaddresspools", "-o", "wide").stdout.splitlines()
    assert table[0].split() == [
        "NAME", "PRIORITY", "ADDRESS", "TYPES", "NAMESPACES", "ACCEPTED", "NODES", "AGE",
    ]  # fmt: skip
    rows = {line.split()[0]: line for line in table[1:]}
    assert rows.keys() == {"team-a-edge", "team-b-high-ports", "nat-gateways"}
    assert rows["team-a-edge"].split()[1:3] == ["10", '["team-a"]']
    assert '["ExternalIP","InternalIP"]' in rows["nat-gateways"]


def test_the_controller_writes_each_pools_accepted_condition(plane: ControlPlane) -> None:
    """The Lease holder's JSON merge patch of ``nodeaddresspools/{name}/status`` passes the
    real schema (metav1.Condition's reason pattern, date-time, required fields), kubectl's
    ACCEPTED column reads it, and a label value the schema lets through is ``InvalidSpec``
    naming the field; a spec change moves ``observedGeneration``."""
    plane.kubectl("apply", "-f", str(crd.EXAMPLES / "multi-tenant/pools.yaml"))
    bad = pool("bad-labels", nodeSelector={"matchLabels": {"role": "edge!"}})
    plane.kubectl("apply", "-f", "-", input=bad)
    with plane.api_client() as client:
        controller = Controller(
            settings=fast_settings(leader_elect=False), api_client=client, identity="pools-live"
        )
        controller.start()
        try:
            accepted = wait_until(
                lambda: _accepted(plane, "team-a-edge", "bad-labels"), what="both written"
            )
            plane.kubectl("apply", "-f", "-", input=pool("bad-labels"))
            fixed = wait_until(
                lambda: _accepted(plane, "bad-labels", status="True"), what="the fix accepted"
            )
        finally:
            controller.stop(timeout=5)
    assert accepted["team-a-edge"]["status"] == "True", accepted
    assert accepted["bad-labels"]["reason"] == "InvalidSpec"
    assert accepted["bad-labels"]["message"].startswith(
        'spec.nodeSelector.matchLabels[role]: Invalid value: "edge!"'
    )
    assert fixed["bad-labels"]["observedGeneration"] == 2
    rows = plane.kubectl("get", "nap").stdout.splitlines()
    column = rows[0].index("ACCEPTED")  # by offset: empty cells print as blanks
    row = next(line for line in rows if line.startswith("team-a-edge "))
    assert row[column:].split()[0] == "True", rows
    plane.kubectl("delete", "nap", "bad-labels")


def _accepted(
    plane: ControlPlane, *names: str, status: str | None = None
) -> dict[str, dict[str, Any]]:
    """The stored Accepted condition of each pool of ``names`` that has one (of
    ``status``, when given): all or nothing, empty until every one has."""
    answer = json.loads(plane.kubectl("get", "nap", *names, "-o", "json").stdout)
    items = answer.get("items", [answer])  # one name: the object itself
    found = {
        obj["metadata"]["name"]: cond
        for obj in items
        for cond in (obj.get("status") or {}).get("conditions") or []
        if cond["type"] == pools.ACCEPTED and status in (None, cond["status"])
    }
    return found if len(found) == len(names) else {}


def pool(name: str, **spec: Any) -> str:
    obj = {"apiVersion": pools.API_VERSION, "kind": pools.KIND, "metadata": {"name": name}}
    return yaml.safe_dump({**obj, "spec": spec})


SELECTOR_IN = {"matchExpressions": [{"key": "role", "operator": "In"}]}
SELECTOR_EXISTS = {"matchExpressions": [{"key": "role", "operator": "Exists", "values": ["x"]}]}

REFUSED = [
    ("endPort before port (CEL)", {"ports": [{"port": 90, "endPort": 80}]},
     "spec.ports[0].endPort", "Invalid value: must be greater than or equal to port"),
    ("port 0", {"ports": [{"port": 0}]}, "spec.ports[0].port", "greater than or equal to 1"),
    ("port 65536", {"ports": [{"port": 65536}]},
     "spec.ports[0].port", "less than or equal to 65535"),
    ("a protocol Kubernetes has not", {"ports": [{"port": 80, "protocol": "HTTP"}]},
     "spec.ports[0].protocol", 'supported values: "TCP", "UDP", "SCTP"'),
    ("an address type the setting has not", {"addressTypes": ["Hostname"]},
     "spec.addressTypes[0]", '"ExternalIP", "InternalIP"'),
    ("an address type twice", {"addressTypes": ["ExternalIP", "ExternalIP"]},
     "spec.addressTypes[1]", "Duplicate value"),
    ("no address type", {"addressTypes": []}, "spec.addressTypes", "at least 1 items"),
    ("In without values (CEL)", {"nodeSelector": SELECTOR_IN},
     "spec.nodeSelector.matchExpressions[0].values", "must be non-empty when operator is In"),
    ("Exists with values (CEL)",
     {"serviceAllocation": {"namespaceSelectors": [SELECTOR_EXISTS]}},
     "spec.serviceAllocation.namespaceSelectors[0].matchExpressions[0].values",
     "empty when operator is Exists"),
    ("an operator apimachinery has not",
     {"nodeSelector": {"matchExpressions": [{"key": "role", "operator": "Has"}]}},
     "spec.nodeSelector.matchExpressions[0].operator", "supported values"),
    ("a namespace name that is no DNS label", {"serviceAllocation": {"namespaces": ["Team_A"]}},
     "spec.serviceAllocation.namespaces[0]", "should match"),
    ("a negative priority", {"serviceAllocation": {"priority": -1}},
     "spec.serviceAllocation.priority", "greater than or equal to 0"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "field", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_the_api_server_refuses_what_the_decision_would_not_read(
    plane: ControlPlane, spec: dict[str, Any], field: str, message: str
) -> None:
    result = plane.kubectl(
        "create", "--dry-run=server", "-f", "-", input=pool("bad", **spec), check=False
    )
    assert result.returncode != 0, f"accepted: {spec}"
    assert field in result.stderr and message in result.stderr, result.stderr
