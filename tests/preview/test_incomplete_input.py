"""A dump that lacks a kind the answer depends on is warned about (docs/design.md §8):
without it, preview gave a confident wrong answer about the cluster."""

from __future__ import annotations

from collections.abc import Callable

import yaml

from tests.core.builders import endpoint, node_obj, service_obj
from tests.preview.conftest import preview

Write = Callable[..., str]
ADVICE = (
    "dump them with kubectl get nodes,services,endpointslices -A -o yaml, and the"
    " Pods with kubectl get pods -A -o json (one -f per output)"
)
NO_NODES = f"Warning: the input has no Nodes: {ADVICE}"
NO_SLICES = f"Warning: the input has no EndpointSlices: {ADVICE}"


def as_list(*objects: object) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(objects)})


def test_services_without_any_node_are_warned_about_once(write: Write) -> None:
    path = write(as_list(service_obj("a"), service_obj("b")))
    run = preview("-f", path)
    assert run.code == 0
    assert run.stderr.splitlines().count(NO_NODES) == 1
    assert NO_SLICES not in run.stderr  # no Local Service: EndpointSlices do not matter


def test_a_local_service_without_any_endpointslice_is_warned_about_once(write: Write) -> None:
    path = write(
        as_list(node_obj("n1", internal=["10.0.0.1"]), service_obj("a", etp="Local"),
                service_obj("b", etp="Local"))
    )  # fmt: skip
    run = preview("-f", path, "-o", "wide")
    assert run.code == 0
    assert run.stderr.splitlines().count(NO_SLICES) == 1
    assert NO_NODES not in run.stderr


def test_complete_input_and_unmanaged_local_services_get_no_such_warning(write: Write) -> None:
    complete = write(
        as_list(
            node_obj("n1", internal=["10.0.0.1"]),
            service_obj("a", etp="Local"),
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "addressType": "IPv4",
                "metadata": {
                    "name": "a-x",
                    "namespace": "default",
                    "labels": {"kubernetes.io/service-name": "a"},
                },
                "endpoints": [endpoint("n1")],
            },
        ),
        "complete.yaml",
    )
    unmanaged = write(
        as_list(node_obj("n1", internal=["10.0.0.1"]), service_obj("b", etp="Local", cls="x/y")),
        "unmanaged.yaml",
    )
    for path in (complete, unmanaged):
        run = preview("-f", path)
        assert run.code == 0, run.stderr
        assert "the input has no" not in run.stderr
