"""GET /preview/{namespace}/{name} and POST /preview against an in-memory cache."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from app.config import Settings
from app.core.hazards import CILIUM_WILDCARD_ENTRIES, KUBE_PROXY_IPVS, Hazard
from app.web.app import create_app
from tests.core.admission.builders import service
from tests.web.conftest import AppClient, FakeCache

PORT_80 = [{"port": 80, "protocol": "TCP"}]
"""What each entry records: the Service's ports (docs/design.md §4.9)."""
EDGE_ONLY = [{"ip": "10.0.0.1", "ipMode": "VIP", "ports": PORT_80}]


def test_live_service_gets_its_ingress_and_node_verdicts(client: AppClient) -> None:
    response = client.get("/preview/default/web")
    assert response.status_code == 200
    item = response.json()
    assert (item["namespace"], item["name"], item["managed"]) == ("default", "web", True)
    assert item["ingress"] == EDGE_ONLY
    verdicts = {n["name"]: n["code"] for n in item["nodes"]}
    assert verdicts == {"edge-1": "Selected", "core-1": "SelectorMismatch"}


def test_unknown_service_is_a_clear_404(client: AppClient) -> None:
    response = client.get("/preview/default/nope")
    assert response.status_code == 404
    assert response.json()["detail"] == 'services "nope" not found in namespace "default"'


@pytest.mark.parametrize("path", ["/preview/default/web", "/preview"])
def test_preview_is_503_while_the_cache_is_not_synced(
    client: AppClient, cache: FakeCache, path: str
) -> None:
    cache.synced = False
    headers = {"content-type": "application/json"}
    response = client.request(
        "GET" if path != "/preview" else "POST",
        path,
        content=json.dumps(service()) if path == "/preview" else None,
        headers=headers,
    )
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"


@pytest.mark.parametrize(
    ("content_type", "encode"),
    [("application/json", json.dumps), ("application/yaml", yaml.safe_dump), ("", yaml.safe_dump)],
    ids=["JSON", "YAML", "no content type (YAML)"],
)
def test_manifest_not_yet_applied_is_previewed(
    client: AppClient, content_type: str, encode: object
) -> None:
    manifest = service(name="draft", cls="io.cilium/node", selector="role in (edge, core)")
    del manifest["metadata"]["namespace"]
    assert callable(encode)
    response = client.post(
        "/preview", content=encode(manifest), headers={"content-type": content_type}
    )
    assert response.status_code == 200
    item = response.json()
    assert (item["namespace"], item["name"]) == ("default", "draft")
    assert item["ingress"] == [
        {"ip": "10.0.0.1", "ipMode": "VIP", "ports": PORT_80},
        {"ip": "10.0.0.2", "ipMode": "VIP", "ports": PORT_80},
    ]


def test_manifest_preview_gives_the_same_item_as_the_live_preview(client: AppClient) -> None:
    live = client.get("/preview/default/web").json()
    draft = client.post(
        "/preview",
        content=json.dumps(service(cls="io.cilium/node", selector="role=edge")),
        headers={"content-type": "application/json"},
    ).json()
    assert draft == live


def test_unmanaged_manifest_says_why(client: AppClient) -> None:
    response = client.post("/preview", content=yaml.safe_dump(service(type="NodePort")))
    item = response.json()
    assert item["managed"] is False and item["ingress"] is None
    assert "NodePort" in item["reason"]


