"""Health-checked nodes end to end (docs/design.md §4.11): the controller against the fake
API server, probing real HTTP servers that stand in for each node's kube-proxy ``/healthz``
on loopback addresses (127.0.0.2, .3, .4: every 127/8 address is the machine's own).

What an operator would check: off by default (nothing probed); on, a node whose kube-proxy
answers 503 leaves after the failure threshold and comes back after the success threshold;
when most nodes fail at once the status is left alone and the hold is visible in the
metrics; ``/healthz`` of the process stays ok throughout.
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest

from app.controller.controller import Controller
from app.telemetry.metrics import REGISTRY
from tests.controller.support import node, service, wait_until
from tests.fakeapi.server import FakeApiServer

RunController = Callable[..., Controller]
ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


class KubeProxyHealthz:
    """One ``/healthz`` server per address, all on one port (the setting is one port):
    ``status[address]`` is what each answers (kube-proxy: 200, or 503 with a JSON body);
    ``hits[address]`` counts requests."""

    def __init__(self) -> None:
        self.status = dict.fromkeys(ADDRESSES, 200)
        self.hits = dict.fromkeys(ADDRESSES, 0)
        self.servers: list[http.server.ThreadingHTTPServer] = []
        self.port = self._free_port()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                address = self.server.server_address[0]
                owner.hits[address] += 1
                code = owner.status[address]
                body = b'{"healthy": true, "nodeEligible": %s}' % (
                    b"true" if code == 200 else b"false"
                )
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        for address in ADDRESSES:
            server = http.server.ThreadingHTTPServer((address, self.port), Handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)

    @staticmethod
    def _free_port() -> int:
        for _ in range(20):
            probe = socket.socket()
            probe.bind((ADDRESSES[0], 0))
            port = probe.getsockname()[1]
            probe.close()
            others = []
            try:
                for address in ADDRESSES:
                    sock = socket.socket()
                    others.append(sock)
                    sock.bind((address, port))
                return port
            except OSError:
                continue
            finally:
                for sock in others:
                    sock.close()
        raise RuntimeError("no port free on every loopback address")

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def healthz() -> Iterator[KubeProxyHealthz]:
    servers = KubeProxyHealthz()
    yield servers
    servers.close()


def seed(fake_api: FakeApiServer) -> None:
    fake_api.seed(
        [node(f"w{i}", internal=[address]) for i, address in enumerate(ADDRESSES, start=1)]
        + [service("web")]
    )


def ingress(fake_api: FakeApiServer) -> list[str]:
    obj = fake_api.get("services", "web", "default") or {}
    entries = obj.get("status", {}).get("loadBalancer", {}).get("ingress") or []
    return [e["ip"] for e in entries]


def health_settings(port: int, **extra: Any) -> dict[str, Any]:
    return {
        "node_health_check": True,
        "node_health_check_port": port,
        "node_health_check_period_seconds": 0.5,
        "node_health_check_timeout_seconds": 0.5,
        "node_health_check_failure_threshold": 2,
        "node_health_check_success_threshold": 2,
        **extra,
    }


def test_off_by_default_nothing_is_probed(
    fake_api: FakeApiServer, healthz: KubeProxyHealthz, run_controller: RunController
) -> None:
    seed(fake_api)
    healthz.status["127.0.0.3"] = 503
    controller = run_controller()
    wait_until(lambda: ingress(fake_api) == list(ADDRESSES), what="every node published")
    assert controller.health is None
    assert sum(healthz.hits.values()) == 0


def test_a_failing_kube_proxy_takes_its_node_out_and_back(
    fake_api: FakeApiServer, healthz: KubeProxyHealthz, run_controller: RunController
) -> None:
    seed(fake_api)
    controller = run_controller(**health_settings(healthz.port))
    wait_until(lambda: ingress(fake_api) == list(ADDRESSES), what="every node published")
    healthz.status["127.0.0.3"] = 503
    wait_until(lambda: ingress(fake_api) == ["127.0.0.2", "127.0.0.4"], what="w2 taken out")
    assert controller.health is not None
    assert "HTTP 503" in controller.health_view().unhealthy["w2"]
    events = kubernetes.client.EventsV1Api(fake_api.client()).list_namespaced_event("default")
    (unhealthy,) = [e for e in events.items if e.reason == "NodesUnhealthy"]
    assert unhealthy.type == "Normal" and "w2" in unhealthy.note
    assert REGISTRY.get_sample_value("node_ipam_lb_unhealthy_nodes") == 1
    healthz.status["127.0.0.3"] = 200
    wait_until(lambda: ingress(fake_api) == list(ADDRESSES), what="w2 back")
    assert controller.healthy() == (True, "ok")


def test_most_nodes_failing_at_once_leaves_the_status_alone(
    fake_api: FakeApiServer, healthz: KubeProxyHealthz, run_controller: RunController
) -> None:
    seed(fake_api)
    controller = run_controller(**health_settings(healthz.port))
    wait_until(lambda: ingress(fake_api) == list(ADDRESSES), what="every node published")
    for address in ADDRESSES[:2]:
        healthz.status[address] = 503
    wait_until(lambda: controller.health_view().holding, what="the most-fail hold")
    assert REGISTRY.get_sample_value("node_ipam_lb_node_health_check_holding") == 1
    hits = sum(healthz.hits.values())
    wait_until(lambda: sum(healthz.hits.values()) > hits + 6, what="more probe rounds")
    assert ingress(fake_api) == list(ADDRESSES)
    healthz.status["127.0.0.2"] = 200  # one of three failing: no longer most
    wait_until(lambda: ingress(fake_api) == ["127.0.0.2", "127.0.0.4"], what="the hold ends")
    assert not controller.health_view().holding
