"""What ``python -m tests.devenv`` runs, decided before anything starts (no cluster is
brought up here): the real cluster when it can run on this machine, else the exact
command that builds what is missing and the bare API server walk-through; and what the
real-cluster walk-through applies, computed offline."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.devenv import __main__ as devenv
from tests.devenv.manifests import BACKEND_PORT, SELECTOR, example_backend, example_services_for
from tests.devenv.realcluster import helm_install_commands

BUILT = Path("/cache/built")


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """A machine where everything is built and the cluster can run; tests take pieces away."""
    state: dict[str, object] = {
        "binaries": BUILT, "helm": BUILT, "images": BUILT, "prerequisites": None, "root": True,
    }  # fmt: skip
    monkeypatch.setattr(devenv, "find_binaries", lambda: state["binaries"])
    monkeypatch.setattr(devenv, "find_helm", lambda: state["helm"])
    monkeypatch.setattr(devenv, "find_images", lambda: state["images"])
    monkeypatch.setattr(devenv, "missing_prerequisites", lambda: state["prerequisites"])
    monkeypatch.setattr(os, "geteuid", lambda: 0 if state["root"] else 1000)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    return state


def test_everything_built_runs_on_the_real_cluster(machine: dict[str, object]) -> None:
    assert devenv.plan("auto") == ("cluster", [])
    assert devenv.plan("cluster") == ("cluster", [])


def test_a_stale_image_names_the_build_command_and_falls_back_to_the_control_plane(
    machine: dict[str, object],
) -> None:
    # Every change to app/ needs a new image of the project (its cache key hashes app/).
    machine["images"] = None
    where, said = devenv.plan("auto")
    assert where == "auto"  # the real control plane, the fake one if it does not come up
    assert said[0].startswith("devenv: the real cluster (tests/cluster) cannot run here: the")
    assert "images are not built" in said[0]
    assert (
        said[1]
        == "  build it (the project's image: a few minutes): python3 -m tests.controlplane build"
    )
    assert said[-1] == "  meanwhile: a real control plane on loopback (--api controlplane)"


def test_nothing_built_falls_back_to_the_fake_api_server(machine: dict[str, object]) -> None:
    machine.update(binaries=None, helm=None, images=None)
    where, said = devenv.plan("auto")
    assert where == "fake"
    assert "the Kubernetes binaries are not built; helm is not built; the images" in said[0]
    assert said[1] == "  build it (~25 min cold, then cached): python3 -m tests.controlplane build"
    assert said[-1] == "  meanwhile: the fake API server on loopback (--api fake)"


def test_without_root_it_says_how_to_run_it_and_names_no_build(
    machine: dict[str, object],
) -> None:
    machine.update(prerequisites="needs root (network namespaces, mounts, cgroups)", root=False)
    where, said = devenv.plan("auto")
    assert where == "auto"
    assert said[0].endswith("cannot run here: needs root (network namespaces, mounts, cgroups)")
    assert not any("tests.controlplane build" in line for line in said)
    assert "  run it as root for the real cluster: sudo .venv/bin/python -m tests.devenv" in said


def test_asked_for_the_cluster_where_it_cannot_run_it_stops(
    machine: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    machine["helm"] = None
    assert devenv.plan("cluster")[0] == ""
    assert devenv.main(["--api", "cluster", "--once"]) == 1
    out = capsys.readouterr().out
    assert "cannot run here: helm is not built" in out
    assert "python3 -m tests.controlplane build" in out


@pytest.mark.parametrize("api", ["fake", "controlplane"])
def test_an_explicit_loopback_api_checks_nothing(api: str, machine: dict[str, object]) -> None:
    machine.update(binaries=None, helm=None, images=None)
    assert devenv.plan(api) == (api, [])


def test_the_chart_is_installed_with_the_commands_of_deploy_readme() -> None:
    """deploy/README.md, "Install with Helm", command by command; only the registry
    placeholder is left out: the cluster imported the chart's default image on every node."""
    assert helm_install_commands() == [
        ["kubectl", "create", "namespace", "node-ipam-lb"],
        ["kubectl", "label", "namespace", "node-ipam-lb",
         "pod-security.kubernetes.io/enforce=restricted"],
        ["helm", "install", "node-ipam-lb", "deploy/helm/node-ipam-lb", "--namespace",
         "node-ipam-lb"],
        ["kubectl", "-n", "node-ipam-lb", "rollout", "status", "deployment/node-ipam-lb"],
    ]  # fmt: skip


def test_the_example_services_select_the_clusters_nodes_by_rank() -> None:
    services, mapping = example_services_for(["node-2", "node-1", "node-3"])
    assert mapping == {"kind-worker": "node-1", "kind-worker2": "node-2", "kind-worker3": "node-3"}
    by_name = {s["metadata"]["name"]: s for s in services}
    assert sorted(by_name) == [
        "nginx-cluster", "nginx-local", "nginx-one-node", "nginx-two-nodes", "other-class",
    ]  # fmt: skip
    selectors = {
        name: s["metadata"].get("annotations", {}).get(SELECTOR) for name, s in by_name.items()
    }
    assert selectors == {
        "nginx-cluster": None,
        "nginx-local": None,
        "nginx-one-node": "kubernetes.io/hostname=node-2",
        "nginx-two-nodes": "kubernetes.io/hostname in (node-1,node-2)",
        "other-class": None,
    }
    for service in services:
        assert service["spec"]["selector"] == {"app": "nginx-pod"}
        assert [p["targetPort"] for p in service["spec"]["ports"]] == [BACKEND_PORT]
        assert "clusterIP" not in service["spec"] and "status" not in service


def test_a_worker_without_a_node_of_its_rank_keeps_its_name_and_selects_nothing() -> None:
    services, mapping = example_services_for(["node-1"])
    assert mapping == {"kind-worker": "node-1"}
    two = next(s for s in services if s["metadata"]["name"] == "nginx-two-nodes")
    assert (
        two["metadata"]["annotations"][SELECTOR]
        == "kubernetes.io/hostname in (node-1,kind-worker2)"
    )


def test_the_backend_serves_the_examples_selector_on_its_target_port() -> None:
    deployment = example_backend(replicas=3, image="localhost/node-ipam-lb-test/backend:1")
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"] == {"app": "nginx-pod"}
    assert deployment["metadata"]["namespace"] == "default"
    (container,) = template["spec"]["containers"]
    assert container["ports"] == [{"containerPort": BACKEND_PORT, "name": "http"}]
    assert container["imagePullPolicy"] == "Never"  # imported on every node, no registry
