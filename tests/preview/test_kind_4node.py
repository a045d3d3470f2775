"""``node-ipam-lb preview -f examples/kind-4node/cluster.yaml`` prints expected.txt's IPs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.cases import read_ours
from tests.preview.conftest import KIND_4NODE, parse_table, preview


def expected() -> dict[str, list[str] | None]:
    """``namespace/name -> IPs`` from expected.txt; ``None`` for ``untouched``."""
    return read_ours(KIND_4NODE)


def table_ips(stdout: str) -> dict[str, list[str] | None]:
    got: dict[str, list[str] | None] = {}
    for row in parse_table(stdout):
        shown = row["EXTERNAL-IP"]
        key = f"{row['NAMESPACE']}/{row['NAME']}"
        if shown == "<not managed>":
            got[key] = None
        else:
            got[key] = [] if shown == "<pending>" else shown.split(",")
    return got


def test_expected_file_is_not_empty() -> None:
    assert len(expected()) == 5


def test_table_output_matches_expected() -> None:
    run = preview("-f", str(KIND_4NODE / "cluster.yaml"))
    assert run.code == 0, run.stderr
    assert table_ips(run.stdout) == expected()
    assert run.stdout.splitlines()[0].split() == [
        "NAMESPACE",
        "NAME",
        "CLASS",
        "EXTERNAL-IP",
        "REASON",
    ]


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_structured_output_matches_expected(fmt: str) -> None:
    run = preview("-f", str(KIND_4NODE / "cluster.yaml"), "-o", fmt)
    assert run.code == 0, run.stderr
    doc = json.loads(run.stdout) if fmt == "json" else yaml.safe_load(run.stdout)
    got = {
        f"{item['namespace']}/{item['name']}": (
            None if item["ingress"] is None else [e["ip"] for e in item["ingress"]]
        )
        for item in doc["items"]
    }
    assert got == expected()
    for item in doc["items"]:
        assert set(item) >= {
            "namespace",
            "name",
            "managed",
            "reason",
            "ingress",
            "error",
            "nodes",
            "warnings",
        }
        assert item["managed"] is (item["ingress"] is not None)
        assert all(e["ipMode"] == "VIP" for e in item["ingress"] or [])


def test_json_explains_the_control_plane_exclusion() -> None:
    run = preview("-f", str(KIND_4NODE / "cluster.yaml"), "-o", "json")
    items = {i["name"]: i for i in json.loads(run.stdout)["items"]}
    nodes = {n["name"]: n for n in items["nginx-cluster"]["nodes"]}
    assert nodes["kind-control-plane"]["selected"] is False
    assert "exclude-from-external-load-balancers" in nodes["kind-control-plane"]["reason"]
    local = {n["name"]: n for n in items["nginx-local"]["nodes"]}
    assert local["kind-worker3"]["code"] == "NoReadyEndpoint"


def test_real_console_script() -> None:
    script = Path(sys.executable).parent / "node-ipam-lb"
    assert script.exists(), "pip install -e . creates the node-ipam-lb console script"
    done = subprocess.run(
        [str(script), "preview", "-f", str(KIND_4NODE / "cluster.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert table_ips(done.stdout) == expected()


def test_readme_shows_the_real_output() -> None:
    readme = (KIND_4NODE.parents[1] / "README.md").read_text()
    command = "$ node-ipam-lb preview -f examples/kind-4node/cluster.yaml\n"
    assert command in readme
    shown = readme.split(command, 1)[1].split("```", 1)[0]
    run = preview("-f", str(KIND_4NODE / "cluster.yaml"))
    assert shown == run.stdout
