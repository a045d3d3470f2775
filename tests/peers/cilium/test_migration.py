"""Migrating from Cilium's Node IPAM to node-ipam-lb, as deploy/README.md ("Migrating from
Cilium's Node IPAM") tells an operator to do it, on a dual-stack real API server:

1. Cilium's controller (the pinned version) manages a generated cluster until quiet;
2. it stops (``--enable-node-ipam=false`` / Helm ``nodeIPAM.enabled=false``);
3. ``node-ipam-lb preview -A -o wide`` on the live cluster shows CHANGE=yes;
4. ``serve`` starts with the same ``--default-lb-service-ipam``: it rewrites exactly the
   Services the §4.8 rules predict from Cilium's statuses, port ownership (§4.9) among them
   (and exactly those CHANGE=yes named), with one PATCH each, and no other Service;
5. going back: ``serve`` stops, Cilium's controller starts again and every status is
   Cilium's again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.controlplane.plane import ControlPlane
from tests.deploy.readme import code_blocks, section
from tests.peers.cilium.build import cilium_version
from tests.peers.cilium.clusters import generate
from tests.peers.cilium.differential import (
    Api,
    Serve,
    cilium_candidates,
    cilium_ips_our_way,
    cilium_manages,
    create,
    delete,
    families,
    port_ownership_losses,
    services,
)
from tests.peers.cilium.peer import MODES, CiliumNodeIpam, status_requests

VERSION = cilium_version()
MIGRATING = "Migrating from Cilium's Node IPAM"
CLASS = "io.cilium/node"


def wide_table(text: str) -> dict[str, dict[str, str]]:
    """``preview -o wide`` output as ``{NAME: {COLUMN: cell}}`` (cells cut at the
    header's column starts: they are left-justified to the header's widths)."""
    header, *rows = text.splitlines()
    names = header.split()
    starts = [header.index(f"{n} ") if n != names[-1] else header.rindex(n) for n in names]
    table = {}
    for row in rows:
        cells = [
            row[start:end].strip()
            for start, end in zip(starts, [*starts[1:], len(row) + 1], strict=True)
        ]
        table[cells[1]] = dict(zip(names, cells, strict=True))
    return table


def _services(api: Api, namespace: str) -> dict[str, dict[str, Any]]:
    status, body = api.call("GET", f"/api/v1/namespaces/{namespace}/services")
    assert status == 200, body
    return {item["metadata"]["name"]: item for item in body["items"]}


def _ips(service: dict[str, Any]) -> list[str]:
    return [e["ip"] for e in service.get("status", {}).get("loadBalancer", {}).get("ingress", [])]


def _readme_listing(plane: ControlPlane, namespace: str) -> dict[str, str]:
    """deploy/README.md "Migrating" step 1's Service listing, run verbatim by ``bash``
    with the plane's kubeconfig: ``{name: CLASS column}`` of its rows in ``namespace``."""
    (block,) = [b for b in code_blocks(section(MIGRATING), "sh") if "custom-columns" in b]
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECONFIG": str(plane.kubeconfig_path)},
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    rows = [line.split() for line in ran.stdout.splitlines()]
    return {row[1]: row[3] for row in rows if row[0] == namespace}


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8) as executor:
        yield executor


@pytest.mark.parametrize("mode", MODES, ids=[f"cilium-{VERSION}-{m}" for m in MODES])
def test_migration_from_cilium(
    dual_stack_control_plane: ControlPlane,
    cilium_nodeipam: Path,
    tmp_path: Path,
    pool: ThreadPoolExecutor,
    mode: str,
) -> None:
    plane = dual_stack_control_plane
    api = Api(plane)
    cluster = generate(500 + MODES.index(mode), services=(40, 40))
    ns = cluster.namespace
    assert not create(api, cluster, pool)
    try:
        managed = [s for s in cluster.services if cilium_manages(s, mode)]
        keys = [f"{ns}/{s['metadata']['name']}" for s in managed]
        # 1. Cilium's controller manages the cluster.
        with CiliumNodeIpam(
            plane, default_lb_service_ipam=mode, binary=cilium_nodeipam, workdir=tmp_path
        ) as cilium:
            cilium.wait_quiet(keys)
        # deploy/README.md step 1's listing names exactly the Services Cilium managed.
        listed = _readme_listing(plane, ns)
        shown = {name for name, klass in listed.items() if mode == "nodeipam" or klass == CLASS}
        assert shown == {s["metadata"]["name"] for s in managed}
        # 2. stopped. 3. preview on the live cluster, as documented.
        before = _services(api, ns)
        wide = subprocess.run(
            [
                sys.executable,
                "-m",
                "app",
                "preview",
                "-n",
                ns,
                "-o",
                "wide",
                "--kubeconfig",
                str(plane.kubeconfig_path),
                "--default-lb-service-ipam",
                mode,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert wide.returncode in (0, 1), wide.stderr  # 1: a malformed selector is listed
        table = wide_table(wide.stdout)
        assert set(table) == set(before)
        change_yes = {name for name, row in table.items() if row["CHANGE"] == "yes"}
        fams = families(api, ns)
        # Cilium's statuses are the stored ingress port ownership sees (docs/design.md §4.9).
        candidates = cilium_candidates(services(api, ns), mode)
        lost = port_ownership_losses(list(before.values()), candidates, candidates)
        expected = {
            name: [
                ip
                for ip in cilium_ips_our_way(_ips(before[name]), fams[name])
                if ip not in lost[name]
            ]
            for name in candidates
        }
        # Rewritten: a Service whose addresses change, and every Service left with
        # addresses, whose entries then record their ports (Cilium writes no ``ports``,
        # docs/design.md §4.9; deploy/README.md "Migrating from Cilium's Node IPAM").
        predicted = {name for name, ips in expected.items() if _ips(before[name]) != ips or ips}
        assert predicted, "the cluster should exercise a §4.8 rule"
        assert any(lost.values()), "the cluster should exercise port ownership"
        # 4. serve takes over.
        writes_before = status_requests(plane)
        serve = Serve(plane, mode, tmp_path).start()
        try:
            serve.wait_quiet(ns, len(before))
        finally:
            serve.stop()
        after = _services(api, ns)
        rewritten = {
            name
            for name in before
            if after[name]["metadata"]["resourceVersion"]
            != before[name]["metadata"]["resourceVersion"]
        }
        # The preview's CHANGE is about the ingress; every Service we manage is written,
        # once: its node-ipam-lb.io/NodesServing condition (Cilium writes none,
        # docs/design.md §5), with the ingress where that changes too.
        assert predicted == change_yes
        ours = {s["metadata"]["name"] for s in managed}
        assert rewritten == ours >= predicted
        assert status_requests(plane) - writes_before == len(ours)  # one PATCH each
        for name in predicted:
            assert _ips(after[name]) == expected[name]
            assert table[name]["EXTERNAL-IP"] == (",".join(_ips(after[name])) or "<pending>")
        # 5. and back: Cilium's controller rewrites its own forms.
        with CiliumNodeIpam(
            plane, default_lb_service_ipam=mode, binary=cilium_nodeipam, workdir=tmp_path
        ) as cilium:
            cilium.wait_quiet(keys)
        back = _services(api, ns)
        assert {n: _ips(s) for n, s in back.items()} == {n: _ips(s) for n, s in before.items()}
    finally:
        delete(api, cluster, pool)
        api.close()