NOT_A_SERVICE = [
    ("not YAML", b"a: [", "body: invalid YAML"),
    ("not JSON", b'{"a": [', "body: invalid JSON"),
    (
        "lone surrogate in the name",
        b'{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x\\ud800"}}',
        "metadata.name: Invalid value: not valid Unicode",
    ),
    (
        "YAML alias",
        b"apiVersion: v1\nkind: Service\nmetadata: &m {name: a}\nspec: {x: *m}\n",
        "aliases are not accepted",
    ),
    ("two documents", b"kind: Service\n---\nkind: Service\n", "2 documents"),
    ("a list", b"- 1\n- 2\n", "must be a Service object"),
    ("a scalar", b"hello", "must be a Service object"),
    ("a ConfigMap", b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "v1/Service"),
    ("no metadata", b"apiVersion: v1\nkind: Service\n", "metadata"),
    ("no name", b"apiVersion: v1\nkind: Service\nmetadata: {namespace: a}\n", "name"),
    ("spec is a list", b"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: []\n", "spec"),
    ("non-UTF-8", b"apiVersion: v1\nkind: \xff\n", "not UTF-8"),
    (
        "YAML integer of 5000 digits",
        b"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec:\n  ports:\n  - port: "
        + b"9" * 5000,
        "invalid YAML: integer of 5000 digits: more than 4300 digits",
    ),
    (
        "JSON integer of 5000 digits",
        b'{"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": '
        + b"9" * 5000
        + b"}]}}",
        "invalid JSON: integer of 5000 digits",
    ),
]


@pytest.mark.parametrize(
    ("data", "reason"), [c[1:] for c in NOT_A_SERVICE], ids=[c[0] for c in NOT_A_SERVICE]
)
def test_body_that_is_not_a_service_is_422(client: AppClient, data: bytes, reason: str) -> None:
    response = client.post("/preview", content=data, headers={"content-type": "application/yaml"})
    assert response.status_code == 422
    assert reason in response.json()["detail"]


def test_openapi_documents_preview_with_examples(client: AppClient) -> None:
    assert "swagger" in client.get("/docs").text.lower()
    spec = client.get("/openapi.json").json()
    get = spec["paths"]["/preview/{namespace}/{name}"]["get"]
    post = spec["paths"]["/preview"]["post"]
    assert get["responses"]["200"]["content"]["application/json"]["example"]["ingress"]
    assert {"404", "503", "401", "403"} <= set(get["responses"])
    assert "application/yaml" in post["requestBody"]["content"]
    assert "422" in post["responses"]
    assert {"/validate", "/mutate", "/healthz", "/readyz", "/metrics"} <= set(spec["paths"])


def test_healthz_and_readyz_follow_the_controller(client: AppClient, controller: object) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    controller.is_ready = False  # type: ignore[attr-defined]
    controller.health = (False, "Node watch silent for 300 s")  # type: ignore[attr-defined]
    ready = client.get("/readyz")
    health = client.get("/healthz")
    assert ready.status_code == 503 and "not synced" in ready.text
    assert health.status_code == 503 and "Node watch silent" in health.text
    controller.cache.synced = False  # type: ignore[attr-defined]
    assert client.get("/readyz").text == (
        "not ready: cluster cache not synced (waiting for the first list of: nodes, services,"
        " endpointslices, pods)\n"
    )


def test_lifespan_starts_and_stops_the_controller(controller: object) -> None:
    from app.config import Settings
    from app.web.app import create_app

    app = create_app(Settings(auth="none"), controller=controller)  # type: ignore[arg-type]
    with AppClient(app):
        assert controller.calls == ["start"]  # type: ignore[attr-defined]
    assert controller.calls == ["start", "stop"]  # type: ignore[attr-defined]


def test_item_is_exactly_the_selection_to_dict_of_preview_json(
    client: AppClient, cache: FakeCache
) -> None:
    from app.core.nodeipam import select
    from app.core.options import SelectionSettings

    service = cache.service("default", "web")
    assert service is not None
    expected = select(
        service=service,
        nodes=cache.nodes(),
        endpoint_slices=cache.endpoint_slices("default", "web"),
        settings=SelectionSettings(default_lb_service_ipam="nodeipam"),
        now=1e6,
    ).to_dict()
    # After port ownership (nothing else holds the port) each entry records the ports.
    expected["ingress"] = [{**e, "ports": PORT_80} for e in expected["ingress"]]
    assert client.get("/preview/default/web").json() == expected


def test_manifest_over_1_mib_is_413(client: AppClient) -> None:
    data = b"#" * (1024 * 1024 + 1)
    response = client.post("/preview", content=data, headers={"content-type": "application/yaml"})
    assert response.status_code == 413
    assert "exceeds 1048576 bytes" in response.json()["detail"]


