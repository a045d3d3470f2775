"""Bad input: one line naming the file and object, exit 2, never a traceback (issue 2, item 5)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.core.builders import node_obj, service_obj
from tests.preview.conftest import KIND_4NODE, parse_table, preview

Write = Callable[..., str]


def as_list(*objects: object) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(objects)})


def assert_one_line_error(stderr: str, *parts: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    for part in parts:
        assert part in lines[0], stderr
    assert "Traceback" not in stderr


def test_missing_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    run = preview("-f", missing)
    assert run.code == 2
    assert run.stdout == ""
    assert_one_line_error(run.stderr, missing, "cannot read", "No such file")


def test_invalid_yaml(write: Write) -> None:
    path = write("apiVersion: v1\nkind: List\nitems:\n  - kind: Node\n   bad: [indent\n")
    run = preview("-f", path)
    assert run.code == 2
    assert_one_line_error(run.stderr, path, "invalid YAML", "line ")


def test_invalid_json(write: Write) -> None:
    path = write('{"kind": "List", "items": [}', "dump.json")
    run = preview("-f", path)
    assert run.code == 2
    assert_one_line_error(run.stderr, path, "invalid JSON", "line 1")


@pytest.mark.parametrize("name", ["dump.yaml", "dump.json"])
def test_an_integer_python_cannot_convert_is_one_error_line(write: Write, name: str) -> None:
    # Before: "error: Exceeds the limit (4300 digits) ...", naming no file or place.
    svc = service_obj("big")
    svc["spec"]["ports"] = [{"port": 1}]
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [svc]}, indent=1)
    if name == "dump.yaml":
        text = as_list(svc)
    path = write(
        text.replace("port: 1", "port: " + "9" * 5000).replace(
            '"port": 1', '"port": ' + "9" * 5000
        ),
        name,
    )
    run = preview("-f", path)
    assert run.code == 2
    assert_one_line_error(run.stderr, path, "integer of 5000 digits", "line ", "column ")


@pytest.mark.parametrize(
    ("item", "parts"),
    [
        ("just a string", ["items[1]", "not a Kubernetes object (a str)"]),
        ({"metadata": {"name": "x"}}, ["items[1]", "kind: Required value"]),
        ({"kind": "Node", "metadata": {}}, ["items[1] (Node)", "metadata.name: Required value"]),
        (
            {"kind": "Node", "metadata": {"name": 12345}},
            ["items[1] (Node)", "metadata.name: Invalid value: 12345: must be a string"],
        ),
        (
            {"kind": "Node", "metadata": {"name": "n9", "deletionTimestamp": 5}},
            ["items[1] (Node n9)", "metadata.deletionTimestamp: Invalid value: 5: must be an RFC"],
        ),
        (
            {"kind": "Node", "metadata": {"name": "n9", "deletionTimestamp": []}},
            ["items[1] (Node n9)", "metadata.deletionTimestamp: Invalid value: []"],
        ),
        (
            {"kind": "Service", "metadata": {"name": "web", "deletionTimestamp": 5}},
            ["items[1] (Service web)", "metadata.deletionTimestamp: Invalid value: 5"],
        ),
        (
            {"kind": "Service", "metadata": {"name": "web"}, "spec": {"ipFamilies": [4]}},
            ["items[1] (Service web)", "spec.ipFamilies[0]: Invalid value: 4: must be a string"],
        ),
        (
            {"kind": "Node", "metadata": {"name": "n9", "labels": {"all": True}}},
            ["items[1] (Node n9)", "metadata.labels[all]: Invalid value: True: must be a string"],
        ),
        (
            {"kind": "Service", "metadata": {"name": "web", "namespace": "shop"}, "spec": "LB"},
            ["items[1] (Service shop/web)", "spec: Invalid value"],
        ),
        (
            {"kind": "EndpointSlice", "metadata": {"name": "s"}, "endpoints": {"a": 1}},
            ["items[1] (EndpointSlice s)", "endpoints: Invalid value: must be a list"],
        ),
    ],
    ids=[
        "not an object",
        "no kind",
        "node without name",
        "name not a string",
        "deletionTimestamp a number",
        "deletionTimestamp a list",
        "service deletionTimestamp a number",
        "ipFamilies entry not a string",
        "label not a string",
        "spec not an object",
        "endpoints not a list",
    ],
)
def test_list_with_a_broken_item(write: Write, item: object, parts: list[str]) -> None:
    path = write(as_list(node_obj("n1", internal=["10.0.0.1"]), item))
    run = preview("-f", path)
    assert run.code == 2
    assert run.stdout == ""
    assert_one_line_error(run.stderr, path, *parts)


def test_list_whose_items_is_not_a_list(write: Write) -> None:
    path = write("kind: List\nitems: {a: 1}\n")
    run = preview("-f", path)
    assert run.code == 2
    assert_one_line_error(run.stderr, path, "items: Invalid value: must be a list")


def test_multi_document_error_names_the_document(write: Write) -> None:
    path = write(yaml.safe_dump(service_obj("web")) + "---\n- 1\n- 2\n")
    run = preview("-f", path)
    assert run.code == 2
    assert_one_line_error(run.stderr, path, "document 2[0]", "not a Kubernetes object")


def test_node_with_garbage_addresses_is_still_used(write: Write) -> None:
    path = write(
        as_list(node_obj("n1", internal=["bogus", "10.0.0.1", "fe80::1%eth0"]), service_obj("web"))
    )
    table = preview("-f", path)
    assert table.code == 0
    assert parse_table(table.stdout)[0]["EXTERNAL-IP"] == "10.0.0.1"
    assert "Warning: default/web: Node n1: ignored status.addresses" in table.stderr
    assert "bogus" in table.stderr
    item = json.loads(preview("-f", path, "-o", "json").stdout)["items"][0]
    assert item["nodes"][0]["reason"].endswith(
        "ignored addresses that are not IPs: bogus, fe80::1%eth0"
    )
    assert any("bogus" in w for w in item["warnings"])


def test_malformed_selector_does_not_stop_other_services(write: Write) -> None:
    path = write(
        as_list(
            node_obj("n1", internal=["10.0.0.1"]),
            service_obj("bad", selector="this is completely/bad=!;lf"),
            service_obj("good"),
        )
    )
    run = preview("-f", path, "-o", "json")
    assert run.code == 1
    items = {i["name"]: i for i in json.loads(run.stdout)["items"]}
    assert items["bad"]["ingress"] is None
    assert items["bad"]["error"].startswith(
        "metadata.annotations[io.cilium.nodeipam/match-node-labels]: Invalid value"
    )
    assert items["good"]["ingress"] == [{"ip": "10.0.0.1", "ipMode": "VIP"}]
    rows = {r["NAME"]: r for r in parse_table(preview("-f", path).stdout)}
    assert rows["bad"]["EXTERNAL-IP"] == "<error>"
    assert rows["bad"]["REASON"].startswith("metadata.annotations")


def test_unknown_kinds_are_skipped(write: Write) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    knative = {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": "kn"},
    }
    path = write(
        as_list(
            pod,
            knative,
            {"kind": "ConfigMap", "metadata": {"name": "c"}},
            node_obj("n1", internal=["10.0.0.1"]),
            service_obj("web"),
        )
    )
    run = preview("-f", path)
    assert run.code == 0, run.stderr
    assert [r["NAME"] for r in parse_table(run.stdout)] == ["web"]


def test_stdin_multi_document_and_several_files(write: Write) -> None:
    nodes = write(
        yaml.safe_dump(node_obj("n1", internal=["10.0.0.2"]))
        + "---\n"
        + yaml.safe_dump(node_obj("n2", internal=["10.0.0.1"])),
        "nodes.yaml",
    )
    run = preview("-f", nodes, "-f", "-", stdin=json.dumps(service_obj("web")))
    assert run.code == 0, run.stderr
    assert parse_table(run.stdout)[0]["EXTERNAL-IP"] == "10.0.0.1,10.0.0.2"


def test_typed_list_from_the_api(write: Write) -> None:
    path = write(
        json.dumps(
            {
                "kind": "NodeList",
                "apiVersion": "v1",
                "items": [node_obj("n1", internal=["10.0.0.1"])],
            }
        ),
        "nodes.json",
    )
    svc = write(yaml.safe_dump(service_obj("web")), "svc.yaml")
    run = preview("-f", path, "-f", svc, "-o", "json")
    assert json.loads(run.stdout)["items"][0]["ingress"] == [{"ip": "10.0.0.1", "ipMode": "VIP"}]


def test_empty_file_previews_nothing(write: Write) -> None:
    run = preview("-f", write(""))
    assert run.code == 0
    assert json.loads(preview("-f", write(""), "-o", "json").stdout) == {"items": []}


@pytest.mark.parametrize(
    ("flags", "parts"),
    [
        (
            ["--default-lb-service-ipam", "NodeIPAM"],
            [
                "--default-lb-service-ipam (NODE_IPAM_DEFAULT_LB_SERVICE_IPAM)",
                "'lbipam', 'nodeipam' or 'none'",
                "'NodeIPAM'",
            ],
        ),
        (["--ip-mode", "vip"], ["--ip-mode (NODE_IPAM_IP_MODE)", "'vip'"]),
        (["--not-ready-grace-seconds", "-1"], ["--not-ready-grace-seconds", "-1"]),
        (["-o", "tree"], ["--output: Unsupported value: 'tree'"]),
    ],
)
def test_bad_settings_are_one_line_errors(flags: list[str], parts: list[str]) -> None:
    run = preview("-f", str(KIND_4NODE / "cluster.yaml"), *flags)
    assert run.code == 2
    assert run.stdout == ""
    assert_one_line_error(run.stderr, *parts)


def test_without_filename_and_without_a_cluster_is_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No -f: the live cluster; with no kubeconfig anywhere and no Pod, say how to give one."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    run = preview()
    assert run.code == 2
    assert run.stdout == ""
    assert_one_line_error(run.stderr, "no cluster to talk to", "--kubeconfig", "KUBECONFIG")


def billion_laughs(levels: int = 9) -> str:
    """``kind: List`` whose items nest aliases 10 wide and ``levels`` deep (10^levels Foos)."""
    lines = ["apiVersion: v1", "kind: List", "items:"]
    lines.append("- &l0 [" + ", ".join(["{kind: Foo}"] * 10) + "]")
    lines += [f"- &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(30)
def test_yaml_aliases_are_refused_at_once(write: Write) -> None:
    path = write(billion_laughs())
    run = preview("-f", path)
    assert run.code == 2
    assert run.stdout == ""
    assert_one_line_error(run.stderr, path, "aliases are not accepted", "line 4, column 3")


def test_a_single_alias_is_refused_too(write: Write) -> None:
    text = "kind: Node\nmetadata: &m {name: n1}\nstatus: {x: *m}\n"
    run = preview("-f", write(text))
    assert run.code == 2
    assert_one_line_error(run.stderr, "anchor (&name) used by an alias (*name)")


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        (
            '{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n\\ud800"}}]}',
            ["items[0].metadata.name: Invalid value: not valid Unicode"],
        ),
        (
            '{"kind": "Node", "metadata": {"name": "n1", "labels": {"a\\udc00": "b"}}}',
            ["metadata.labels[a\\udc00]: Invalid value: not valid Unicode"],
        ),
        ("[" * 100_000 + "]" * 100_000, ["invalid JSON: nested too deeply"]),
        ("items: " + "[" * 100_000 + "]" * 100_000, ["invalid YAML", "nesting depth"]),
    ],
    ids=["lone surrogate in a value", "lone surrogate in a key", "deep JSON", "deep YAML"],
)
def test_input_no_kubectl_writes_is_one_line_error(
    write: Write, text: str, parts: list[str]
) -> None:
    path = write(text, "dump.json")
    run = preview("-f", path, "-o", "json")
    assert run.code == 2
    assert run.stdout == ""
    assert_one_line_error(run.stderr, path, *parts)


@pytest.mark.parametrize("family", ["IPv9", "ipv4"])
def test_an_unsupported_ip_family_is_named_as_the_api_server_names_it(
    write: Write, family: str
) -> None:
    # Before: "spec.ipFamilies is empty", which it was not.
    path = write(as_list(node_obj("n1", internal=["10.0.0.1"]), service_obj(families=[family])))
    run = preview("-f", path)
    assert run.code == 0
    assert (
        f'spec.ipFamilies[0]: Unsupported value: "{family}": supported values: "IPv4", "IPv6"'
        in run.stderr
    )
    assert "is empty" not in run.stderr


def test_an_object_given_twice_is_warned_about_once(write: Write) -> None:
    first = write(as_list(node_obj("n1", internal=["10.0.0.1"]), service_obj("web")), "a.yaml")
    second = write(as_list(node_obj("n1", internal=["10.0.0.2"])), "b.yaml")
    run = preview("-f", first, "-f", second, "-f", second)
    assert run.code == 0
    warnings = [line for line in run.stderr.splitlines() if "Node n1" in line]
    assert warnings == [
        f"Warning: Node n1 is in the input 3 times; the last one ({second}: items[0] (Node n1))"
        " wins, as a later kubectl apply would overwrite the earlier"
    ]
    assert parse_table(run.stdout)[0]["EXTERNAL-IP"] == "10.0.0.2"


def test_a_named_service_missing_from_the_files_is_not_a_server_error(write: Write) -> None:
    path = write(as_list(node_obj("n1", internal=["10.0.0.1"]), service_obj("web")))
    run = preview("-f", path, "x")
    assert run.code == 1
    assert run.stderr == 'error: services "x" not found in the input\n'
    assert "server" not in preview("-f", path, "shop/x").stderr
