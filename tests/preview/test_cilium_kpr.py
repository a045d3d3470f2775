"""``preview`` warns once when Cilium's wildcard entries concern a managed Service, read
from Cilium's ConfigMap kube-system/cilium-config and its agent Pods: live, or from a dump
that holds them (docs/design.md §4.12)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.fakeapi.server import FakeApiServer
from tests.preview.conftest import KIND_4NODE, preview

CLUSTER = str(KIND_4NODE / "cluster.yaml")
SAID = "adds a wildcard entry (cilium/cilium#40684)"
NODEIPAM = ("--default-lb-service-ipam", "nodeipam")

Write = Callable[..., str]


def cilium_config(kpr: str = "true") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cilium-config", "namespace": "kube-system"},
        "data": {"kube-proxy-replacement": kpr, "default-lb-service-ipam": "lbipam"},
    }


def agent(version: str = "v1.19.3") -> dict[str, Any]:
    """An agent Pod: host network, no containerPort, so it holds no node port."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "cilium-abcde",
            "namespace": "kube-system",
            "labels": {"k8s-app": "cilium"},
        },
        "spec": {
            "nodeName": "kind-worker",
            "hostNetwork": True,
            "containers": [{"name": "cilium-agent", "image": f"quay.io/cilium/cilium:{version}"}],
        },
        "status": {"phase": "Running"},
    }


def classless() -> dict[str, Any]:
    """A class-less LoadBalancer Service on a port no example Service has."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "plain", "namespace": "default", "uid": "u-plain"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 8080, "protocol": "TCP"}]},
    }


def dump(*objects: dict[str, Any]) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(objects)})


def test_a_dump_with_an_affected_agent_and_a_class_less_service_gets_one_warning(
    write: Write,
) -> None:
    extra = write(dump(cilium_config(), agent(), classless()), "cilium.yaml")
    run = preview("-f", CLUSTER, "-f", extra, "-A", *NODEIPAM)
    assert run.code == 0, run.stderr
    [line] = [x for x in run.stderr.splitlines() if SAID in x]
    assert line.startswith("Warning: Cilium v1.19.3 ")
    assert "upgrade Cilium to v1.19.5 or later" in line
    assert "plain" in run.stdout, "the agent Pod changes no selection"


@pytest.mark.parametrize(
    ("objects", "flags"),
    [
        ((cilium_config(), agent(), classless()), ()),  # class-less Services are not ours
        ((cilium_config(), agent("v1.19.5"), classless()), NODEIPAM),
        ((cilium_config("false"), agent(), classless()), NODEIPAM),
        ((cilium_config(), classless()), NODEIPAM),  # the release is unknown
        ((agent(), classless()), NODEIPAM),  # no ConfigMap
        ((cilium_config(), agent()), NODEIPAM),  # no Service it concerns
    ],
    ids=["not ours", "fixed", "no kpr", "no agent", "no configmap", "no class-less service"],
)
def test_no_warning_when_it_does_not_hold_or_is_unknown(
    write: Write, objects: tuple[dict[str, Any], ...], flags: tuple[str, ...]
) -> None:
    run = preview("-f", CLUSTER, "-f", write(dump(*objects), "cilium.yaml"), "-A", *flags)
    assert run.code == 0, run.stderr
    assert SAID not in run.stderr


@pytest.fixture
def live(fake_api: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> FakeApiServer:
    fake_api.seed(files=[CLUSTER])
    fake_api.seed([classless()])
    monkeypatch.setenv("KUBECONFIG", str(fake_api.kubeconfig_path))
    return fake_api


def test_live_preview_reads_ciliums_config_map_and_agents_and_warns_once(
    live: FakeApiServer,
) -> None:
    live.seed([cilium_config(), agent()])
    run = preview("-A", *NODEIPAM)
    assert run.code == 0, run.stderr
    assert run.stderr.count(SAID) == 1


@pytest.mark.parametrize("status", [None, 403, 500], ids=["absent", "forbidden", "error"])
def test_live_preview_without_the_config_map_says_nothing_of_it(
    live: FakeApiServer, status: int | None
) -> None:
    live.seed([agent()])
    if status is not None:
        live.seed([cilium_config()])
        path = "/api/v1/namespaces/kube-system/configmaps/cilium-config"
        live.fail(method="GET", path=path, status=status, message="configmaps is forbidden")
    run = preview("-A", *NODEIPAM)
    assert run.code == 0, run.stderr
    assert SAID not in run.stderr
