"""pytest plugin (registered in ``tests/conftest.py``): the session fixture ``control_plane``.

Tests that use the fixture get the ``controlplane`` marker, so ``-m "not controlplane"``
leaves the tier out. When such tests are collected and the binaries are not cached, they
are built once after collection — outside every test's timeout — with progress on the
terminal. Without ``go`` (and without cached binaries) the tests are skipped with one
reason; ``NODE_IPAM_REQUIRE_CONTROL_PLANE=1`` turns that skip into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.controlplane.build import (
    Binaries,
    ControlPlaneUnavailable,
    build,
    find_binaries,
    find_go,
)
from tests.controlplane.plane import ControlPlane

FIXTURE = "control_plane"
REQUIRE_ENV = "NODE_IPAM_REQUIRE_CONTROL_PLANE"
NO_GO = "go not found; run python -m tests.controlplane build"
_BUILD_ERROR = pytest.StashKey[str]()


def _uses_control_plane(item: pytest.Item) -> bool:
    """The test asks for the fixture, or is marked (e.g. a ``real`` parameter that gets the
    fixture through ``request.getfixturevalue``)."""
    return FIXTURE in getattr(item, "fixturenames", ()) or (
        item.get_closest_marker("controlplane") is not None
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses the fixture ``controlplane``."""
    for item in items:
        if _uses_control_plane(item):
            item.add_marker(pytest.mark.controlplane)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the binaries before any test runs, if a selected test needs them."""
    if not any(_uses_control_plane(item) for item in session.items):
        return
    if find_binaries() is not None or find_go() is None:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def progress(message: str) -> None:
        if reporter is not None:
            reporter.write_line(f"controlplane: {message}")

    try:
        build(progress=progress, interval=60)
    except ControlPlaneUnavailable as err:
        session.config.stash[_BUILD_ERROR] = str(err)


def _unavailable(reason: str) -> None:
    message = f"real control plane unavailable: {reason}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """One etcd + kube-apiserver for the whole session (``.url``, ``.kubeconfig_path``,
    ``.kubectl(...)``, ``.api_client()``, ``.token_for(ns, sa)``, ``.kubeconfig_for(user,
    groups)``; see ``tests/controlplane/README.md``). Tests share it: use your own
    namespaces and names."""
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
    with ControlPlane(binaries) as plane:
        yield plane
