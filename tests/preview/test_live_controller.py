"""The live preview decides with the running controller's settings and node health, read
from the record Lease its Lease holder publishes (issue 37 item 6; docs/design.md §8), or
says in one ``Warning:`` line what it could not know; flags and ``NODE_IPAM_*`` variables
that differ from the controller's make the answer a "what if", and it says so."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.config import Settings, published
from app.core.nodehealth import HEALTH_ANNOTATION
from app.core.published import SETTINGS_ANNOTATION, encode_settings
from tests.fakeapi.server import FakeApiServer
from tests.preview.conftest import KIND_4NODE, parse_table, preview

CLUSTER = str(KIND_4NODE / "cluster.yaml")
RECORD = "node-ipam-lb/node-ipam-lb-node-health"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/node-ipam-lb/leases/node-ipam-lb-node-health"
WORKER_DOWN = "failed 3 kube-proxy health checks in a row (last: HTTP 503 from 172.18.0.3)"


def record(
    *,
    settings: dict[str, Any] | None = None,
    unhealthy: dict[str, str] | None = None,
    namespace: str = "node-ipam-lb",
    name: str = "node-ipam-lb-node-health",
    raw_settings: str | None = None,
) -> dict[str, Any]:
    """The record Lease as a Lease holder writes it (settings over the defaults)."""
    annotations = {}
    if settings is not None:
        annotations[SETTINGS_ANNOTATION] = encode_settings(
            published(Settings(**settings))  # the controller's own encoding
        )
    if raw_settings is not None:
        annotations[SETTINGS_ANNOTATION] = raw_settings
    if unhealthy is not None:
        annotations[HEALTH_ANNOTATION] = json.dumps(unhealthy)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"holderIdentity": "node-ipam-lb-7d4b9c-x2x8q_1a2b"},
    }


@pytest.fixture
def live(fake_api: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> FakeApiServer:
    fake_api.seed(files=[CLUSTER])
    monkeypatch.setenv("KUBECONFIG", str(fake_api.kubeconfig_path))
    return fake_api


def warnings(stderr: str) -> list[str]:
    """The ``Warning:`` lines of ``stderr`` (run with ``-o json``: the per-Service
    warnings are then in the items, not on stderr)."""
    return [line for line in stderr.splitlines() if line.startswith("Warning: ")]


def items(stdout: str) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in json.loads(stdout)["items"]}


def test_it_decides_with_the_published_settings_and_says_nothing_more(
    live: FakeApiServer,
) -> None:
    """After ``helm upgrade --set-string settings.allowed-namespaces=team-a`` the controller
    makes every Service of ``default`` ``<pending>``; so does the preview, silently."""
    live.seed([record(settings={"allowed_namespaces": "team-a"})])
    run = preview("-o", "json")
    assert run.code == 0, run.stderr
    assert warnings(run.stderr) == []
    managed = {n: i for n, i in items(run.stdout).items() if i["managed"]}
    assert set(managed) == {"nginx-cluster", "nginx-local", "nginx-one-node", "nginx-two-nodes"}
    assert {i["code"] for i in managed.values()} == {"NamespaceNotAllowed"}
    assert all(i["ingress"] == [] for i in managed.values())


def test_a_flag_that_differs_is_a_what_if_and_says_so(live: FakeApiServer) -> None:
    live.seed([record(settings={"allowed_namespaces": "team-a"})])
    run = preview("--allowed-namespaces", "default", "-o", "wide")
    assert run.code == 0, run.stderr
    what_if = (
        'Warning: a what-if: decided with --allowed-namespaces "default" (the controller\'s:'
        ' "team-a") over the running controller\'s settings; without them the answer is the'
        " controller's"
    )
    assert what_if in run.stderr.splitlines()
    rows = {r["NAME"]: r for r in parse_table(run.stdout)}
    assert rows["nginx-cluster"]["EXTERNAL-IP"] != "<pending>"
    assert warnings(preview("--allowed-namespaces", "default", "-o", "json").stderr) == [what_if]
    # The same value as the controller's is no what-if.
    assert warnings(preview("--allowed-namespaces", "team-a", "-o", "json").stderr) == []


def test_a_variable_that_differs_is_a_what_if_named_by_the_variable(
    live: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    live.seed([record(settings={"ip_mode": "VIP"})])
    monkeypatch.setenv("NODE_IPAM_IP_MODE", "Proxy")
    [line] = warnings(preview("-o", "json").stderr)
    assert 'NODE_IPAM_IP_MODE "Proxy" (the controller\'s: "VIP")' in line
    ingress = items(preview("-o", "json").stdout)["nginx-cluster"]["ingress"]
    assert {entry["ipMode"] for entry in ingress} == {"Proxy"}


def test_the_lease_holders_unhealthy_nodes_are_unhealthy_here(live: FakeApiServer) -> None:
    live.seed(
        [record(settings={"node_health_check": True}, unhealthy={"kind-worker": WORKER_DOWN})]
    )
    run = preview("-o", "json")
    assert run.code == 0 and warnings(run.stderr) == [], run.stderr
    nodes = {n["name"]: n for n in items(run.stdout)["nginx-cluster"]["nodes"]}
    assert nodes["kind-worker"]["code"] == "Unhealthy"
    assert nodes["kind-worker"]["reason"].startswith(WORKER_DOWN)
    assert nodes["kind-worker2"]["code"] == "Selected"


def test_a_health_record_left_from_when_checks_were_on_is_not_in_force(
    live: FakeApiServer,
) -> None:
    """``node-health-check`` turned off by an upgrade: the controller probes nothing and
    reads no record, whatever the Lease still holds."""
    live.seed(
        [record(settings={"node_health_check": False}, unhealthy={"kind-worker": WORKER_DOWN})]
    )
    nodes = {n["name"]: n for n in items(preview("-o", "json").stdout)["nginx-cluster"]["nodes"]}
    assert nodes["kind-worker"]["code"] == "Selected"


def test_the_record_is_found_with_the_release_namespace_and_leader_election_id(
    live: FakeApiServer,
) -> None:
    live.seed(
        [
            record(
                settings={"allowed_namespaces": "team-a"},
                namespace="lb-system",
                name="edge-lb-node-health",
            )
        ]
    )
    moved = ["--leader-election-namespace", "lb-system", "--leader-election-id", "edge-lb"]
    run = preview(*moved, "-o", "json")
    assert warnings(run.stderr) == []
    assert items(run.stdout)["nginx-cluster"]["code"] == "NamespaceNotAllowed"


@pytest.mark.parametrize(
    ("fault", "lease", "says"),
    [
        pytest.param(
            None,
            None,
            f"Warning: lease {RECORD} not found: the running controller's settings and node"
            " health are unknown",
            id="no controller publishes there",
        ),
        pytest.param(
            403,
            None,
            f"Warning: cannot get lease {RECORD} (403: leases is forbidden): the running"
            " controller's settings and node health are unknown; decided with this command's"
            " settings (its flags, NODE_IPAM_* variables, else the defaults) and no node"
            " health; grant get on leases.coordination.k8s.io node-ipam-lb-node-health in"
            " namespace node-ipam-lb (ClusterRole node-ipam-lb-preview)",
            id="forbidden",
        ),
        pytest.param(
            None,
            record(unhealthy={"kind-worker": WORKER_DOWN}),  # not known to be in force
            f"Warning: lease {RECORD} has no annotation {SETTINGS_ANNOTATION} (a controller"
            " version that does not publish it)",
            id="a version that publishes no settings",
        ),
        pytest.param(
            None,
            record(raw_settings='["not", "an", "object"]'),
            f"Warning: lease {RECORD}: {SETTINGS_ANNOTATION}: Invalid value: must be a JSON"
            " object: the running controller's settings are unknown",
            id="malformed",
        ),
    ],
)
def test_what_it_could_not_know_is_one_warning_and_its_own_settings_decide(
    live: FakeApiServer, fault: int | None, lease: dict[str, Any] | None, says: str
) -> None:
    if fault is not None:
        live.fail(method="GET", path=LEASE_PATH, status=fault, message="leases is forbidden")
    if lease is not None:
        live.seed([lease])
    run = preview("-o", "json")
    assert run.code == 0, run.stderr
    [line] = warnings(run.stderr)
    assert line.startswith(says), line
    assert run.stdout == preview("-f", CLUSTER, "-o", "json").stdout  # its own defaults


def test_only_a_live_preview_of_a_managed_service_warns(live: FakeApiServer) -> None:
    assert warnings(preview("-o", "json").stderr) != []  # no record at all
    assert warnings(preview("-f", CLUSTER, "-o", "json").stderr) == []
    assert warnings(preview("-n", "kube-system", "-o", "json").stderr) == []  # none managed


def test_settings_of_another_version_are_named_and_the_rest_is_used(
    live: FakeApiServer,
) -> None:
    """A newer controller publishes a setting this preview does not know; an older one
    (or a value too long to publish) leaves one out."""
    values = published(Settings(allowed_namespaces="team-a"))
    del values["reserved-node-ports"]
    values["pool-priority-mode"] = "strict"
    live.seed([record(raw_settings=encode_settings(values))])
    run = preview("-o", "json")
    assert warnings(run.stderr) == [
        "Warning: the running controller decides with settings this preview does not know:"
        " pool-priority-mode (a newer version): this answer ignores them",
        f"Warning: lease {RECORD} publishes no value of reserved-node-ports (a version that"
        " does not publish it, or a value too long to publish): decided with this command's"
        " settings (its flags, NODE_IPAM_* variables, else the defaults) for those",
    ]
    assert items(run.stdout)["nginx-cluster"]["code"] == "NamespaceNotAllowed"


def test_published_values_that_are_not_valid_here_leave_its_own_settings(
    live: FakeApiServer,
) -> None:
    live.seed([record(raw_settings='{"ip-mode": "Tunnel"}')])
    [line] = warnings(preview("-o", "json").stderr)
    assert line.startswith(
        f"Warning: lease {RECORD}: the published settings are not valid here (invalid"
        " setting: --ip-mode (NODE_IPAM_IP_MODE):"
    ), line


def test_a_flag_that_cannot_go_with_the_controllers_settings_is_an_error(
    live: FakeApiServer,
) -> None:
    live.seed([record(settings={"per_node_address_fallback": True})])
    run = preview("--address-types", "InternalIP")
    assert (run.code, run.stdout) == (2, "")
    assert "per-node-address-fallback: Forbidden" in run.stderr
    assert f"with the running controller's other settings, lease {RECORD}" in run.stderr


@pytest.mark.parametrize(("host_port_pods", "kept"), [(True, False), (False, True)])
def test_the_published_host_port_pods_decides_whether_a_host_port_pod_holds_its_port(
    live: FakeApiServer, host_port_pods: bool, kept: bool
) -> None:
    """A (not host-network) Pod with ``hostPort: 80`` on kind-worker: with the
    controller's ``host-port-pods`` on it holds TCP/80 there (nginx-cluster loses
    kind-worker); off, the controller does not even list it (§4.9)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "edge-proxy", "namespace": "ingress"},
        "spec": {
            "nodeName": "kind-worker",
            "containers": [
                {"name": "c", "image": "proxy:1", "ports": [{"containerPort": 80, "hostPort": 80}]}
            ],
        },
        "status": {"phase": "Running"},
    }
    live.seed([pod, record(settings={"host_port_pods": host_port_pods})])
    run = preview("-o", "json")
    assert warnings(run.stderr) == []
    nodes = {n["name"]: n for n in items(run.stdout)["nginx-cluster"]["nodes"]}
    assert (nodes["kind-worker"]["code"] == "Selected") is kept, nodes["kind-worker"]
