"""``preview`` filters (NAME, NAMESPACE/NAME, -n, -A), ``-o wide``, empty input, warnings
once, long values (issue 13, findings 3 and 7), on dumps."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.core.builders import node_obj, service_obj
from tests.preview.conftest import KIND_4NODE, parse_table, preview
from tests.preview.support import Write, dump

CLUSTER = str(KIND_4NODE / "cluster.yaml")


def names(stdout: str) -> list[str]:
    return [f"{r['NAMESPACE']}/{r['NAME']}" for r in parse_table(stdout)]


def two_namespaces(write: Write) -> str:
    return write(
        dump(
            node_obj("n1", internal=["10.0.0.1"]),
            service_obj("web", namespace="shop"),
            service_obj("web", namespace="blog"),
            service_obj("db", namespace="shop"),
        )
    )


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        ([], ["blog/web", "shop/db", "shop/web"]),
        (["-A"], ["blog/web", "shop/db", "shop/web"]),
        (["-n", "shop"], ["shop/db", "shop/web"]),
        (["web"], ["blog/web", "shop/web"]),
        (["web", "-n", "shop"], ["shop/web"]),
        (["blog/web", "shop/db"], ["blog/web", "shop/db"]),
        (["blog/web", "-A"], ["blog/web"]),
    ],
)
def test_a_dump_is_filtered_like_kubectl_get(
    write: Write, args: list[str], shown: list[str]
) -> None:
    run = preview("-f", two_namespaces(write), *args)
    assert run.code == 0, run.stderr
    assert names(run.stdout) == shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["web", "-A"], "a resource cannot be retrieved by name across all namespaces"),
        (["-n", "shop", "-A"], "--namespace and --all-namespaces cannot be used together"),
        (["shop/"], "must be NAME or NAMESPACE/NAME"),
        (["a/b/c"], "must be NAME or NAMESPACE/NAME"),
    ],
)
def test_bad_filters_are_one_line_errors(write: Write, args: list[str], message: str) -> None:
    run = preview("-f", two_namespaces(write), *args)
    assert run.code == 2
    assert run.stdout == ""
    assert run.stderr.startswith("error: ") and message in run.stderr


def test_a_missing_name_is_not_found_with_exit_1(write: Write) -> None:
    run = preview("-f", two_namespaces(write), "shop/web", "shop/nope")
    assert run.code == 1
    assert names(run.stdout) == ["shop/web"]
    assert 'error: services "nope" not found in namespace "shop" in the input' in run.stderr


def test_wide_shows_current_ingress_the_change_and_the_node_summary(write: Write) -> None:
    nodes = [
        node_obj("n1", internal=["10.0.0.1"]),
        node_obj("n2", internal=["10.0.0.2"], labels={"pool": "b"}),
    ]
    same = service_obj("same", selector="!pool", ingress=[{"ip": "10.0.0.1", "ipMode": "VIP"}])
    moved = service_obj("moved", ingress=[{"ip": "192.0.2.9", "ipMode": "VIP"}])
    other = service_obj("other", cls="example.com/x", ingress=[{"ip": "192.0.2.7"}])
    run = preview("-f", write(dump(*nodes, same, moved, other)), "-o", "wide")
    assert run.code == 0, run.stderr
    rows = {r["NAME"]: r for r in parse_table(run.stdout)}
    assert list(parse_table(run.stdout)[0]) == [
        "NAMESPACE", "NAME", "CLASS", "EXTERNAL-IP", "CURRENT", "CHANGE", "NODES", "REASON",
    ]  # fmt: skip
    assert (rows["same"]["CURRENT"], rows["same"]["CHANGE"]) == ("10.0.0.1", "no")
    assert rows["same"]["NODES"] == "1/2 selected (SelectorMismatch 1)"
    assert (rows["moved"]["EXTERNAL-IP"], rows["moved"]["CURRENT"]) == (
        "10.0.0.1,10.0.0.2",
        "192.0.2.9",
    )
    assert rows["moved"]["CHANGE"] == "yes"
    assert rows["moved"]["NODES"] == "2/2 selected"
    # Another controller's Service is never written, whatever it holds.
    assert (rows["other"]["CURRENT"], rows["other"]["CHANGE"]) == ("192.0.2.7", "no")


def test_the_kind_example_in_wide_form() -> None:
    rows = parse_table(preview("-f", CLUSTER, "-o", "wide").stdout)
    summary = {r["NAME"]: (r["CHANGE"], r["NODES"]) for r in rows}
    assert summary["nginx-cluster"] == ("yes", "3/4 selected (ExcludedByLabel 1)")
    # TCP/80 on its two candidates is nginx-cluster's (docs/design.md §4.9): nothing to write
    # over a status that holds nothing.
    assert summary["nginx-local"] == (
        "no",
        "0/4 selected (ExcludedByLabel 1, NoReadyEndpoint 1, PortInUse 2)",
    )
    assert summary["other-class"] == ("no", "")


def test_an_empty_file_warns_and_says_no_resources_found(write: Write) -> None:
    for text in ("", "apiVersion: v1\nkind: List\nitems: []\n"):
        path = write(text)
        run = preview("-f", path)
        assert run.code == 0
        assert run.stdout == ""
        assert run.stderr.splitlines() == [
            f"Warning: {path}: no Kubernetes objects",
            "No resources found.",
        ]


def test_no_service_in_the_namespace_says_so_like_kubectl() -> None:
    run = preview("-f", CLUSTER, "-n", "kube-system")
    assert (run.code, run.stdout) == (0, "")
    assert run.stderr == "No resources found in kube-system namespace.\n"


def test_one_bad_node_address_is_reported_once(write: Write) -> None:
    services = [service_obj(f"web-{i}") for i in range(5)]
    path = write(dump(node_obj("n1", internal=["bogus", "10.0.0.1"]), *services))
    run = preview("-f", path)
    lines = [line for line in run.stderr.splitlines() if "bogus" in line]
    assert lines == [
        "Warning: Node n1: ignored status.addresses that are not IP addresses: bogus"
        " (5 Services: default/web-0, default/web-1, default/web-2, ...)"
    ]
    single = preview("-f", path, "default/web-3")
    assert single.stderr == (
        "Warning: default/web-3: Node n1: ignored status.addresses that are not IP"
        " addresses: bogus\n"
    )


def test_a_huge_selector_gives_a_bounded_row_that_keeps_the_reason(write: Write) -> None:
    selector = "tier in (" + ",".join(["web"] * 50_000) + ") =="
    path = write(yaml.safe_dump_all([node_obj("n1", internal=["10.0.0.1"])]) + "---\n"
                 + yaml.safe_dump(service_obj("web", selector=selector)))  # fmt: skip
    run = preview("-f", path)
    assert run.code == 1
    [row] = run.stdout.splitlines()[1:]
    assert len(row) < 500
    assert "characters)…" in row
    assert row.endswith("expected: ',' or 'end of string' (at byte 200010)")


def test_wide_says_change_for_a_malformed_selector_whose_entries_record_no_ports(
    write: Write,
) -> None:
    """A Service whose selector does not parse keeps its stored ingress (docs/design.md
    §4.1); entries without ``ports`` (Cilium's) get the Service's ports recorded once
    (§4.9, ``pinned_ports``): CHANGE says so, and says nothing once they record them."""
    nodes = [node_obj("n1", internal=["10.0.0.1"])]
    kept = [{"ip": "10.0.0.1", "ipMode": "VIP"}]
    recorded = [{**kept[0], "ports": [{"port": 80, "protocol": "TCP"}]}]
    cilium_era = service_obj("cilium-era", selector="a in (b", ingress=kept)
    pinned = service_obj("pinned", selector="a in (b", ingress=recorded)
    grown = service_obj("grown", selector="a in (b", ingress=copy.deepcopy(recorded))
    for obj in (cilium_era, pinned, grown):
        obj["spec"]["ports"] = [{"name": "http", "port": 80, "protocol": "TCP"}]
    # A port its entries never recorded: the reconciler withdraws them (stale_ingress).
    grown["spec"]["ports"].append({"name": "https", "port": 443, "protocol": "TCP"})
    run = preview("-f", write(dump(*nodes, cilium_era, pinned, grown)), "-o", "wide")
    assert run.code == 1, run.stderr  # 1: a malformed selector is listed
    rows = {r["NAME"]: r for r in parse_table(run.stdout)}
    assert (rows["cilium-era"]["EXTERNAL-IP"], rows["cilium-era"]["CHANGE"]) == ("<error>", "yes")
    assert (rows["pinned"]["CURRENT"], rows["pinned"]["CHANGE"]) == ("10.0.0.1", "no")
    assert (rows["grown"]["CURRENT"], rows["grown"]["CHANGE"]) == ("10.0.0.1", "yes")
