"""One cluster for the whole package: ``proxy_mode``, ``cluster``, ``backend`` and
``release`` are package fixtures here (module fixtures in ``tests/cluster/conftest.py``),
so ``test_1_install.py`` … ``test_7_uninstall.py`` run in that order on one cluster and one
Helm release, as the module they were split from did."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.cluster import Cluster
from tests.cluster.helpers import configured_proxy_mode, running_cluster
from tests.cluster.images import Images
from tests.cluster.release import install_backend, install_release
from tests.controlplane.build import Binaries


@pytest.fixture(scope="package")
def proxy_mode() -> str:
    """kube-proxy's mode: ``$NODE_IPAM_CLUSTER_PROXY_MODE`` or ``iptables``."""
    return configured_proxy_mode()


@pytest.fixture(scope="package")
def cluster(
    control_plane_binaries: Binaries,
    cluster_images: Images,
    cluster_prerequisites: None,
    proxy_mode: str,
) -> Iterator[Cluster]:
    """The package's cluster; nothing of it may be left after it stops."""
    yield from running_cluster(control_plane_binaries, cluster_images, proxy_mode)


@pytest.fixture(scope="package")
def backend(cluster: Cluster) -> Cluster:
    """The backend Deployment and the three Services, before node-ipam-lb is installed."""
    return install_backend(cluster)


@pytest.fixture(scope="package")
def release(backend: Cluster, helm: Path) -> Cluster:
    """node-ipam-lb installed by ``helm install``, once for the package."""
    return install_release(backend, helm)
