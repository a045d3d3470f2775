"""``preview`` decides port ownership against the whole cluster, whatever it shows
(docs/design.md §4.9, §8): the Services of every namespace and the Pods that hold node
ports (``hostNetwork: true`` containerPorts, any Pod's hostPorts; ``--no-host-port-pods``:
the host-network ones only), live and from a dump, as the controller does. A user who may
not list them cluster-wide gets the narrower answer and one ``Warning:`` line saying so."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.core.builders import node_obj, service_obj
from tests.fakeapi.server import FakeApiServer
from tests.preview.conftest import parse_table, preview

Write = Callable[..., str]
SERVICES = "/api/v1/services"
SLICES = "/apis/discovery.k8s.io/v1/endpointslices"
PODS = "/api/v1/pods"
FORBIDDEN_SERVICES = (
    'services is forbidden: User "jane" cannot list resource "services" in API group ""'
    " at the cluster scope"
)


def web(name: str, namespace: str, *, created: str, port: int = 80) -> dict[str, Any]:
    """A managed Cluster Service with TCP ``port``, created at ``created``."""
    obj = service_obj(name, namespace=namespace)
    obj["metadata"]["creationTimestamp"] = created
    obj["spec"]["ports"] = [{"port": port, "protocol": "TCP"}]
    return obj


def pod(
    name: str, *, node: str, port: int, host_network: bool = True, host_port: int | None = None
) -> dict[str, Any]:
    declared: dict[str, Any] = {"containerPort": port}
    if host_port is not None:
        declared["hostPort"] = host_port
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [{"name": "c", "image": "x", "ports": [declared]}],
    }
    if host_network:
        spec["hostNetwork"] = True
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "monitoring"},
        "spec": spec,
        "status": {"phase": "Running"},
    }


NODES = [node_obj("n1", internal=["10.0.0.1"]), node_obj("n2", internal=["10.0.0.2"])]
ALPHA = web("alpha", "team-a", created="2025-01-01T00:00:00Z")
BETA = web("beta", "team-b", created="2025-06-01T00:00:00Z")
EXPORTER = pod("node-exporter-n1", node="n1", port=80)
ON_POD_NETWORK = pod("nginx-n2", node="n2", port=80, host_network=False)
INGRESS = pod("ingress-n2", node="n2", port=8080, host_network=False, host_port=80)
"""On the Pod network, holding TCP/80 of n2 through the CNI portmap plugin."""


def as_list(*objects: object) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(objects)})


def rows(stdout: str) -> dict[str, dict[str, str]]:
    return {f"{r['NAMESPACE']}/{r['NAME']}": r for r in parse_table(stdout)}


def verdicts(stdout: str) -> dict[str, tuple[str, str]]:
    """``{node: (code, reason)}`` of the one Service of a ``-o json`` run."""
    [item] = json.loads(stdout)["items"]
    return {v["name"]: (v["code"], v["reason"]) for v in item["nodes"]}


def read_warnings(stderr: str) -> list[str]:
    """The ``Warning:`` lines about what the read could not list."""
    return [line for line in stderr.splitlines() if line.startswith("Warning: cannot list ")]


@pytest.fixture
def live(fake_api: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> FakeApiServer:
    fake_api.seed([*NODES, ALPHA, BETA])
    monkeypatch.setenv("KUBECONFIG", str(fake_api.kubeconfig_path))
    return fake_api


# -- Services of other namespaces ----------------------------------------------------------

OWNED_BY_ALPHA = (
    "every address is taken: TCP/80 on 10.0.0.1, 10.0.0.2: owned by Service team-a/alpha;"
    " use another port, or a node selector that avoids the holders' nodes"
)


@pytest.mark.parametrize(
    "args", [["-n", "team-b"], ["team-b/beta"], ["beta", "-n", "team-b"]], ids=str
)
def test_a_scoped_live_preview_meets_the_older_service_of_another_namespace(
    live: FakeApiServer, args: list[str]
) -> None:
    live.reset_requests()
    run = preview(*args)
    assert run.code == 0, run.stderr
    assert list(rows(run.stdout)) == ["team-b/beta"], "the scope still picks what is shown"
    assert rows(run.stdout)["team-b/beta"]["EXTERNAL-IP"] == "<pending>"
    assert rows(run.stdout)["team-b/beta"]["REASON"] == OWNED_BY_ALPHA
    assert read_warnings(run.stderr) == []
    listed = [(r["resource"], r["namespace"]) for r in live.request_log() if r["verb"] == "list"]
    assert ("services", "") in listed and ("endpointslices", "") in listed


def test_the_context_namespace_is_scoped_the_same_way(
    live: FakeApiServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    config = tmp_path / "config"
    config.write_text(
        live.kubeconfig_path.read_text().replace("namespace: default", "namespace: team-b")
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    run = preview()
    assert run.code == 0, run.stderr
    assert rows(run.stdout)["team-b/beta"]["REASON"] == OWNED_BY_ALPHA


def test_a_scoped_dump_preview_meets_it_too(write: Write) -> None:
    path = write(as_list(*NODES, ALPHA, BETA))
    run = preview("-f", path, "-n", "team-b")
    assert run.code == 0, run.stderr
    assert rows(run.stdout)["team-b/beta"]["REASON"] == OWNED_BY_ALPHA


@pytest.mark.parametrize("path", [SERVICES, SLICES], ids=["services", "endpointslices"])
def test_forbidden_cluster_wide_list_falls_back_to_the_namespace_with_one_warning(
    live: FakeApiServer, path: str
) -> None:
    live.fail(method="GET", path=path, status=403, message=FORBIDDEN_SERVICES)
    run = preview("-n", "team-b")
    assert run.code == 0, run.stderr
    assert rows(run.stdout)["team-b/beta"]["EXTERNAL-IP"] == "10.0.0.1,10.0.0.2"
    [line] = read_warnings(run.stderr)
    assert line.startswith("Warning: cannot list services and endpointslices in all namespaces")
    assert FORBIDDEN_SERVICES in line
    assert 'decided against the Services of namespace "team-b" only' in line
    assert "grant list on services and endpointslices.discovery.k8s.io cluster-wide" in line


def test_forbidden_cluster_wide_list_with_names_reads_each_and_still_finds_none(
    live: FakeApiServer,
) -> None:
    live.fail(method="GET", path=SERVICES, status=403, message=FORBIDDEN_SERVICES)
    run = preview("team-b/beta", "team-b/nope")
    assert run.code == 1
    assert list(rows(run.stdout)) == ["team-b/beta"]
    assert 'Error from server (NotFound): services "nope" not found in namespace "team-b"' in (
        run.stderr
    )
    [line] = read_warnings(run.stderr)
    assert "decided against the named Services only" in line


@pytest.mark.parametrize(
    ("args", "status"),
    [(["-A"], 403), (["-n", "team-b"], 500)],
    ids=["403 with -A: the scope's own read", "500 is no permission"],
)
def test_other_failures_of_the_cluster_wide_list_stay_errors(
    live: FakeApiServer, args: list[str], status: int
) -> None:
    live.fail(method="GET", path=SERVICES, status=status, message="services is forbidden")
    run = preview(*args)
    assert run.code == 2
    assert run.stdout == ""
    assert run.stderr == f"error: {live.url}: {status}: services is forbidden\n"


# -- host-network Pods -----------------------------------------------------------------------

HELD_BY_POD = "TCP/80 on 10.0.0.1: hostNetwork Pod monitoring/node-exporter-n1"


def test_a_host_network_pod_in_a_dump_blocks_its_nodes_address(write: Write) -> None:
    cluster = write(as_list(*NODES, ALPHA), "cluster.yaml")
    pods = write(as_list(EXPORTER, ON_POD_NETWORK), "pods.yaml")
    run = preview("-f", cluster, "-f", pods, "-o", "json")
    assert run.code == 0, run.stderr
    [item] = json.loads(run.stdout)["items"]
    assert [e["ip"] for e in item["ingress"]] == ["10.0.0.2"]
    found = verdicts(run.stdout)
    assert found["n1"][0] == "PortInUse" and HELD_BY_POD in found["n1"][1]
    assert found["n2"][0] == "Selected", "a Pod on the Pod network holds no node port"


def test_a_pod_on_the_pod_network_in_a_dump_is_ignored(write: Write) -> None:
    cluster = write(as_list(*NODES, ALPHA, ON_POD_NETWORK))
    run = preview("-f", cluster)
    assert run.code == 0, run.stderr
    assert rows(run.stdout)["team-a/alpha"]["EXTERNAL-IP"] == "10.0.0.1,10.0.0.2"
    assert run.stdout == preview("-f", write(as_list(*NODES, ALPHA), "plain.yaml")).stdout


def test_the_live_read_keeps_host_network_pods_and_skips_the_pod_network(
    live: FakeApiServer,
) -> None:
    live.seed([EXPORTER, ON_POD_NETWORK])
    live.reset_requests()
    run = preview("-n", "team-a", "-o", "json")
    assert run.code == 0, run.stderr
    found = verdicts(run.stdout)
    assert found["n1"][0] == "PortInUse" and HELD_BY_POD in found["n1"][1]
    assert found["n2"][0] == "Selected"
    [pods] = [r for r in live.request_log() if r["resource"] == "pods"]
    assert (pods["verb"], pods["namespace"]) == ("list", "")


# -- hostPort Pods (host-port-pods) ------------------------------------------------------------


def test_a_host_port_pod_in_a_dump_blocks_its_nodes_address(write: Write) -> None:
    """``kubectl get pods -A -o yaml``: every Pod; those that hold a node port count."""
    cluster = write(as_list(*NODES, ALPHA), "cluster.yaml")
    pods = write(as_list(EXPORTER, ON_POD_NETWORK, INGRESS), "pods.yaml")
    run = preview("-f", cluster, "-f", pods, "-o", "json")
    assert run.code == 0, run.stderr
    [item] = json.loads(run.stdout)["items"]
    assert item["ingress"] == [], "n1 held by the exporter, n2 by the ingress's hostPort"
    found = verdicts(run.stdout)
    assert found["n2"][0] == "PortInUse" and "monitoring/ingress-n2" in found["n2"][1]
    assert "nginx-n2" not in run.stdout


@pytest.mark.parametrize(
    "how", [["--no-host-port-pods"], ["env"]], ids=["flag", "NODE_IPAM_HOST_PORT_PODS"]
)
def test_with_host_port_pods_off_a_dump_counts_host_network_pods_only(
    write: Write, monkeypatch: pytest.MonkeyPatch, how: list[str]
) -> None:
    """What the controller would do with the setting off: the hostPort Pod is not read,
    and the Service takes n2's TCP/80 from it."""
    flags = how
    if how == ["env"]:
        monkeypatch.setenv("NODE_IPAM_HOST_PORT_PODS", "false")
        flags = []
    cluster = write(as_list(*NODES, ALPHA), "cluster.yaml")
    pods = write(as_list(EXPORTER, ON_POD_NETWORK, INGRESS), "pods.yaml")
    run = preview("-f", cluster, "-f", pods, "-o", "json", *flags)
    assert run.code == 0, run.stderr
    [item] = json.loads(run.stdout)["items"]
    assert [e["ip"] for e in item["ingress"]] == ["10.0.0.2"]
    assert verdicts(run.stdout)["n2"][0] == "Selected"


