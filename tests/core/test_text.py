"""app.core.text: long values cut in the middle, both ends kept, the length bounded."""

from __future__ import annotations

import pytest

from app.core.text import DEFAULT_LIMIT, elide, elide_bytes


@pytest.mark.parametrize("value", ["", "short", "x" * 40])
def test_a_value_within_the_limit_is_unchanged(value: str) -> None:
    assert elide(value, 40) == value
    assert elide_bytes(value, 40) == value


def test_a_long_value_keeps_its_head_and_tail_and_says_how_much_was_left_out() -> None:
    value = "HEAD" + "m" * 200_000 + "TAIL"
    cut = elide(value, 60)
    assert len(cut) <= 60
    assert cut.startswith("HEAD") and cut.endswith("TAIL")
    shown = len(cut) - len(cut[cut.index("…") : cut.rindex("…") + 1])
    assert f"({len(value) - shown} characters)" in cut


def test_the_count_in_the_marker_is_exact() -> None:
    cut = elide("a" * 300, 40)
    head, _, rest = cut.partition("…(")
    count, _, tail = rest.partition(" characters)…")
    assert len(head) + len(tail) + int(count.replace(",", "")) == 300
    assert len(cut) <= 40


def test_a_limit_too_small_for_the_marker_gives_the_plain_head() -> None:
    assert elide("abcdefghijklmnopqrstuvwxyz" * 4, 5) == "abcde"
    assert elide_bytes("ü" * 100, 5) == "üü"


@pytest.mark.parametrize("limit", [0, -3])
def test_a_limit_below_one_is_refused_naming_it(limit: int) -> None:
    with pytest.raises(ValueError, match="limit: must be at least 1"):
        elide("abc", limit)
    with pytest.raises(ValueError, match="limit: must be at least 1"):
        elide_bytes("abc", limit)


@pytest.mark.parametrize(
    "value",
    ["ü" * 2000, "€" * 700 + "END", "a" + "𝄞" * 600 + "z", "x\ud800y" * 400],
    ids=["two-byte", "three-byte", "four-byte", "lone-surrogate"],
)
def test_elide_bytes_fits_the_utf8_limit_at_character_boundaries(value: str) -> None:
    cut = elide_bytes(value, 1024)
    encoded = cut.encode("utf-8")  # raises if a surrogate was left in
    assert len(encoded) <= 1024
    assert "bytes)…" in cut
    assert cut[0] == value[0] and cut[-1] == value[-1].replace("\ud800", "?")


def test_elide_bytes_keeps_a_reason_at_the_end_of_a_message_with_a_huge_value() -> None:
    message = 'metadata.annotations[x]: Invalid value: "' + "k" * 200_000 + '": found ","'
    cut = elide_bytes(message, 1024)
    assert cut.startswith("metadata.annotations[x]: Invalid value:")
    assert cut.endswith('": found ","')
    assert len(cut.encode()) <= 1024


@pytest.mark.parametrize("size", [201, 1000, 200_000, 10_000_000])
def test_long_values_are_bounded_to_the_default_and_keep_both_ends(size: int) -> None:
    value = "<" + "x" * (size - 2) + ">"
    cut = elide(value)
    assert len(cut) <= DEFAULT_LIMIT
    assert cut.startswith("<xx") and cut.endswith("xx>")
    omitted = int(cut.split("…(")[1].split(" characters)…")[0])
    marker = f"…({omitted} characters)…"
    assert len(cut) - len(marker) + omitted == size
