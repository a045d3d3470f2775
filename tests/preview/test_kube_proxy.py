"""``preview`` warns once when kube-proxy runs in ipvs mode and ipMode is VIP, read from
kubeadm's ConfigMap kube-system/kube-proxy: live, or from a dump that holds it
(docs/design.md §4.10)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from app.core.kubeproxy import ipvs_hazard
from tests.fakeapi.server import FakeApiServer
from tests.preview.conftest import KIND_4NODE, preview

CLUSTER = str(KIND_4NODE / "cluster.yaml")
HAZARD = ipvs_hazard("ipvs", "VIP")
LINE = f"Warning: {HAZARD}\n"

Write = Callable[..., str]


def kube_proxy(
    mode: str = "ipvs", *, namespace: str = "kube-system", name: str = "kube-proxy"
) -> dict[str, Any]:
    text = (
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n"
        f"kind: KubeProxyConfiguration\nmode: {mode}\n"
    )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"config.conf": text},
    }


def test_a_dump_holding_kube_proxys_config_map_in_ipvs_mode_gets_one_warning(
    write: Write,
) -> None:
    config_map = write(yaml.safe_dump(kube_proxy()), "kube-proxy.yaml")
    run = preview("-f", CLUSTER, "-f", config_map, "-A")
    assert run.code == 0, run.stderr
    assert run.stderr.count(LINE) == 1
    assert "set ip-mode to Proxy" in run.stderr
    plain = preview("-f", CLUSTER, "-A")
    assert run.stdout == plain.stdout, "the ConfigMap changes no selection"
    assert LINE not in plain.stderr
    # The same in one List (what `kubectl get ... -o yaml` prints for several kinds).
    dump = yaml.safe_load((KIND_4NODE / "cluster.yaml").read_text())
    dump["items"].append(kube_proxy())
    assert preview("-f", write(yaml.safe_dump(dump)), "-A").stderr.count(LINE) == 1


@pytest.mark.parametrize(
    ("config_map", "flags"),
    [
        (kube_proxy(), ["--ip-mode", "Proxy"]),
        (kube_proxy("iptables"), []),
        (kube_proxy('""'), []),
        (kube_proxy(namespace="default"), []),
        (kube_proxy(name="kube-proxy-old"), []),
        ({**kube_proxy(), "apiVersion": "example.com/v1"}, []),
    ],
    ids=["ip-mode Proxy", "iptables", "default mode", "other namespace", "other name", "not v1"],
)
def test_no_warning_without_ipvs_and_vip_or_another_config_map(
    write: Write, config_map: dict[str, Any], flags: list[str]
) -> None:
    run = preview("-f", CLUSTER, "-f", write(yaml.safe_dump(config_map), "cm.yaml"), *flags)
    assert run.code == 0, run.stderr
    assert "kube-proxy runs in ipvs mode" not in run.stderr


@pytest.fixture
def live(fake_api: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> FakeApiServer:
    fake_api.seed(files=[CLUSTER])
    monkeypatch.setenv("KUBECONFIG", str(fake_api.kubeconfig_path))
    return fake_api


def test_live_preview_reads_kube_proxys_config_map_and_warns_once(live: FakeApiServer) -> None:
    live.seed([kube_proxy()])
    live.reset_requests()
    run = preview("-A")
    assert run.code == 0, run.stderr
    assert run.stderr.count(LINE) == 1
    assert live.requests().get("get configmaps") == 2  # kube-proxy's, Cilium's (§4.12)
    assert run.stdout == preview("-f", CLUSTER, "-A").stdout


@pytest.mark.parametrize("status", [None, 403, 500], ids=["absent", "forbidden", "error"])
def test_live_preview_without_the_config_map_says_nothing_of_it(
    live: FakeApiServer, status: int | None
) -> None:
    if status is not None:
        live.seed([kube_proxy()])
        path = "/api/v1/namespaces/kube-system/configmaps/kube-proxy"
        live.fail(method="GET", path=path, status=status, message="configmaps is forbidden")
    run = preview("-A")
    assert run.code == 0, run.stderr
    assert "kube-proxy" not in run.stderr
    assert run.stdout == preview("-f", CLUSTER, "-A").stdout
