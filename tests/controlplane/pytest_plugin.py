"""pytest plugin (registered in ``tests/conftest.py``): the session fixture ``control_plane``,
the module fixtures ``own_control_plane`` and ``dual_stack_control_plane``, the session
fixtures ``control_plane_binaries`` (for a test that starts its own ``ControlPlane``),
``helm``, ``prometheus`` (the server and promtool) and ``cilium_nodeipam`` (the Cilium
peer's binary, tests/peers/cilium).

Tests that use one of them get the ``controlplane`` marker, so ``-m "not controlplane"``
leaves the tier out. When such tests are collected and the binaries are not cached, they
are built once after collection — outside every test's timeout — with progress on the
terminal. Without ``go`` (and without cached binaries) the tests are skipped with one
reason; ``NODE_IPAM_REQUIRE_CONTROL_PLANE=1`` turns that skip into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from tests.controlplane.build import (
    Binaries,
    ControlPlaneUnavailable,
    PrometheusBinaries,
    build,
    build_helm,
    build_prometheus,
    find_binaries,
    find_go,
    find_helm,
    find_prometheus,
)
from tests.controlplane.plane import ControlPlane
from tests.peers.cilium.build import build_peer, find_peer

FIXTURE = "control_plane"
BINARIES_FIXTURE = "control_plane_binaries"
PLANE_FIXTURES = (FIXTURE, "own_control_plane", "dual_stack_control_plane", BINARIES_FIXTURE)
HELM_FIXTURE = "helm"
PROMETHEUS_FIXTURE = "prometheus"
PEER_FIXTURE = "cilium_nodeipam"
REQUIRE_ENV = "NODE_IPAM_REQUIRE_CONTROL_PLANE"
NO_GO = "go not found; run python -m tests.controlplane build"
_BUILD_ERROR = pytest.StashKey[str]()
_HELM_BUILD_ERROR = pytest.StashKey[str]()
_PROMETHEUS_BUILD_ERROR = pytest.StashKey[str]()
_PEER_BUILD_ERROR = pytest.StashKey[str]()
T = TypeVar("T")


def _uses_control_plane(item: pytest.Item) -> bool:
    """The test asks for a control-plane fixture, or is marked (e.g. a ``real`` parameter
    that gets the fixture through ``request.getfixturevalue``)."""
    return any(name in getattr(item, "fixturenames", ()) for name in PLANE_FIXTURES) or (
        item.get_closest_marker("controlplane") is not None
    )


def _uses_helm(item: pytest.Item) -> bool:
    return HELM_FIXTURE in getattr(item, "fixturenames", ())


def _uses_prometheus(item: pytest.Item) -> bool:
    return PROMETHEUS_FIXTURE in getattr(item, "fixturenames", ())


def _uses_peer(item: pytest.Item) -> bool:
    return PEER_FIXTURE in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses a control plane or a Go-built tool (helm, Prometheus, the
    Cilium peer) ``controlplane``."""
    for item in items:
        if (
            _uses_control_plane(item)
            or _uses_helm(item)
            or _uses_prometheus(item)
            or _uses_peer(item)
        ):
            item.add_marker(pytest.mark.controlplane)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the binaries before any test runs, if a selected test needs them."""
    plane = any(_uses_control_plane(item) for item in session.items)
    helm = any(_uses_helm(item) for item in session.items)
    prometheus = any(_uses_prometheus(item) for item in session.items)
    peer = any(_uses_peer(item) for item in session.items)
    if find_go() is None:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def progress(message: str) -> None:
        if reporter is not None:
            reporter.write_line(f"controlplane: {message}")

    if plane and find_binaries() is None:
        try:
            build(progress=progress, interval=60)
        except ControlPlaneUnavailable as err:
            session.config.stash[_BUILD_ERROR] = str(err)
    if helm and find_helm() is None:
        try:
            build_helm(progress=progress, interval=60)
        except ControlPlaneUnavailable as err:
            session.config.stash[_HELM_BUILD_ERROR] = str(err)
    if prometheus and find_prometheus() is None:
        try:
            build_prometheus(progress=progress, interval=60)
        except ControlPlaneUnavailable as err:
            session.config.stash[_PROMETHEUS_BUILD_ERROR] = str(err)
    if peer and find_peer() is None:
        try:
            build_peer(progress=progress, interval=60)
        except ControlPlaneUnavailable as err:
            session.config.stash[_PEER_BUILD_ERROR] = str(err)


def _unavailable(reason: str) -> None:
    message = f"real control plane unavailable: {reason}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


def _binaries(request: pytest.FixtureRequest) -> Binaries:
    """The cached binaries; skips (or fails, see module doc) the test when unavailable."""
    binaries: Binaries | None = find_binaries()
    if binaries is None:
        error = request.config.stash.get(_BUILD_ERROR, None)
        if error is not None:
            _unavailable(error)
        if find_go() is None:
            _unavailable(NO_GO)
        try:  # only reached when the collection hook did not build (e.g. getfixturevalue)
            binaries = build(interval=60)
        except ControlPlaneUnavailable as err:
            _unavailable(str(err))
    assert binaries is not None
    return binaries


@pytest.fixture(scope="session")
def control_plane_binaries(request: pytest.FixtureRequest) -> Binaries:
    """The cached kube-apiserver and etcd, for a test that starts a ``ControlPlane`` of its
    own with other flags (the benchmarks' dual-stack one, bench/realapi.py); skips (or
    fails under ``NODE_IPAM_REQUIRE_CONTROL_PLANE=1``) like ``control_plane``."""
    return _binaries(request)


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """One etcd + kube-apiserver for the whole session (``.url``, ``.kubeconfig_path``,
    ``.kubectl(...)``, ``.api_client()``, ``.token_for(ns, sa)``, ``.kubeconfig_for(user,
    groups)``; see ``tests/controlplane/README.md``). Tests share it: use your own
    namespaces and names."""
    with ControlPlane(_binaries(request)) as plane:
        yield plane


@pytest.fixture(scope="module")
def own_control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A control plane for one test module alone (~5-9 s to start): for tests that install
    the product's fixed names (namespace ``node-ipam-lb``, the cluster-scoped RBAC and
    webhook configurations) or uninstall them, which would collide with other tests on
    the shared plane; a deleted namespace also stays ``Terminating`` for good there (no
    namespace controller), so its name could never be installed again."""
    with ControlPlane(_binaries(request)) as plane:
        yield plane