@pytest.mark.parametrize(
    ("flags", "selector", "n2"),
    [([], None, "PortInUse"), (["--no-host-port-pods"], "spec.hostNetwork=true", "Selected")],
    ids=["host-port-pods", "off"],
)
def test_the_live_read_lists_every_pod_and_keeps_the_port_holders(
    live: FakeApiServer,
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    selector: str | None,
    n2: str,
) -> None:
    """Every Pod is listed (no field selector: none finds a hostPort), page by page, and
    only those that hold a node port are kept; off, ``spec.hostNetwork=true`` as before."""
    from app.kube.client import KubernetesAPI

    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    real = KubernetesAPI.list_items

    def spy(self: KubernetesAPI, kind: Any, **kwargs: Any) -> list[dict[str, Any]]:
        items = real(self, kind, **kwargs)
        if kind == "pods":
            calls.append(kwargs)
            kept.extend(p["metadata"]["name"] for p in items)
        return items

    monkeypatch.setattr(KubernetesAPI, "list_items", spy)
    live.seed([EXPORTER, ON_POD_NETWORK, INGRESS])
    run = preview("-n", "team-a", "-o", "json", *flags)
    assert run.code == 0, run.stderr
    [call] = calls
    assert call.get("field_selector") == selector
    assert sorted(kept) == (["ingress-n2", "node-exporter-n1"] if n2 == "PortInUse" else
                            ["node-exporter-n1"])  # fmt: skip
    found = verdicts(run.stdout)
    assert found["n1"][0] == "PortInUse" and found["n2"][0] == n2


def test_forbidden_pods_are_one_warning_never_a_failure(live: FakeApiServer) -> None:
    live.seed([EXPORTER])
    live.fail(method="GET", path=PODS, status=403, message="pods is forbidden")
    run = preview("-A")
    assert run.code == 0, run.stderr
    assert rows(run.stdout)["team-a/alpha"]["EXTERNAL-IP"] == "10.0.0.1,10.0.0.2"
    [line] = read_warnings(run.stderr)
    assert line.startswith("Warning: cannot list pods in all namespaces (403: pods is forbidden)")
    assert "grant list on pods cluster-wide" in line
