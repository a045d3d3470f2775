"""``python -m tests.devenv --api cluster --once``, the newcomer's walk-through, as a
newcomer runs it on this machine: a cluster of its own (not the fixture of
live/), the chart installed as deploy/README.md says, the kind example's
Services with a backend, a denial, a preview, an answer to a request from the client
namespace for every published address, and nothing left once it returns."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.cleanup import leftovers
from tests.cluster.images import Images
from tests.controlplane.build import Binaries
from tests.devenv.realcluster import helm_install_commands
from tests.devenv.session import ROOT

# Up (~30-100 s), install and rollout (~15-50 s), backend, settle, requests; loaded x2.
WALKTHROUGH_TIMEOUT = 600


@pytest.mark.timeout(WALKTHROUGH_TIMEOUT + 60)
def test_the_walkthrough_answers_a_request_from_the_client_namespace_and_leaves_nothing(
    control_plane_binaries: Binaries,
    cluster_images: Images,
    cluster_prerequisites: None,
    helm: Path,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "tests.devenv", "--api", "cluster", "--once", "--nodes", "3",
         "--workdir", str(tmp_path), "--timeout", "240"],
        cwd=ROOT, capture_output=True, text=True, timeout=WALKTHROUGH_TIMEOUT, check=False,
    )  # fmt: skip
    print(f"\nmeasured: python -m tests.devenv --api cluster --once (s) = "
          f"{time.monotonic() - started:.1f}")  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    lines = output.splitlines()
    for command in helm_install_commands():
        assert any(line.startswith(f"$ {' '.join(command)}") for line in lines), command
    table = output.split("$ kubectl get svc -A\n")[1].split("\n$ ")[0].splitlines()
    example = {"nginx-cluster", "nginx-local", "nginx-one-node", "nginx-two-nodes", "other-class"}
    external = {row.split()[1]: row.split()[4] for row in table[1:] if row.split()[1] in example}
    assert set(external) == example, table
    # Node addresses of this cluster (10.123.<k>.<octet>); every Service has TCP/80, so
    # port ownership leaves some <pending> (docs/design.md §4.9), never all of them.
    published = [ips for ips in external.values() if ips != "<pending>"]
    assert published and all(re.fullmatch(r"10\.123\.[\d.,]+", ips) for ips in published)
    assert external["other-class"] == "<pending>"
    assert 'admission webhook "validate.node-ipam-lb.io" denied the request' in output
    assert "$ node-ipam-lb preview -A -o wide   # live diagnosis, read-only" in lines
    asked = [i for i, line in enumerate(lines) if re.match(r"\$ ip netns exec \S+ curl ", line)]
    assert asked, output
    for index in asked:
        assert re.match(r"pod=nginx-\S+ node=node-\d version=1 client=", lines[index + 1]), lines[
            index : index + 2
        ]
    cluster = re.search(r"^  cluster (nilb\w{4}): .* work dir (\S+)$", output, re.M)
    assert cluster is not None, output
    assert leftovers(cluster.group(1), Path(cluster.group(2))) == []
    assert (tmp_path / "cluster-logs").is_dir(), "the cluster's logs are kept"