def _tool(
    request: pytest.FixtureRequest,
    find: Callable[[], T | None],
    build_tool: Callable[..., T],
    error_key: pytest.StashKey[str],
) -> T:
    """A Go-built tool from the cache, else built now; skips (or fails under
    ``NODE_IPAM_REQUIRE_CONTROL_PLANE=1``) when it cannot be."""
    found = find()
    if found is not None:
        return found
    error = request.config.stash.get(error_key, None)
    if error is not None:
        _unavailable(error)
    if find_go() is None:
        _unavailable(NO_GO)
    try:
        return build_tool(interval=60)
    except ControlPlaneUnavailable as err:
        _unavailable(str(err))
    raise AssertionError("unreachable")  # _unavailable always raises


@pytest.fixture(scope="module")
def dual_stack_control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """Like ``own_control_plane``, with IPv4 and IPv6 Service CIDRs
    (``ControlPlane(dual_stack=True)``), so every ``ipFamilies``/``ipFamilyPolicy``
    combination can be created."""
    with ControlPlane(_binaries(request), dual_stack=True) as plane:
        yield plane


@pytest.fixture(scope="session")
def helm(request: pytest.FixtureRequest) -> Path:
    """Path of the ``helm`` binary built from the pinned module (``go/helm/``); skips (or
    fails under ``NODE_IPAM_REQUIRE_CONTROL_PLANE=1``) when it is not cached and cannot
    be built."""
    return _tool(request, find_helm, build_helm, _HELM_BUILD_ERROR)


@pytest.fixture(scope="session")
def prometheus(request: pytest.FixtureRequest) -> PrometheusBinaries:
    """The ``prometheus`` server and ``promtool`` built from the pinned module
    (``go/prometheus/``); skips (or fails under ``NODE_IPAM_REQUIRE_CONTROL_PLANE=1``) when
    they are not cached and cannot be built."""
    return _tool(request, find_prometheus, build_prometheus, _PROMETHEUS_BUILD_ERROR)


@pytest.fixture(scope="session")
def cilium_nodeipam(request: pytest.FixtureRequest) -> Path:
    """Path of the Cilium peer's binary (``tests/peers/cilium/go``, Cilium's
    ``operator/pkg/nodeipam`` controller); skips or fails like ``helm``."""
    return _tool(request, find_peer, build_peer, _PEER_BUILD_ERROR)
