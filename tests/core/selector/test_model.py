"""Requirement/Selector value objects, the parse cache, and property tests over the grammar."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.selector import (
    DOES_NOT_EXIST,
    EQUALS,
    EXISTS,
    GREATER_THAN,
    IN,
    NOT_IN,
    Requirement,
    Selector,
    SelectorError,
    parse,
    parse_cached,
)

# --- value objects ----------------------------------------------------------------------------


def test_requirement_values_are_deduplicated_and_sorted_bytewise() -> None:
    requirement = Requirement("rack", IN, ("r2", "R1", "r1", "r2"))
    assert requirement.values == ("R1", "r1", "r2")
    assert str(requirement) == "rack in (R1,r1,r2)"


@pytest.mark.parametrize(
    ("key", "operator", "values", "reason"),
    [
        pytest.param(
            "a",
            "exist",
            (),
            'Unsupported value: "exist": supported values: "in"',
            id="unknown operator",
        ),
        pytest.param("a", "In", ("b",), "Unsupported value", id="operator is case-sensitive"),
        pytest.param("a", EXISTS, ("b",), "must be empty", id="exists with a value"),
        pytest.param(
            "a", DOES_NOT_EXIST, ("b",), "must be empty", id="does-not-exist with a value"
        ),
        pytest.param("a", EQUALS, (), "exactly one value", id="equals without value"),
        pytest.param("a", EQUALS, ("b", "c"), "exactly one value", id="equals with two values"),
        pytest.param("a", GREATER_THAN, ("1", "2"), "exactly one value", id="gt with two values"),
        pytest.param("a", NOT_IN, (), "can't be empty", id="notin with no values"),
        pytest.param("a", IN, "bc", "must be a tuple of strings", id="values given as one string"),
    ],
)
def test_requirement_with_wrong_shape_is_refused(
    key: str, operator: str, values: tuple[str, ...], reason: str
) -> None:
    with pytest.raises(SelectorError, match=reason):
        Requirement(key, operator, values)


def test_requirement_built_directly_with_non_integer_gt_matches_nothing() -> None:
    assert not Requirement("n", GREATER_THAN, ("ten",)).matches({"n": "11"})


def test_selector_sorts_requirements_by_key_stably() -> None:
    selector = Selector(
        (
            Requirement("b", EXISTS),
            Requirement("a", EQUALS, ("2",)),
            Requirement("a", EQUALS, ("1",)),
        )
    )
    assert str(selector) == "a=2,a=1,b"


def test_selectors_from_equivalent_text_are_equal_and_hashable() -> None:
    first, second = parse("b in (y,x),a"), parse("a , b in (x,y,x)")
    assert first == second
    assert hash(first) == hash(second)
    assert first != parse("a,b in (x)")


def test_default_selector_is_empty_and_matches_everything() -> None:
    assert Selector().empty()
    assert Selector().matches({"any": "thing"})
    assert str(Selector()) == ""


def test_parse_cached_returns_the_same_selector_object() -> None:
    text = "cache-test-zone in (a,b)"
    assert parse_cached(text) is parse_cached(text)
    assert parse_cached(text) == parse(text)


def test_parse_cached_raises_every_time_for_a_bad_selector() -> None:
    for _ in range(2):
        with pytest.raises(SelectorError):
            parse_cached("cache-test,")


# --- properties -------------------------------------------------------------------------------

GRAMMAR_ALPHABET = " \t\r\n\0=!(),<>inotaxyzAZ09-_./\u00a0\u00e9\v"
WHITESPACE = st.text(alphabet=" \t\r\n", max_size=3)
SOME_WHITESPACE = st.text(alphabet=" \t\r\n", min_size=1, max_size=3)
NAMES = st.sampled_from(["a", "zone", "in", "notin", "example.com/Role_1", "A.b-c", "k8s.io/x"])
VALUES = st.sampled_from(["", "a", "in", "notin", "B", "eu-1", "a.b_c", "007", "42"])
PROPERTY_SETTINGS = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@PROPERTY_SETTINGS
@given(st.text(alphabet=GRAMMAR_ALPHABET, max_size=40))
def test_any_text_parses_or_raises_selector_error_and_canonical_form_is_stable(
    text: str,
) -> None:
    try:
        selector = parse(text)
    except SelectorError as err:
        assert err.message
        assert err.position is not None
        assert 0 <= err.position <= len(text.encode("utf-8"))
        return
    canonical = str(selector)
    assert parse(canonical) == selector
    assert str(parse(canonical)) == canonical


@st.composite
def spaced_requirement(draw: st.DrawFn) -> tuple[str, Requirement]:
    """A requirement's text with random whitespace between tokens, and what it must parse to."""
    key = draw(NAMES)
    kind = draw(st.sampled_from(["exists", "!", "=", "==", "!=", "in", "notin", ">", "<"]))
    ws = [draw(WHITESPACE) for _ in range(4)]
    if kind == "exists":
        return f"{ws[0]}{key}{ws[1]}", Requirement(key, EXISTS)
    if kind == "!":
        return f"{ws[0]}!{ws[1]}{key}{ws[2]}", Requirement(key, DOES_NOT_EXIST)
    if kind in ("in", "notin"):
        slots = draw(st.lists(VALUES, min_size=1, max_size=4))
        inner = ",".join(f"{draw(WHITESPACE)}{slot}{draw(WHITESPACE)}" for slot in slots)
        text = f"{ws[0]}{key}{draw(SOME_WHITESPACE)}{kind}{ws[1]}({inner}){ws[2]}"
        return text, Requirement(key, kind, tuple(slots))
    if kind in (">", "<"):
        number = draw(st.integers(min_value=0, max_value=2**63 - 1))
        digits = "0" * draw(st.integers(0, 3)) + str(number)
        operator = "gt" if kind == ">" else "lt"
        return f"{ws[0]}{key}{ws[1]}{kind}{ws[2]}{digits}{ws[3]}", Requirement(
            key, operator, (digits,)
        )
    value = draw(VALUES)
    return f"{ws[0]}{key}{ws[1]}{kind}{ws[2]}{value}{ws[3]}", Requirement(key, kind, (value,))


