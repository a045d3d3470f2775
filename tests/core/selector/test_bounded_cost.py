"""Bounded cost of hostile selectors (issue 14, docs/design.md §6.1) without changing a verdict.

- The fast path of ``parse`` gives exactly what the token parser gives (requirements, or
  the error message and byte position), over generated selectors full of the lexer's
  corner cases.
- The compiled matching of long selectors agrees with apimachinery's requirement-by-
  requirement ``Matches``, and costs label lookups per Node in proportion to the Node's
  labels, not to the number of requirements (counted, not timed).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.selector import (
    COMPILE_ABOVE,
    PARSE_CACHE_CHARS,
    Selector,
    SelectorError,
    _lex,
    _Parser,
    parse,
    parse_cached,
)

_PIECES = [
    "a", "b", "k", "x1", "in", "notin", "example.com/a", "A.b-c_d", "-bad", "a/b/c",
    "v", "9", "-3", "+4", "99999999999999999999", "",
    ",", " ", "\t", "\n", "!", "=", "==", "!=", "<", ">", "(", ")", " in ", " notin ",
    "\x00", "é", ":", "x" * 64,
]  # fmt: skip
_REQUIREMENTS = [
    "a", "!a", "a=b", "a==b", "a!=b", "a=", "a>3", "a<-3", "a in (b,c)", "a notin (b)",
    "example.com/a in ( x , y )", "in", "in=in", "a in ()", "a in (,b)", "k>x", "!in",
    "b notin (in,notin)", "x1 in(v)", "a=-bad", "-bad", "a>", "a<", "k=9",
]  # fmt: skip


def _reference(text: str) -> tuple[tuple[str, ...], str | None, int | None]:
    """The token parser alone (the implementation before the fast path)."""
    try:
        data = text.encode("utf-8", "surrogatepass")
        requirements = Selector(tuple(_Parser(_lex(data)).requirements())).requirements
    except SelectorError as err:
        return (), err.message, err.position
    return tuple(repr(r) for r in requirements), None, None


def _ours(text: str) -> tuple[tuple[str, ...], str | None, int | None]:
    try:
        requirements = parse(text).requirements
    except SelectorError as err:
        return (), err.message, err.position
    return tuple(repr(r) for r in requirements), None, None


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=12))
def test_fast_path_agrees_with_the_token_parser_on_arbitrary_pieces(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert _ours(text) == _reference(text), text


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(_REQUIREMENTS), min_size=1, max_size=12),
    st.sampled_from([",", " , ", ",\t", ", ", ",,", ", \x00"]),
    st.sampled_from(["", " ", ",", "\x00", " é", "!", "!=a"]),
)
def test_fast_path_agrees_with_the_token_parser_on_requirement_lists(
    requirements: list[str], separator: str, tail: str
) -> None:
    text = separator.join(requirements) + tail
    assert _ours(text) == _reference(text), text


def test_a_long_run_of_repeated_requirements_parses_like_the_token_parser() -> None:
    text = ",".join(["!a"] * 2000 + ["x1"] + ["b in (c, d)"] * 500)
    assert _ours(text) == _reference(text)
    bad = text + ",a in (b"
    assert _ours(bad) == _reference(bad)
    assert _ours(bad)[1] is not None


class CountingLabels(Mapping[str, str]):
    """A label map that counts every lookup made in it."""

    def __init__(self, labels: dict[str, str]) -> None:
        self._labels = labels
        self.lookups = 0

    def __getitem__(self, key: str) -> str:
        self.lookups += 1
        return self._labels[key]

    def __contains__(self, key: object) -> bool:
        self.lookups += 1
        return key in self._labels

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        self.lookups += 1
        return self._labels.get(key, default)

    def __iter__(self) -> Iterator[str]:
        self.lookups += len(self._labels)
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def items(self):  # type: ignore[no-untyped-def,override]
        self.lookups += len(self._labels)
        return self._labels.items()


NODE_LABELS = {f"label-{i}": "v" for i in range(20)} | {"x1": "", "zone": "eu-1"}


def test_matching_repeated_requirements_costs_per_label_not_per_requirement() -> None:
    selector = parse(",".join(["!a"] * 10_000 + ["x1"]))
    labels = CountingLabels(NODE_LABELS)
    assert selector.matches(labels)
    assert labels.lookups <= 2 * (len(NODE_LABELS) + 1), labels.lookups


def test_matching_many_distinct_requirements_costs_per_label_not_per_requirement() -> None:
    for text, expected in [
        (",".join(f"!absent-{i}" for i in range(5_000)) + ",zone", True),
        (",".join(f"present-{i}" for i in range(5_000)), False),
        (",".join(f"k-{i} notin (a)" for i in range(5_000)) + ",zone in (eu-1)", True),
        (",".join(f"k-{i}!=a" for i in range(5_000)) + ",zone=eu-2", False),
    ]:
        labels = CountingLabels(NODE_LABELS)
        assert parse(text).matches(labels) is expected, text[:40]
        assert labels.lookups <= 2 * (len(NODE_LABELS) + 1), (text[:40], labels.lookups)


_MATCH_REQUIREMENTS = [
    "a", "!a", "a=1", "a!=1", "a in (1,2)", "a notin (2)", "a>0", "a<2", "b", "!b",
    "b=", "b in (,x)", "b notin ()", "c>-5", "c<10", "c=7", "a==2", "c>x",
]  # fmt: skip
_LABEL_VALUES = st.one_of(st.none(), st.sampled_from(["", "1", "2", "7", "x", "-9", "+3"]))


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.sampled_from(_MATCH_REQUIREMENTS), min_size=COMPILE_ABOVE + 1, max_size=30),
    st.fixed_dictionaries({"a": _LABEL_VALUES, "b": _LABEL_VALUES, "c": _LABEL_VALUES}),
)
def test_compiled_matching_agrees_with_requirement_by_requirement(
    requirements: list[str], values: dict[str, str | None]
) -> None:
    try:
        selector = parse(",".join(requirements))
    except SelectorError:
        return  # "c>x": not a selector at all
    labels = {k: v for k, v in values.items() if v is not None}
    expected = all(r.matches(labels) for r in selector.requirements)
    assert selector.matches(labels) is expected


def test_parse_cache_is_bounded_by_text_length() -> None:
    huge = ",".join(f"k{i}" for i in range(PARSE_CACHE_CHARS // 4))
    assert len(huge) > PARSE_CACHE_CHARS
    assert parse_cached(huge) is not parse_cached(huge)  # parsed, never kept
    small = "cache-bound-test=1"
    assert parse_cached(small) is parse_cached(small)
