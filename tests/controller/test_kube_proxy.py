"""kube-proxy's mode read by the controller, and its ipvs hazard said in the log, the gauge
and a Warning Event on every Service that gets addresses (docs/design.md §4.10)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.controller.cache import ClusterCache
from app.controller.controller import Controller
from app.controller.events import EventRecorder
from app.controller.informer import object_key
from app.controller.reconciler import Reconciler
from app.core.hazards import KUBE_PROXY_IPVS, Hazard
from app.core.kubeproxy import ipvs_hazard
from app.core.options import SelectionSettings
from app.core.views import node_view, service_view
from app.kube.client import ApiError
from app.telemetry import metrics
from tests.controller.memory_api import MemoryAPI
from tests.controller.support import fast_settings, kube_proxy, node, service, wait_until

LOGGER = "node_ipam_lb.controller"


HAZARD = ipvs_hazard("ipvs", "VIP")


assert HAZARD is not None


def gauge() -> float | None:
    return metrics.REGISTRY.get_sample_value("node_ipam_lb_kube_proxy_ipvs_hazard")


def events(api: MemoryAPI, reason: str) -> list[dict[str, Any]]:
    return [e for e in api.events if e["reason"] == reason]


Start = Callable[..., Controller]


@pytest.fixture
def start(memory_api: MemoryAPI) -> Iterator[Start]:
    controllers: list[Controller] = []

    def _start(api: MemoryAPI | None = None, **overrides: Any) -> Controller:
        controller = Controller(
            settings=fast_settings(leader_elect=False, **overrides),
            api_client=None,
            identity="pod-a",
            api=api or memory_api,
        )
        controller.start()
        controllers.append(controller)
        return controller

    yield _start
    for controller in controllers:
        controller.stop(timeout=5)


@pytest.fixture
def cluster(memory_api: MemoryAPI) -> MemoryAPI:
    """Two nodes; ``web`` gets both addresses, ``nowhere`` selects no node (pending)."""
    memory_api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    memory_api.apply("nodes", node("w2", internal=["10.0.0.2"]))
    memory_api.apply("services", service("web"))
    memory_api.apply("services", service("nowhere", selector="role=none"))
    return memory_api


def detected(caplog: pytest.LogCaptureFixture) -> Callable[[], list[logging.LogRecord]]:
    """The INFO lines of the one read (the mode, or why it is unknown)."""
    return lambda: [
        r
        for r in caplog.records
        if r.getMessage() in ("kube-proxy mode", "kube-proxy mode unknown")
    ]


def test_ipvs_with_vip_is_an_error_line_the_gauge_and_an_event_on_each_service_with_addresses(
    cluster: MemoryAPI, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    metrics.KUBE_PROXY_IPVS_HAZARD.set(0)
    cluster.config_maps["kube-system/kube-proxy"] = kube_proxy("ipvs")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        start()
        wait_until(lambda: events(cluster, "KubeProxyIPVS"), what="the KubeProxyIPVS Event")
        wait_until(lambda: events(cluster, "NoEligibleNodes"), what="nowhere reported")
    [info] = detected(caplog)()
    assert (info.getMessage(), info.__dict__["fields"]["mode"]) == ("kube-proxy mode", "ipvs")
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert error.getMessage() == HAZARD
    assert "set ip-mode to Proxy" in HAZARD
    assert gauge() == 1
    [event] = events(cluster, "KubeProxyIPVS")
    assert (event["type"], event["action"], event["note"]) == ("Warning", "SelectNodes", HAZARD)
    assert event["regarding"]["name"] == "web"
    assert cluster.ingress("default/web") == ["10.0.0.1", "10.0.0.2"]
    assert cluster.calls["get configmaps"] == 2  # kube-proxy's, then Cilium's (§4.12)


@pytest.mark.parametrize(
    ("mode", "ip_mode"), [("ipvs", "Proxy"), ("iptables", "VIP"), ("nftables", "VIP"), ("", "VIP")]
)
def test_no_hazard_without_ipvs_and_vip(
    cluster: MemoryAPI,
    start: Start,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    ip_mode: str,
) -> None:
    metrics.KUBE_PROXY_IPVS_HAZARD.set(1)  # the read must set it back to 0
    cluster.config_maps["kube-system/kube-proxy"] = kube_proxy(mode or '""')
    with caplog.at_level(logging.INFO, logger=LOGGER):
        controller = start(ip_mode=ip_mode)
        wait_until(lambda: detected(caplog)(), what="the mode read")
        wait_until(lambda: events(cluster, "IPsAssigned"), what="web assigned")
    [info] = detected(caplog)()
    assert info.__dict__["fields"]["mode"] == (mode or "iptables")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert gauge() == 0
    assert controller.kube_proxy_hazard(None) is None
    assert not events(cluster, "KubeProxyIPVS")


class SlowConfigMapAPI(MemoryAPI):
    """Answers the ConfigMap read only once ``release`` is set (a slow API server)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def read_config_map(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        self.release.wait(10)
        return super().read_config_map(namespace=namespace, name=name)


def test_the_read_never_delays_start_and_services_reconciled_before_it_get_the_event(
    start: Start,
) -> None:
    api = SlowConfigMapAPI()
    api.apply("nodes", node("w1", internal=["10.0.0.1"]))
    api.apply("services", service("web"))
    api.config_maps["kube-system/kube-proxy"] = kube_proxy("ipvs")
    began = time.monotonic()
    controller = start(api)
    assert time.monotonic() - began < 1.0
    wait_until(lambda: events(api, "IPsAssigned"), what="web assigned before the read")
    assert controller.kube_proxy_hazard(None) is None
    assert not events(api, "KubeProxyIPVS")
    api.release.set()
    wait_until(lambda: events(api, "KubeProxyIPVS"), what="the Event after the read")
    assert controller.kube_proxy_hazard(None) == Hazard(KUBE_PROXY_IPVS, HAZARD)
    assert controller.kube_proxy_hazard("io.cilium/node") == Hazard(KUBE_PROXY_IPVS, HAZARD)
    assert api.calls["patch services/status"] == 1, "a reconcile for the Event writes nothing"


@pytest.mark.parametrize(
    ("status", "why"),
    [
        (None, "not a kubeadm cluster"),
        (403, "no permission to read ConfigMap kube-system/kube-proxy (RBAC"),
        (500, "reading ConfigMap kube-system/kube-proxy failed"),
    ],
    ids=["absent", "forbidden", "error"],
)
def test_an_unknown_mode_is_one_info_line_saying_why_and_no_hazard(
    cluster: MemoryAPI,
    start: Start,
    caplog: pytest.LogCaptureFixture,
    status: int | None,
    why: str,
) -> None:
    metrics.KUBE_PROXY_IPVS_HAZARD.set(1)
    if status is not None:
        cluster.config_maps["kube-system/kube-proxy"] = kube_proxy("ipvs")
        cluster.fail("get configmaps", status)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        controller = start()
        wait_until(lambda: detected(caplog)(), what="the mode read")
        wait_until(lambda: events(cluster, "IPsAssigned"), what="web assigned")
    [info] = detected(caplog)()
    assert info.getMessage() == "kube-proxy mode unknown"
    assert why in info.__dict__["fields"]["reason"]
    assert info.levelno == logging.INFO
    assert gauge() == 0
    assert controller.kube_proxy_hazard(None) is None
    assert not events(cluster, "KubeProxyIPVS")


class Switch:
    """A switchable ``kube_proxy_hazard`` callable: the ipvs hazard while ``text`` is set."""

    def __init__(self) -> None:
        self.text: str | None = HAZARD

    def __call__(self, load_balancer_class: str | None) -> Hazard | None:
        return None if self.text is None else Hazard(KUBE_PROXY_IPVS, self.text)


class SaidRecorder(EventRecorder):
    """An EventRecorder that lists the reasons it queued (a repeat is sent as the first
    Event's series, so the API's Events alone do not show it)."""

    def __init__(self, api: MemoryAPI) -> None:
        super().__init__(api=api, identity="pod-a", clock=lambda: 1e9)
        self.said: list[str] = []

    def emit(self, **kwargs: Any) -> bool:
        queued = super().emit(**kwargs)
        if queued:
            self.said.append(kwargs["event"].reason)
        return queued


def test_the_event_is_said_once_and_again_after_the_service_had_no_addresses() -> None:
    api = MemoryAPI()
    cache = ClusterCache()
    recorder = SaidRecorder(api)
    hazard = Switch()
    reconciler = Reconciler(
        cache=cache,
        api=api,
        recorder=recorder,
        settings=SelectionSettings(),
        is_leader=lambda: True,
        wall_clock=lambda: 1.8e9,
        kube_proxy_hazard=hazard,
    )

    def put(kind: str, obj: dict[str, Any]) -> None:
        stored = api.apply(kind, obj)
        view = node_view(stored) if kind == "nodes" else service_view(stored)
        cache.put(kind, object_key(stored), view)  # type: ignore[arg-type]

    def reconcile() -> list[str]:
        """The reasons this reconcile said."""
        before = len(recorder.said)
        reconciler.reconcile("default/web")
        recorder.flush()
        stored = api.get("services", "default/web")
        assert stored is not None
        cache.put("services", "default/web", service_view(stored))
        return recorder.said[before:]

    put("nodes", node("w1", internal=["10.0.0.1"]))
    put("services", service("web"))
    assert reconcile() == ["IPsAssigned", "KubeProxyIPVS"]
    [event] = events(api, "KubeProxyIPVS")
    assert (event["type"], event["action"], event["note"]) == ("Warning", "SelectNodes", HAZARD)
    assert reconcile() == [], "nothing new: nothing said"
    put("services", service("web", selector="role=none"))
    assert reconcile() == ["NoEligibleNodes"], "no address: no KubeProxyIPVS"
    put("services", service("web"))
    assert reconcile() == ["IPsAssigned", "KubeProxyIPVS"], "addresses again: said again"
    hazard.text = None
    put("services", service("web", selector="role=none"))
    assert reconcile() == ["NoEligibleNodes"]
    put("services", service("web"))
    assert reconcile() == ["IPsAssigned"], "no hazard: no KubeProxyIPVS"


def test_a_restart_whose_mode_read_comes_late_writes_no_event_again() -> None:
    """A new term's first reconciles may run before kube-proxy's mode is read (its own
    thread): that is not the hazard ending for the Service, so once the read comes back
    the recent ``KubeProxyIPVS`` Warning is the one that held at the start: nothing is
    written (docs/design.md §5, a restart of a synced cluster writes no Event)."""
    api = MemoryAPI()
    cache = ClusterCache()

    def term(hazard: Switch) -> tuple[Reconciler, EventRecorder]:
        recorder = EventRecorder(api=api, identity="pod-a", clock=lambda: 1e9)
        reconciler = Reconciler(
            cache=cache,
            api=api,
            recorder=recorder,
            settings=SelectionSettings(),
            is_leader=lambda: True,
            wall_clock=lambda: 1.8e9,
            kube_proxy_hazard=hazard,
        )
        reconciler.reset()
        return reconciler, recorder

    def reconcile(reconciler: Reconciler, recorder: EventRecorder) -> None:
        reconciler.reconcile("default/web")
        recorder.flush()
        stored = api.get("services", "default/web")
        assert stored is not None
        cache.put("services", "default/web", service_view(stored))

    for kind, obj in (("nodes", node("w1", internal=["10.0.0.1"])), ("services", service("web"))):
        stored = api.apply(kind, obj)
        view = node_view(stored) if kind == "nodes" else service_view(stored)
        cache.put(kind, object_key(stored), view)  # type: ignore[arg-type]
    reconcile(*term(Switch()))
    assert len(events(api, "KubeProxyIPVS")) == 1
    late = Switch()
    late.text = None  # the restarted process has not read the ConfigMap yet
    restarted = term(late)
    reconcile(*restarted)
    late.text = HAZARD  # the read came back: every Service is reconciled again
    reconcile(*restarted)
    [event] = events(api, "KubeProxyIPVS")
    assert "series" not in event
    assert api.calls["patch events"] == 0 and len(api.events) == 2


def test_memory_api_answers_config_map_reads_like_the_client() -> None:
    api = MemoryAPI()
    assert api.read_config_map(namespace="kube-system", name="kube-proxy") is None
    api.config_maps["kube-system/kube-proxy"] = kube_proxy("ipvs")
    assert api.read_config_map(namespace="kube-system", name="kube-proxy") == kube_proxy("ipvs")
    api.fail("get configmaps", 403)
    with pytest.raises(ApiError) as err:
        api.read_config_map(namespace="kube-system", name="kube-proxy")
    assert err.value.status == 403