def test_unexpected_error_is_a_json_500_with_a_reason(
    cache: FakeCache, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import httpx

    from app.config import Settings
    from app.core import decision
    from app.web.app import create_app

    def broken(**_: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(decision, "select", broken)
    cache.add_service(service(name="web", cls="io.cilium/node"))
    app = create_app(Settings(auth="none"), cache=cache)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="https://t") as http:
            return await http.get("/preview/default/web")

    import asyncio

    response = asyncio.run(get())
    assert response.status_code == 500
    body = response.json()
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "InternalError", 500)
    assert "RuntimeError('boom')" in body["message"]
    assert any("request failed" in r.getMessage() for r in caplog.records)


def test_manifest_is_parsed_off_the_event_loop(
    client: AppClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large manifest must not stall /healthz and admission: parsing and selection run
    in the thread pool, where no event loop is running."""
    import asyncio

    from app.web.routes import preview

    loops: list[bool] = []
    parse = preview._manifest

    def recording(text: str) -> object:
        try:
            asyncio.get_running_loop()
            loops.append(True)
        except RuntimeError:
            loops.append(False)
        return parse(text)

    monkeypatch.setattr(preview, "_manifest", recording)
    manifest = service(name="draft", cls="io.cilium/node")
    response = client.post("/preview", content=yaml.safe_dump(manifest))
    assert response.status_code == 200
    assert loops == [False]


HAZARD = "kube-proxy runs in ipvs mode (test)"
CILIUM = "Cilium v1.19.3 adds wildcard entries (test)"


@pytest.fixture
def ipvs_client(controller: object) -> Iterator[AppClient]:
    """The app of ``client`` with the controller's kube-proxy ipvs warning (§4.10)."""
    settings = Settings(default_lb_service_ipam="nodeipam", auth="none", review_deadline_seconds=25)
    app = create_app(
        settings,
        controller=controller,  # type: ignore[arg-type]
        clock=lambda: 1e6,
        kube_proxy_hazard=lambda cls: Hazard(KUBE_PROXY_IPVS, HAZARD),
    )
    with AppClient(app) as test_client:
        yield test_client


def test_the_kube_proxy_ipvs_warning_is_on_every_service_that_gets_addresses(
    ipvs_client: AppClient, client: AppClient
) -> None:
    item = ipvs_client.get("/preview/default/web").json()
    plain = client.get("/preview/default/web").json()
    assert item["ingress"] == plain["ingress"] == EDGE_ONLY
    assert item["warnings"] == [*plain["warnings"], HAZARD]
    assert HAZARD not in plain["warnings"], "no hazard: not said"
    [listed] = ipvs_client.get("/preview").json()["items"]
    assert listed["warnings"][-1] == HAZARD
    nowhere = service(name="nowhere", cls="io.cilium/node", selector="role=none")
    pending = ipvs_client.post("/preview", content=json.dumps(nowhere)).json()
    assert pending["ingress"] == [] and HAZARD not in pending["warnings"]
    other = service(name="other", cls="example.com/other")
    unmanaged = ipvs_client.post("/preview", content=json.dumps(other)).json()
    assert not unmanaged["managed"] and HAZARD not in unmanaged["warnings"]


def test_serve_hands_the_controllers_kube_proxy_warning_to_preview(tmp_path: Path) -> None:
    from app import server

    settings = Settings(auth="none", leader_elect=False, webhook=False)
    controller, app, _ = server.build(settings, workdir=tmp_path, connection=(None, False))
    state = app.state.node_ipam
    assert state.kube_proxy_hazard(None) is None
    # What its reads of kube-proxy's and Cilium's ConfigMaps set.
    controller._hazards = (
        Hazard(KUBE_PROXY_IPVS, HAZARD),
        Hazard(CILIUM_WILDCARD_ENTRIES, CILIUM, frozenset({None})),
    )
    assert state.kube_proxy_hazard("io.cilium/node") == Hazard(KUBE_PROXY_IPVS, HAZARD)
    both = state.kube_proxy_hazard(None)
    assert both is not None and both.reason == KUBE_PROXY_IPVS
    assert both.message == f"{HAZARD}; also: {CILIUM}"


def test_a_cilium_warning_is_only_on_the_services_of_the_classes_it_concerns(
    controller: object, client: AppClient
) -> None:
    """Cilium's wildcard entries concern class-less Services only here (docs/design.md
    §4.12): ``web`` (class io.cilium/node) says nothing; a class-less Service, ours with
    default-lb-service-ipam nodeipam, carries it once it gets addresses."""
    hazard = Hazard(CILIUM_WILDCARD_ENTRIES, CILIUM, frozenset({None}))
    settings = Settings(default_lb_service_ipam="nodeipam", auth="none", review_deadline_seconds=25)
    app = create_app(
        settings,
        controller=controller,  # type: ignore[arg-type]
        clock=lambda: 1e6,
        kube_proxy_hazard=lambda cls: hazard if hazard.concerns(cls) else None,
    )
    with AppClient(app) as cilium_client:
        item = cilium_client.get("/preview/default/web").json()
        assert item["warnings"] == client.get("/preview/default/web").json()["warnings"]
        assert CILIUM not in item["warnings"]
        classless = service(name="plain", selector="role=edge")
        classless["spec"]["ports"] = [{"port": 8080}]  # web holds 80 there (§4.9)
        posted = cilium_client.post("/preview", content=json.dumps(classless)).json()
        assert posted["managed"] and [e["ip"] for e in posted["ingress"]] == ["10.0.0.1"]
        assert posted["warnings"][-1] == CILIUM
        nowhere = service(name="nowhere", selector="role=none")
        pending = cilium_client.post("/preview", content=json.dumps(nowhere)).json()
        assert pending["ingress"] == [] and CILIUM not in pending["warnings"]


def test_preview_selects_with_the_controllers_health_view(controller: object) -> None:
    """docs/design.md §4.11: what the leader's health checks decided is what preview shows:
    ``Unhealthy`` with its reason; a Service whose only candidate it is keeps it (never
    emptied) and says so in a warning."""
    why = "failed 3 kube-proxy health checks in a row (the last: HTTP 503)"
    settings = Settings(default_lb_service_ipam="nodeipam", auth="none", review_deadline_seconds=25)
    app = create_app(
        settings,
        controller=controller,  # type: ignore[arg-type]
        clock=lambda: 1e6,
        unhealthy=lambda: {"edge-1": why},
    )
    everywhere = service(name="everywhere", cls="io.cilium/node")
    with AppClient(app) as health_client:
        item = health_client.post("/preview", content=json.dumps(everywhere)).json()
        web = health_client.get("/preview/default/web").json()
    verdicts = {v["name"]: v for v in item["nodes"]}
    assert verdicts["edge-1"]["code"] == "Unhealthy"
    assert verdicts["edge-1"]["reason"].startswith(why)
    assert [e["ip"] for e in item["ingress"]] == ["10.0.0.2"]
    assert web["ingress"] == EDGE_ONLY, "its only candidate: kept"
    assert any("fails its health checks" in w for w in web["warnings"]), web["warnings"]


def test_serve_hands_the_controllers_health_view_to_preview(tmp_path: Path) -> None:
    from app import server

    settings = Settings(auth="none", leader_elect=False, webhook=False, node_health_check=True)
    controller, app, _ = server.build(settings, workdir=tmp_path, connection=(None, False))
    state = app.state.node_ipam
    assert state.unhealthy() == {}
    assert controller.health is not None
    for _ in range(3):  # the default failure threshold; core-1 passes (1 of 2 is not most)
        controller.health.table.record("edge-1", ok=False, detail="HTTP 503")
        controller.health.table.record("core-1", ok=True, detail="")
    controller.health.table.evaluate(0.0)
    assert list(state.unhealthy()) == ["edge-1"]
