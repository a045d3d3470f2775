"""app.core.text.elide: a long value is cut in the middle, to a bounded length."""

from __future__ import annotations

import pytest

from app.core.text import elide


def test_short_values_are_unchanged() -> None:
    assert elide("abc") == "abc"
    assert elide("x" * 200) == "x" * 200
    assert elide("", 0) == ""


def test_the_exact_form_of_a_cut() -> None:
    value = "a" * 100 + "b" * 100 + "c"
    cut = elide(value, 60)
    # keep = 60 - len("…(201 characters)…") = 42: 21 characters from each end.
    assert cut == "a" * 21 + "…(159 characters)…" + "b" * 20 + "c"
    assert len(cut) == 60


@pytest.mark.parametrize("size", [201, 1000, 200_000, 10_000_000])
def test_long_values_are_bounded_and_keep_both_ends(size: int) -> None:
    value = "<" + "x" * (size - 2) + ">"
    cut = elide(value)
    assert len(cut) <= 200
    assert cut.startswith("<xx") and cut.endswith("xx>")
    omitted = int(cut.split("…(")[1].split(" characters)…")[0])
    assert len(cut) - len(f"…({omitted} characters)…") + omitted == size


def test_a_limit_below_the_marker_keeps_only_the_marker() -> None:
    assert elide("abcdefghijklmnopqrstuvwxyz" * 3, 5) == "…(78 characters)…"
    with pytest.raises(ValueError, match="limit"):
        elide("abc", -1)
