"""The offline preview with NodeAddressPools (docs/design.md §4.13): ``-o wide`` names the
pool each Service chose among, and a dump whose pools select namespaces by label but holds
no Namespace says so instead of answering NoPool with confidence."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from app.preview import run as preview_cli
from tests.core.builders import NOW, node_obj

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "multi-tenant"


def nodes_file(tmp_path: Path) -> str:
    """Two edge nodes (the example's ``role=edge``) and two workers."""
    items = [
        node_obj(f"edge-{i}", internal=[f"10.0.0.{i}"], labels={"role": "edge"}) for i in (1, 2)
    ] + [node_obj(f"worker-{i}", internal=[f"10.0.1.{i}"]) for i in (1, 2)]
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def preview(paths: list[str]) -> tuple[str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    preview_cli.run_preview(
        paths=paths, output="wide", settings={}, stdout=stdout, stderr=stderr, now=NOW
    )
    return stdout.getvalue(), stderr.getvalue()


def test_wide_names_the_pool_of_the_worked_example(tmp_path: Path) -> None:
    out, err = preview(
        [nodes_file(tmp_path), str(EXAMPLE / "pools.yaml"), str(EXAMPLE / "services.yaml")]
    )
    header, *rows = out.splitlines()
    at = header.index("POOL")  # columns are left-justified: a cell starts under its title
    pool = {row.split()[1]: row[at:].split()[0] for row in rows}
    ips = {row.split()[1]: row.split()[3] for row in rows}
    assert ips["web"] == "10.0.0.1,10.0.0.2"
    assert pool["web"] == "team-a-edge"
    assert pool["api"] == "team-b-high-ports"
    assert "Namespaces" not in err


def test_pools_without_namespaces_warn(tmp_path: Path) -> None:
    pools = [
        doc
        for doc in yaml.safe_load_all((EXAMPLE / "pools.yaml").read_text())
        if doc["kind"] == "NodeAddressPool"
    ]
    only_pools = tmp_path / "pools.yaml"
    only_pools.write_text(yaml.safe_dump_all(pools))
    _, err = preview([nodes_file(tmp_path), str(only_pools), str(EXAMPLE / "services.yaml")])
    assert "has NodeAddressPools with namespaceSelectors but no Namespaces" in err
    assert preview_cli.POOLS_DUMP_COMMAND in err


def test_no_pools_no_pool_column(tmp_path: Path) -> None:
    out, _ = preview([nodes_file(tmp_path), str(EXAMPLE / "services.yaml")])
    assert "POOL" not in out.splitlines()[0]
