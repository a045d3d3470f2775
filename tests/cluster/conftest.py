"""The module fixture ``cluster``: one real cluster (README.md here) for the tests of a
module, brought up once and removed (nothing left, asserted) after its last test.

kube-proxy's mode is the module fixture ``proxy_mode``'s: ``$NODE_IPAM_CLUSTER_PROXY_MODE``
or ``iptables``. A module that overrides it with a parametrised fixture
(``params=PROXY_MODES``) gets one cluster per mode, one after the other (pytest groups a
module-scoped parameter's tests), and its tests run once in each.

A module that sets ``CLUSTER_NODES`` gets a cluster of that many nodes instead of
``NODES`` (3; ``test_cluster_single_node.py``: 1).

The module fixtures ``backend`` and ``release`` (``release.py``: the backend Deployment with
the three Services, then node-ipam-lb installed by Helm) build on it; ``live/conftest.py``
makes all four package fixtures, so live/'s modules share one cluster, in order.

Its tests are marked ``controlplane`` (through ``control_plane_binaries``) and
``cluster``. The images are built after collection (outside every test's timeout) when
they are not cached; the first test that sets up the cluster, and the first that sets
up the Helm release on it, get a longer timeout for that setup. Without root,
containerd, runc or the CNI plugins the tests are skipped, or fail under
``NODE_IPAM_REQUIRE_CONTROL_PLANE=1`` (set by ``.ci/run``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.cleanup import purge_abandoned
from tests.cluster.cluster import Cluster, missing_prerequisites
from tests.cluster.helpers import NODES, configured_proxy_mode, running_cluster
from tests.cluster.images import Images, build_images, find_images
from tests.cluster.release import install_backend, install_release
from tests.controlplane.build import Binaries, ControlPlaneUnavailable
from tests.controlplane.pytest_plugin import REQUIRE_ENV

FIXTURE = "cluster"
FIXTURES = (FIXTURE, "cluster_images", "cluster_prerequisites")
# Bringing the cluster up (~30-60 s on the 2-core machine) and installing the release
# (~15-50 s) run in the setup of the first test that needs each.
FIRST_TEST_TIMEOUT = 300
LONG_FIXTURES = (FIXTURE, "release")
_IMAGES_ERROR = pytest.StashKey[str]()


def _uses_cluster(item: pytest.Item) -> bool:
    return any(name in getattr(item, "fixturenames", ()) for name in FIXTURES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the cluster's tests ``cluster``; give the first test of each module (of each
    ``proxy_mode`` where the module runs several) that sets up one of the long fixtures
    (the module's cluster, the Helm release on it) the time that setup takes."""
    pending: dict[object, set[str]] = {}
    for item in items:
        if _uses_cluster(item):
            item.add_marker(pytest.mark.cluster)
            callspec = getattr(item, "callspec", None)
            mode = callspec.params.get("proxy_mode") if callspec is not None else None
            key = (getattr(item, "module", None), mode)
            module = pending.setdefault(key, set(LONG_FIXTURES))
            names = set(getattr(item, "fixturenames", ())) & module
            if names:
                item.add_marker(pytest.mark.timeout(FIRST_TEST_TIMEOUT))
                module -= names


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the images before any test runs, if a selected test needs the cluster."""
    if not any(_uses_cluster(item) for item in session.items) or find_images() is not None:
        return
    if missing_prerequisites():
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def progress(message: str) -> None:
        if reporter is not None:
            reporter.write_line(f"cluster: {message}")

    try:
        build_images(progress=progress)
    except ControlPlaneUnavailable as err:
        session.config.stash[_IMAGES_ERROR] = str(err)


def _unavailable(reason: str) -> None:
    message = f"real cluster unavailable: {reason}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def cluster_images(request: pytest.FixtureRequest) -> Images:
    """The cached image archives (pause, backend, the project's image)."""
    found = find_images()
    if found is not None:
        return found
    error = request.config.stash.get(_IMAGES_ERROR, None)
    if error is not None:
        _unavailable(error)
    try:
        return build_images()
    except ControlPlaneUnavailable as err:
        _unavailable(str(err))
        raise


@pytest.fixture(scope="session")
def cluster_prerequisites() -> None:
    """Skips (or fails, see the module doc) when a cluster cannot run here; removes what
    killed earlier runs left (``purge_abandoned``: only clusters whose owner is gone)."""
    reason = missing_prerequisites()
    if reason is not None:
        _unavailable(reason)
    purge_abandoned()


@pytest.fixture(scope="module")
def proxy_mode() -> str:
    """kube-proxy's mode for the module's cluster: ``$NODE_IPAM_CLUSTER_PROXY_MODE`` (one
    of ``PROXY_MODES``) or ``iptables``. Override it in a module (``params=PROXY_MODES``)
    to run that module's tests in every mode."""
    return configured_proxy_mode()


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest,
    control_plane_binaries: Binaries,
    cluster_images: Images,
    cluster_prerequisites: None,
    proxy_mode: str,
) -> Iterator[Cluster]:
    """A :class:`~tests.cluster.cluster.Cluster` for one test module, of ``NODES`` nodes
    or the module's ``CLUSTER_NODES`` (kube-proxy in ``proxy_mode``); after it is
    stopped, nothing of it may be left (:func:`leftovers`)."""
    nodes = getattr(request.module, "CLUSTER_NODES", NODES)
    yield from running_cluster(control_plane_binaries, cluster_images, proxy_mode, nodes=nodes)


@pytest.fixture(scope="module")
def backend(cluster: Cluster) -> Cluster:
    """The backend Deployment (3 replicas, one per node) and the three Services of
    ``release.SERVICES`` on the module's cluster, before node-ipam-lb is installed."""
    return install_backend(cluster)


@pytest.fixture(scope="module")
def release(backend: Cluster, helm: Path) -> Cluster:
    """node-ipam-lb installed by ``helm install`` on the module's cluster
    (:func:`~tests.cluster.release.install_release`)."""
    return install_release(backend, helm)
