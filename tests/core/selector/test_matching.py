"""Selector.matches against node label sets, as apimachinery ``Selector.Matches`` decides.

Rows from docs/reference/label-selectors.md §5 plus the edge cases around absent keys, empty values
and base-10 int64 parsing of label values at match time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType

import pytest

from app.core.selector import parse

WORKER = "node-role.kubernetes.io/worker"
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
INT64_MAX = "9223372036854775807"

# (id, selector, labels, matches)
MATCHING: list[tuple[str, str, dict[str, str], bool]] = [
    # --- reference table -------------------------------------------------------------------
    ("not-equals matches a node without the label", "x!=a", {}, True),
    ("does-not-exist fails on an empty-valued label", "!x", {"x": ""}, False),
    ("in () matches the empty value", "x in ()", {"x": ""}, True),
    ("in () does not match an absent label", "x in ()", {}, False),
    ("notin () matches an absent label", "x notin ()", {}, True),
    ("notin () fails on the empty value", "x notin ()", {"x": ""}, False),
    ("notin () matches a non-empty value", "x notin ()", {"x": "b"}, True),
    ("gt compares numerically", "n>10", {"n": "9"}, False),
    ("gt accepts a plus sign in the label", "n>10", {"n": "+11"}, True),
    ("gt accepts leading zeros in the label", "n>10", {"n": "011"}, True),
    ("gt rejects an underscore in the label", "n>10", {"n": "1_0"}, False),
    ("lt accepts a negative label", "n<0", {"n": "-5"}, True),
    ("gt rejects a leading space in the label", "n>1", {"n": " 2"}, False),
    ("gt fails on an absent label", "n>1", {}, False),
    ("exists matches an empty value", "x", {"x": ""}, True),
    # --- empty selector ---------------------------------------------------------------------
    ("empty selector matches a node without labels", "", {}, True),
    ("empty selector matches any node", "", {"zone": "a", WORKER: ""}, True),
    ("whitespace selector matches any node", "  ", {"zone": "a"}, True),
    # --- equality ---------------------------------------------------------------------------
    ("equals matches the value", "zone=eu", {"zone": "eu"}, True),
    ("equals fails on another value", "zone=eu", {"zone": "us"}, False),
    ("equals fails on an absent label", "zone=eu", {}, False),
    ("keys are case-sensitive", "zone=eu", {"Zone": "eu"}, False),
    ("values are case-sensitive", "zone=eu", {"zone": "EU"}, False),
    ("double equals matches the value", "zone==eu", {"zone": "eu"}, True),
    ("double equals fails on another value", "zone==eu", {"zone": "us"}, False),
    ("equals empty matches the empty value", "x=", {"x": ""}, True),
    ("equals empty fails on an absent label", "x=", {}, False),
    ("equals empty fails on a value", "x=", {"x": "a"}, False),
    ("not-equals fails on the value", "zone!=eu", {"zone": "eu"}, False),
    ("not-equals matches another value", "zone!=eu", {"zone": "us"}, True),
    ("not-equals empty matches an absent label", "x!=", {}, True),
    ("not-equals empty fails on the empty value", "x!=", {"x": ""}, False),
    ("not-equals empty matches a value", "x!=", {"x": "a"}, True),
    # --- exists / does not exist ------------------------------------------------------------
    ("exists fails on an absent label", "x", {}, False),
    ("exists matches any value", "x", {"x": "anything"}, True),
    ("does-not-exist matches an absent label", "!x", {}, True),
    ("does-not-exist fails on a value", "!x", {"x": "a"}, False),
    ("worker role present", WORKER, {WORKER: ""}, True),
    ("control-plane excluded", f"!{CONTROL_PLANE}", {CONTROL_PLANE: ""}, False),
    ("worker that is not control-plane", f"{WORKER},!{CONTROL_PLANE}", {WORKER: ""}, True),
    (
        "worker that is also control-plane",
        f"{WORKER},!{CONTROL_PLANE}",
        {WORKER: "", CONTROL_PLANE: ""},
        False,
    ),
    # --- sets -------------------------------------------------------------------------------
    ("in matches a listed value", "x in (a,b)", {"x": "b"}, True),
    ("in fails on an unlisted value", "x in (a,b)", {"x": "c"}, False),
    ("in fails on an absent label", "x in (a,b)", {}, False),
    ("in with an empty slot matches the empty value", "x in (,a)", {"x": ""}, True),
    ("in with an empty slot matches a listed value", "x in (,a)", {"x": "a"}, True),
    ("in with an empty slot fails on an absent label", "x in (,a)", {}, False),
    ("notin matches an absent label", "x notin (a,b)", {}, True),
    ("notin fails on a listed value", "x notin (a,b)", {"x": "a"}, False),
    ("notin matches an unlisted value", "x notin (a,b)", {"x": "c"}, True),
    ("notin with an empty slot fails on the empty value", "x notin (,a)", {"x": ""}, False),
    ("keyword values in a set", "x in (in,notin)", {"x": "notin"}, True),
    # --- gt / lt ----------------------------------------------------------------------------
    ("gt fails on equal", "n>10", {"n": "10"}, False),
    ("gt matches greater", "n>10", {"n": "11"}, True),
    ("lt matches smaller", "n<10", {"n": "9"}, True),
    ("lt fails on equal", "n<10", {"n": "10"}, False),
    ("gt with leading zeros in the selector", "n>007", {"n": "8"}, True),
    ("gt rejects a trailing space", "n>1", {"n": "2 "}, False),
    ("gt rejects the empty value", "n>0", {"n": ""}, False),
    ("gt rejects a decimal", "n>1", {"n": "2.0"}, False),
    ("gt rejects an exponent", "n>1", {"n": "1e3"}, False),
    ("gt rejects hex", "n>1", {"n": "0x10"}, False),
    ("gt rejects a word", "n>1", {"n": "many"}, False),
    ("gt rejects a lone sign", "n<1", {"n": "-"}, False),
    ("gt rejects a double sign", "n<1", {"n": "--1"}, False),
    ("gt rejects plus-minus", "n<1", {"n": "+-1"}, False),
    ("gt rejects Arabic-Indic digits", "n>1", {"n": "\u0663"}, False),
    ("gt rejects fullwidth digits", "n>1", {"n": "\uff13"}, False),
    ("lt on minus zero", "n<0", {"n": "-0"}, False),
    ("lt matches int64 min", "n<1", {"n": "-9223372036854775808"}, True),
    ("lt rejects below int64 min", "n<1", {"n": "-9223372036854775809"}, False),
    ("gt matches int64 max", "n>0", {"n": INT64_MAX}, True),
    ("gt rejects above int64 max", "n>0", {"n": "9223372036854775808"}, False),
    ("lt int64 max fails on int64 max", f"n<{INT64_MAX}", {"n": INT64_MAX}, False),
    ("lt int64 max matches one below", f"n<{INT64_MAX}", {"n": "9223372036854775806"}, True),
    ("gt accepts many leading zeros", "n>10", {"n": "0" * 30 + "11"}, True),
    ("gt rejects 5000 digits without crashing", "n>10", {"n": "9" * 5000}, False),
    ("range of cores inside", "cores>4,cores<65", {"cores": "64"}, True),
    ("range of cores outside", "cores>4,cores<65", {"cores": "65"}, False),
    # --- combinations -----------------------------------------------------------------------
    ("all requirements hold", "a=b,c=d", {"a": "b", "c": "d"}, True),
    ("one requirement fails", "a=b,c=d", {"a": "b"}, False),
    ("contradictory equals on one key", "a=2,a=1", {"a": "1"}, False),
    ("contradictory equals on one key other value", "a=2,a=1", {"a": "2"}, False),
    ("exists and does-not-exist on one key", "a,!a", {"a": ""}, False),
    ("label values are not validated at match time", "x notin (a)", {"x": "not a label!"}, True),
    ("odd label value still exists", "x", {"x": "-"}, True),
    (
        "prefixed zone with in",
        "topology.kubernetes.io/zone in (eu-1a)",
        {"topology.kubernetes.io/zone": "eu-1a"},
        True,
    ),
]

MATCH_PARAMS = [pytest.param(*row[1:], id=row[0]) for row in MATCHING]


@pytest.mark.parametrize(("selector", "labels", "expected"), MATCH_PARAMS)
def test_selector_matches_node_labels(
    selector: str, labels: dict[str, str], expected: bool
) -> None:
    assert parse(selector).matches(labels) is expected


@pytest.mark.parametrize(("selector", "labels", "expected"), MATCH_PARAMS)
def test_selector_matches_through_canonical_form(
    selector: str, labels: dict[str, str], expected: bool
) -> None:
    assert parse(str(parse(selector))).matches(labels) is expected


class _Labels(Mapping[str, str]):
    """A read-only Mapping that is not a dict, like a NodeView's labels may be."""

    def __init__(self, data: dict[str, str]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


@pytest.mark.parametrize(
    "wrap", [MappingProxyType, _Labels], ids=["mappingproxy labels", "custom Mapping labels"]
)
def test_any_mapping_of_labels_is_accepted(
    wrap: Callable[[dict[str, str]], Mapping[str, str]],
) -> None:
    selector = parse("zone in (a,b),!gpu,cores>2,x!=y")
    assert selector.matches(wrap({"zone": "a", "cores": "3"}))
    assert not selector.matches(wrap({"zone": "a", "cores": "3", "gpu": ""}))
