"""Watch and list semantics: history replay, selection changes, bookmarks, 410, pagination."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException

from tests.fakeapi import FakeApiServer


def _events(list_fn: Callable[..., Any], count: int, **kwargs: Any) -> list[tuple[str, str]]:
    """The first ``count`` (type, name) pairs of a watch (bounded by a 5 s server timeout)."""
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    for event in w.stream(list_fn, timeout_seconds=5, **kwargs):
        seen.append((event["type"], event["raw_object"]["metadata"].get("name", "")))
        if len(seen) == count:
            w.stop()
            break
    return seen


def _rv(core: client.CoreV1Api) -> str:
    return str(core.list_node().metadata.resource_version)


def test_watch_from_resource_version_replays_added_modified_deleted(core: client.CoreV1Api) -> None:
    start = _rv(core)
    core.create_node(body={"metadata": {"name": "a"}})
    core.patch_node("a", {"metadata": {"labels": {"x": "1"}}})
    core.delete_node("a")
    assert _events(core.list_node, 3, resource_version=start) == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]


def test_watch_without_resource_version_starts_with_current_state(core: client.CoreV1Api) -> None:
    for name in ("a", "b"):
        core.create_node(body={"metadata": {"name": name}})
    assert _events(core.list_node, 2) == [("ADDED", "a"), ("ADDED", "b")]


def test_live_events_reach_an_open_watch(core: client.CoreV1Api) -> None:
    start = _rv(core)
    seen: list[tuple[str, str]] = []
    reader = threading.Thread(
        target=lambda: seen.extend(_events(core.list_node, 2, resource_version=start))
    )
    reader.start()
    time.sleep(0.2)
    core.create_node(body={"metadata": {"name": "live"}})
    core.delete_node("live")
    reader.join(10)
    assert seen == [("ADDED", "live"), ("DELETED", "live")]


def test_object_leaving_a_label_selection_is_deleted_for_that_watch(core: client.CoreV1Api) -> None:
    start = _rv(core)
    core.create_node(body={"metadata": {"name": "a", "labels": {"pool": "edge"}}})
    core.patch_node("a", {"metadata": {"labels": {"pool": "core"}}})
    core.patch_node("a", {"metadata": {"labels": {"pool": "edge"}}})
    assert _events(core.list_node, 3, resource_version=start, label_selector="pool=edge") == [
        ("ADDED", "a"),
        ("DELETED", "a"),
        ("ADDED", "a"),
    ]


def test_field_selector_on_metadata_name_filters_lists_and_watches(core: client.CoreV1Api) -> None:
    start = _rv(core)
    for name in ("a", "b"):
        core.create_node(body={"metadata": {"name": name}})
    listed = core.list_node(field_selector="metadata.name=b").items
    assert [n.metadata.name for n in listed] == ["b"]
    assert [n.metadata.name for n in core.list_node(field_selector="metadata.name!=b").items] == [
        "a"
    ]
    assert _events(core.list_node, 1, resource_version=start, field_selector="metadata.name=b") == [
        ("ADDED", "b")
    ]


def test_unknown_field_selector_is_400(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.list_node(field_selector="spec.bogus=1")
    assert err.value.status == 400
    assert json.loads(err.value.body)["message"] == "field label not supported: spec.bogus"


def test_malformed_label_selector_is_400(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.list_node(label_selector="a in (b")
    assert err.value.status == 400
    assert "unable to parse requirement" in json.loads(err.value.body)["message"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("pool=edge", ["a"]),
        ("pool!=edge", ["b", "c"]),
        ("pool in (edge,core)", ["a", "b"]),
        ("pool notin (edge)", ["b", "c"]),
        ("pool", ["a", "b"]),
        ("!pool", ["c"]),
        ("cores>8", ["b"]),
        ("pool,cores<16", ["a", "b"]),
    ],
)
def test_label_selector_string_syntax(
    core: client.CoreV1Api, selector: str, expected: list[str]
) -> None:
    labels = {"a": {"pool": "edge", "cores": "4"}, "b": {"pool": "core", "cores": "12"}, "c": {}}
    for name, lab in labels.items():
        core.create_node(body={"metadata": {"name": name, "labels": lab}})
    assert [n.metadata.name for n in core.list_node(label_selector=selector).items] == expected


def test_namespaced_and_all_namespaces_paths(core: client.CoreV1Api, ns: str) -> None:
    team = f"{ns}-team"
    core.create_namespace({"metadata": {"name": team}})
    for where in (ns, team):
        core.create_namespaced_service(
            where, {"metadata": {"name": f"s-{where}"}, "spec": {"ports": [{"port": 1}]}}
        )
    assert [s.metadata.name for s in core.list_namespaced_service(team).items] == [f"s-{team}"]
    # Other namespaces may hold Services (a real server has default/kubernetes): look at ours.
    ours = (ns, team)
    everywhere = core.list_service_for_all_namespaces().items
    assert [
        (s.metadata.namespace, s.metadata.name) for s in everywhere if s.metadata.namespace in ours
    ] == [(team, f"s-{team}"), (ns, f"s-{ns}")]  # etcd key order: "<ns>-team/" < "<ns>/"
    count = len(everywhere)
    events = _events(core.list_service_for_all_namespaces, count)
    assert [e for e in events if e[1] in (f"s-{ns}", f"s-{team}")] == [
        ("ADDED", f"s-{team}"),
        ("ADDED", f"s-{ns}"),
    ]


@pytest.mark.fake_only(
    "sets the bookmark interval to 50 ms (a real server sends them about once a minute)"
)
def test_bookmarks_carry_the_current_resource_version(
    core: client.CoreV1Api, fake_api: FakeApiServer
) -> None:
    fake_api.set_bookmark_interval(0.05)
    core.create_node(body={"metadata": {"name": "a"}})
    rv = _rv(core)
    w = watch.Watch()
    for event in w.stream(
        core.list_node, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=5
    ):
        assert event["type"] == "BOOKMARK"
        assert event["raw_object"]["metadata"]["resourceVersion"] == rv
        w.stop()
        break
    assert w.resource_version == rv


def test_timeout_seconds_ends_the_stream(core: client.CoreV1Api) -> None:
    started = time.monotonic()
    events = list(
        watch.Watch().stream(core.list_node, resource_version=_rv(core), timeout_seconds=1)
    )
    assert events == []
    assert time.monotonic() - started < 5


@pytest.mark.fake_only("compacts history on demand")
def test_watch_from_compacted_version_is_410_error_event(
    core: client.CoreV1Api, api: client.ApiClient, fake_api: FakeApiServer
) -> None:
    old = _rv(core)
    core.create_node(body={"metadata": {"name": "a"}})
    fake_api.compact()
    resp = core.list_node(watch=True, resource_version=old, _preload_content=False)
    line = json.loads(resp.data.splitlines()[0])
    assert resp.status == 200
    assert line["type"] == "ERROR"
    assert (line["object"]["code"], line["object"]["reason"]) == (410, "Expired")
    assert line["object"]["message"].startswith(f"too old resource version: {old} (")


@pytest.mark.fake_only("compacts history on demand and counts watch requests")
def test_official_watch_raises_410_after_its_one_retry(
    core: client.CoreV1Api, fake_api: FakeApiServer
) -> None:
    old = _rv(core)
    core.create_node(body={"metadata": {"name": "a"}})
    fake_api.compact()
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(core.list_node, resource_version=old))
    assert err.value.status == 410
    assert fake_api.requests()["watch nodes"] == 2


@pytest.mark.fake_only("drops open watches on demand")
def test_dropped_watch_ends_the_stream_cleanly(
    core: client.CoreV1Api, fake_api: FakeApiServer
) -> None:
    start = _rv(core)
    done = threading.Event()
    seen: list[str] = []

    def read() -> None:
        for event in watch.Watch().stream(
            core.list_node, resource_version=start, timeout_seconds=5
        ):
            seen.append(event["type"])
        done.set()

    threading.Thread(target=read, daemon=True).start()
    time.sleep(0.2)
    assert fake_api.drop_watches() == 1
    assert done.wait(3)
    assert seen == []


def test_pagination_with_limit_and_continue(core: client.CoreV1Api) -> None:
    for i in range(5):
        core.create_node(body={"metadata": {"name": f"n{i}"}})
    names: list[str] = []
    token = None
    pages = 0
    while True:
        page = core.list_node(limit=2, _continue=token)
        names += [n.metadata.name for n in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
    assert (names, pages) == ([f"n{i}" for i in range(5)], 3)


@pytest.mark.fake_only("compacts history on demand")
def test_continue_token_older_than_compaction_is_410(
    core: client.CoreV1Api, fake_api: FakeApiServer
) -> None:
    for i in range(3):
        core.create_node(body={"metadata": {"name": f"n{i}"}})
    token = core.list_node(limit=1).metadata._continue
    core.create_node(body={"metadata": {"name": "later"}})
    fake_api.compact()
    with pytest.raises(ApiException) as err:
        core.list_node(limit=1, _continue=token)
    assert err.value.status == 410


def test_watch_list_sends_state_then_initial_events_end_bookmark(core: client.CoreV1Api) -> None:
    core.create_node(body={"metadata": {"name": "a"}})
    rv = _rv(core)
    resp = core.list_node(
        watch=True,
        send_initial_events=True,
        allow_watch_bookmarks=True,
        resource_version_match="NotOlderThan",
        resource_version="0",
        timeout_seconds=1,
        _preload_content=False,
    )
    events = [json.loads(line) for line in resp.data.splitlines()]
    assert [e["type"] for e in events[:2]] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"] == {
        "resourceVersion": rv,
        "annotations": {"k8s.io/initial-events-end": "true"},
    }


def test_watch_list_without_resource_version_match_is_422(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.list_node(watch=True, send_initial_events=True, allow_watch_bookmarks=True)
    assert err.value.status == 422
    assert (
        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
        in json.loads(err.value.body)["message"]
    )


@pytest.mark.fake_only(
    "the fake keeps no snapshots and refuses an Exact list of an older version (410); a real "
    "server answers it from etcd's history"
)
def test_exact_list_of_an_older_version_is_410_not_current_data(core: client.CoreV1Api) -> None:
    old = _rv(core)
    core.create_node(body={"metadata": {"name": "a"}})
    current = core.list_node(resource_version=_rv(core), resource_version_match="Exact")
    assert [n.metadata.name for n in current.items] == ["a"]
    with pytest.raises(ApiException) as err:
        core.list_node(resource_version=old, resource_version_match="Exact")
    assert err.value.status == 410