@PROPERTY_SETTINGS
@given(st.lists(spaced_requirement(), max_size=6))
def test_whitespace_between_tokens_does_not_change_the_selector(
    parts: list[tuple[str, Requirement]],
) -> None:
    text = ",".join(part for part, _ in parts)
    expected = Selector(tuple(requirement for _, requirement in parts))
    selector = parse(text)
    assert selector == expected
    assert parse(str(selector)) == selector


LABEL_SETS = st.dictionaries(
    st.sampled_from(["a", "zone", "n"]),
    st.sampled_from(["", "a", "B", "7", "-3", "x y"]),
    max_size=3,
)


@PROPERTY_SETTINGS
@given(NAMES, st.lists(VALUES, min_size=1, max_size=3), LABEL_SETS)
def test_notin_is_the_negation_of_in(key: str, values: list[str], labels: dict[str, str]) -> None:
    inner = ",".join(values)
    assert parse(f"{key} in ({inner})").matches(labels) != parse(f"{key} notin ({inner})").matches(
        labels
    )


@PROPERTY_SETTINGS
@given(NAMES, VALUES, LABEL_SETS)
def test_not_equals_is_the_negation_of_equals(key: str, value: str, labels: dict[str, str]) -> None:
    assert parse(f"{key}={value}").matches(labels) != parse(f"{key}!={value}").matches(labels)
    assert parse(key).matches(labels) != parse(f"!{key}").matches(labels)


@PROPERTY_SETTINGS
@given(st.lists(spaced_requirement(), min_size=1, max_size=4), LABEL_SETS)
def test_selector_matches_when_every_requirement_matches(
    parts: list[tuple[str, Requirement]], labels: dict[str, str]
) -> None:
    selector = parse(",".join(part for part, _ in parts))
    assert selector.matches(labels) == all(r.matches(labels) for r in selector.requirements)
