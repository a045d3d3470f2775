"""Accepted selectors give apimachinery's canonical String(), and that text re-parses to itself."""

from __future__ import annotations

import pytest

from app.core.selector import (
    DOES_NOT_EXIST,
    DOUBLE_EQUALS,
    EQUALS,
    EXISTS,
    GREATER_THAN,
    IN,
    LESS_THAN,
    NOT_EQUALS,
    NOT_IN,
    Requirement,
    parse,
)
from tests.core.selector.valid_cases import VALID

VALID_PARAMS = [pytest.param(text, canonical, id=name) for name, text, canonical in VALID]


@pytest.mark.parametrize(("text", "canonical"), VALID_PARAMS)
def test_selector_is_accepted_with_canonical_form(text: str, canonical: str) -> None:
    assert str(parse(text)) == canonical


@pytest.mark.parametrize(("text", "canonical"), VALID_PARAMS)
def test_canonical_form_reparses_to_itself(text: str, canonical: str) -> None:
    selector = parse(text)
    again = parse(str(selector))
    assert again == selector
    assert str(again) == canonical


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a", Requirement("a", EXISTS), id="bare key is exists"),
        pytest.param("!a", Requirement("a", DOES_NOT_EXIST), id="bang key is does-not-exist"),
        pytest.param("a=b", Requirement("a", EQUALS, ("b",)), id="single equals"),
        pytest.param("a==b", Requirement("a", DOUBLE_EQUALS, ("b",)), id="double equals"),
        pytest.param("a!=b", Requirement("a", NOT_EQUALS, ("b",)), id="not equals"),
        pytest.param("a=", Requirement("a", EQUALS, ("",)), id="missing value is empty string"),
        pytest.param("a in (b,c)", Requirement("a", IN, ("b", "c")), id="in"),
        pytest.param("a notin (c,b)", Requirement("a", NOT_IN, ("b", "c")), id="notin"),
        pytest.param("a in ()", Requirement("a", IN, ("",)), id="empty set is the empty value"),
        pytest.param("a>7", Requirement("a", GREATER_THAN, ("7",)), id="gt operator value"),
        pytest.param("a<07", Requirement("a", LESS_THAN, ("07",)), id="lt keeps digits as typed"),
    ],
)
def test_requirement_has_apimachinery_operator_and_values(text: str, expected: Requirement) -> None:
    assert parse(text).requirements == (expected,)


def test_empty_selector_is_empty() -> None:
    assert parse("").empty()
    assert parse(" \t\r\n").empty()
    assert not parse("a").empty()
