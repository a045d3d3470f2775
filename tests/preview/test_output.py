"""``preview -o json|yaml`` is streamed item by item and keeps the document's exact shape."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import yaml

from app.core.decision import Decider
from app.core.dump import load_dump, project
from app.core.nodeipam import NodeVerdict, Selection
from app.core.options import SelectionSettings
from app.preview import run as preview_cli
from app.preview.output import write_json, write_yaml
from tests.core.builders import NOW
from tests.preview.conftest import KIND_4NODE


def kind_4node() -> list[Selection]:
    views = project(load_dump([str(KIND_4NODE / "cluster.yaml")]))
    return list(preview_cli.preview_dump(views, settings=SelectionSettings(), now=NOW))


ODD = Selection(
    namespace="shop",
    name='we"b\\é',
    managed=True,
    reason="line\nbreak: and # hash, 'quote'",
    ingress=None,
    error="metadata.annotations[x]: Invalid value: \"(\": found '(', expected: identifier",
    nodes=(
        NodeVerdict(name="n1", selected=False, code="NotReady", reason="- dash: yes"),
        NodeVerdict(name="n2", selected=True, code="Selected", reason="advertised: 10.0.0.1"),
    ),
    warnings=("w1", "true"),
    recheck_at=1767225600.5,
    code="InvalidNodeSelector",
)
BARE = Selection(
    namespace="default",
    name="lonely",
    managed=True,
    reason="no Nodes in the cluster",
    ingress=(),
    error=None,
    nodes=(),
    warnings=(),
    recheck_at=None,
    code="NoNodes",
)
CASES = {
    "kind-4node": kind_4node,
    "no Services": lambda: [],
    "odd strings and no nodes": lambda: [ODD, BARE, ODD],
}


def reference(selections: list[Selection]) -> dict[str, Any]:
    return {"items": [s.to_dict() for s in selections]}


@pytest.mark.parametrize("case", list(CASES))
def test_json_is_byte_identical_to_one_json_dumps(case: str) -> None:
    selections = CASES[case]()
    out = io.StringIO()
    write_json(iter(selections), out)
    assert out.getvalue() == json.dumps(reference(selections), indent=2) + "\n"


@pytest.mark.parametrize("case", list(CASES))
def test_yaml_loads_to_the_same_document(case: str) -> None:
    selections = CASES[case]()
    out = io.StringIO()
    write_yaml(iter(selections), out)
    assert yaml.safe_load(out.getvalue()) == reference(selections)


def test_yaml_text_is_what_safe_dump_of_the_whole_document_gives() -> None:
    selections = kind_4node()
    out = io.StringIO()
    write_yaml(iter(selections), out)
    whole = yaml.safe_dump(
        reference(selections), sort_keys=False, default_flow_style=False, width=1000
    )
    assert out.getvalue() == whole


class FirstWrite(io.StringIO):
    """Records how many Selections had been computed when output first began."""

    def __init__(self, computed: list[int]) -> None:
        super().__init__()
        self.computed = computed
        self.at_first_write: int | None = None

    def write(self, text: str) -> int:
        if self.at_first_write is None:
            self.at_first_write = self.computed[0]
        return super().write(text)


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_items_are_written_as_they_are_computed(
    output: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory stays bounded by one item: 2,000 Services x 5,000 Nodes never sit in memory
    at once, because the first item is out before the second is computed."""
    computed = [0]
    real_preview = Decider.preview

    def counting(self: Decider, service: Any, snap: Any) -> Selection:
        computed[0] += 1
        return real_preview(self, service, snap)

    monkeypatch.setattr(Decider, "preview", counting)
    stdout = FirstWrite(computed)
    code = preview_cli.run_preview(
        paths=[str(KIND_4NODE / "cluster.yaml")],
        output=output,
        settings={},
        stdout=stdout,
        stderr=io.StringIO(),
        now=NOW,
    )
    assert code == 0
    assert computed[0] == 5  # one decision per Service shown
    assert stdout.at_first_write == 1  # the first is out before the second is decided
