"""Rejected selectors: the error class, the offending token or key, and the byte position.

Messages follow apimachinery's shapes (docs/reference/label-selectors.md §3); the rows pin the
distinguishing part of each message rather than whole texts, plus SelectorError.position.
"""

from __future__ import annotations

import pytest

from app.core.selector import SelectorError, parse, parse_cached

REQ = "unable to parse requirement: "
TOP = "expected: !, identifier, or 'end of string'"
AFTER_COMMA = "expected: identifier after ','"
END = "expected: ',' or 'end of string'"
OPS = "expected: in, notin, =, ==, !=, gt, lt"
INTEGER = "for 'Gt', 'Lt' operators, the value must be an integer"
VALUE_RE = "a valid label must be an empty string or consist of alphanumeric characters"
NAME_RE = "name part must consist of alphanumeric characters"
PREFIX_RE = "prefix part a lowercase RFC 1123 subdomain must consist of"
VALUE_LONG = "must be no more than 63 bytes"

# (id, input, message starts with "unable to parse requirement: ", fragment, byte position)
ERRORS: list[tuple[str, str, bool, str, int]] = [
    # --- reference examples --------------------------------------------------------------
    (
        "ref-18 NUL after a value is dropped, junk follows",
        "a=b\0junk",
        False,
        f"found 'junk', {END}",
        4,
    ),
    (
        "ref-19 exceeds int64",
        "x<9223372036854775808",
        True,
        f'values[0]: Invalid value: "9223372036854775808": {INTEGER}',
        2,
    ),
    (
        "ref-20 negative gt fails the value pattern",
        "x>-1",
        True,
        f'values[0][x]: Invalid value: "-1": {VALUE_RE}',
        2,
    ),
    (
        "ref-21 greater-or-equal is gt then equals",
        "a>=1",
        True,
        "found '=', expected: identifier",
        2,
    ),
    ("ref-22 uppercase IN is not an operator", "x IN (a)", True, f"found 'IN', {OPS}", 2),
    ("ref-23 bang key then equals", "!x=a", False, f"found '=', {END}", 2),
    ("ref-24 two values after equals", "x=a b", False, f"found 'b', {END}", 4),
    (
        "ref-25 two identifiers in one set slot",
        "x in (a b)",
        True,
        "found 'b', expected: ',' or ')'",
        8,
    ),
    (
        "ref-26 uppercase in prefix",
        "Example.com/role",
        True,
        f'key: Invalid value: "Example.com/role": {PREFIX_RE}',
        0,
    ),
    ("ref-27 empty prefix", "/x", True, "prefix part must be non-empty", 0),
    (
        "ref-28 no-break space is not whitespace",
        "a=b,\u00a0c=d",
        True,
        f'key: Invalid value: "\\u00a0c": {NAME_RE}',
        4,
    ),
    (
        "ref-30 value longer than 63 bytes",
        "x=" + "v" * 64,
        True,
        f'values[0][x]: Invalid value: "{"v" * 64}": {VALUE_LONG}',
        2,
    ),
    # --- commas ----------------------------------------------------------------------------
    ("lone comma", ",", False, f"found ',', {TOP}", 0),
    ("leading comma", ",a", False, f"found ',', {TOP}", 0),
    ("lone comma between spaces", " , ", False, f"found ',', {TOP}", 1),
    ("trailing comma", "a,", False, f"found '', {AFTER_COMMA}", 2),
    ("trailing comma after value", "a=b,", False, f"found '', {AFTER_COMMA}", 4),
    ("doubled comma", "a,,b", False, f"found ',', {AFTER_COMMA}", 2),
    ("NUL after comma and space ends input", "a=b, \0c=d", False, f"found '', {AFTER_COMMA}", 5),
    ("comma then equals", "a,=b", False, f"found '=', {AFTER_COMMA}", 2),
    ("comma then open paren", "a,(b)", False, f"found '(', {AFTER_COMMA}", 2),
    # --- top level -------------------------------------------------------------------------
    ("starts with equals", "=a", False, f"found '=', {TOP}", 0),
    ("starts with not-equals", "!=a", False, f"found '!=', {TOP}", 0),
    ("starts with parenthesis", "(a)", False, f"found '(', {TOP}", 0),
    ("starts with gt", ">1", False, f"found '>', {TOP}", 0),
    ("closing parenthesis after set", "x in (a))", False, f"found ')', {END}", 8),
    ("value then open parenthesis", "x=a(b)", False, f"found '(', {END}", 3),
    ("equals chain", "x=a=b", False, f"found '=', {END}", 3),
    ("bang key then in", "!x in (a)", False, f"found 'in', {END}", 3),
    ("bang key then notin", "!x notin (a)", False, f"found 'notin', {END}", 3),
    ("bang key then value", "!x a", False, f"found 'a', {END}", 3),
    ("exists then another identifier after a value", "a=b c", False, f"found 'c', {END}", 4),
    # --- bang ------------------------------------------------------------------------------
    ("lone bang", "!", True, "found '', expected: identifier", 1),
    ("double bang", "!!x", True, "found '!', expected: identifier", 1),
    ("bang then comma", "!,a", True, "found ',', expected: identifier", 1),
    ("bang then equals", "a,! =b", True, "found '=', expected: identifier", 4),
    # --- operators -------------------------------------------------------------------------
    ("key then key", "x y", True, f"found 'y', {OPS}", 2),
    ("gt spelled out", "x gt 1", True, f"found 'gt', {OPS}", 2),
    ("exists spelled out", "x exists", True, f"found 'exists', {OPS}", 2),
    ("NotIn spelled with capitals", "x NotIn (a)", True, f"found 'NotIn', {OPS}", 2),
    ("in glued to key", "ain (x)", True, f"found '(', {OPS}", 4),
    ("double bang operator", "x!!a", True, f"found '!', {OPS}", 1),
    ("closing parenthesis as operator", "x)", True, f"found ')', {OPS}", 1),
    ("less-or-equal", "x<=1", True, "found '=', expected: identifier", 2),
    ("not-equal diamond", "x<>1", True, "found '>', expected: identifier", 2),
    ("triple equals", "x===a", True, "found '=', expected: identifier", 3),
    ("equals then not", "x=!a", True, "found '!', expected: identifier", 2),
    ("equals then paren", "x=(a)", True, "found '(', expected: identifier", 2),
    # --- sets ------------------------------------------------------------------------------
    ("in without parenthesis", "x in a", True, "found 'a' expected: '('", 5),
    ("in at the end", "x in", True, "found '' expected: '('", 4),
    ("notin at the end", "x notin", True, "found '' expected: '('", 7),
    ("unclosed set", "x in (", True, "found '', expected: ',', ')' or identifier", 6),
    ("operator inside set", "x in (=)", True, "found '=', expected: ',', ')' or identifier", 6),
    ("nested parentheses", "x in ((a))", True, "found '(', expected: ',', ')' or identifier", 6),
    ("set missing close after value", "x in (a", True, "found '', expected: ',' or ')'", 7),
    (
        "set missing close after comma",
        "x in (a,",
        True,
        "found '', expected: ',', or identifier",
        8,
    ),
    (
        "operator after comma in set",
        "x in (a,=)",
        True,
        "found '=', expected: ',', or identifier",
        8,
    ),
    ("leading comma then end", "x in (,", True, "found '', expected: ',', or identifier", 7),
    ("value then operator in set", "x in (a=b)", True, "found '=', expected: ',' or ')'", 7),
    # --- keys ------------------------------------------------------------------------------
    ("empty name after prefix", "x/", True, "name part must be non-empty", 0),
    (
        "two slashes",
        "a/b/c",
        True,
        'key: Invalid value: "a/b/c": a valid label key must consist of',
        0,
    ),
    ("name starting with dash", "-a", True, NAME_RE, 0),
    ("name ending with dash", "a-", True, NAME_RE, 0),
    ("name starting with underscore", "_a", True, NAME_RE, 0),
    ("name ending with underscore", "a_", True, NAME_RE, 0),
    ("name starting with dot", ".a", True, NAME_RE, 0),
    ("name with colon", "a:b", True, NAME_RE, 0),
    ("quoted key", '"a"=b', True, 'key: Invalid value: "\\"a\\"": ' + NAME_RE, 0),
    ("or-bars are identifier bytes", "a||b", True, NAME_RE, 0),
    ("semicolon is an identifier byte", "a;b", True, NAME_RE, 0),
    ("ampersands are identifier bytes", "a&&b", True, NAME_RE, 0),
    ("underscore in prefix", "ex_ample.com/x", True, PREFIX_RE, 0),
    ("empty prefix label", "example..com/x", True, PREFIX_RE, 0),
    ("prefix leading dot", ".example.com/x", True, PREFIX_RE, 0),
    ("prefix trailing dot", "example.com./x", True, PREFIX_RE, 0),
    ("prefix label leading dash", "-example.com/x", True, PREFIX_RE, 0),
    ("prefix label trailing dash", "example-.com/x", True, PREFIX_RE, 0),
    ("64-byte name", "n" * 64, True, "name part must be no more than 63 bytes", 0),
    (
        "64-byte name after a prefix",
        "example.com/" + "n" * 64,
        True,
        "name part must be no more than 63 bytes",
        0,
    ),
    ("254-byte prefix", "p" * 254 + "/x", True, "prefix part must be no more than 253 bytes", 0),
    (
        "318-byte key with long prefix",
        "p" * 254 + "/" + "n" * 63,
        True,
        "prefix part must be no more than 253 bytes",
        0,
    ),
    (
        "318-byte key with long name",
        "p" * 253 + "/" + "n" * 64,
        True,
        "name part must be no more than 63 bytes",
        0,
    ),
    ("bad key reported before a bad operator", "A_/x >= 1", True, PREFIX_RE, 0),
    ("bad key reported at its position", "a=b,c=d,-e", True, NAME_RE, 8),
    ("bad key after bang", "! -e", True, NAME_RE, 2),
    # --- whitespace look-alikes and non-ASCII ---------------------------------------------
    ("vertical tab is not whitespace", "a\vb", True, 'key: Invalid value: "a\\vb"', 0),
    ("form feed is not whitespace", "a=b\f", True, 'values[0][a]: Invalid value: "b\\f"', 2),
    ("ideographic space is not whitespace", "\u3000a", True, 'key: Invalid value: "\\u3000a"', 0),
    ("zero-width space is not whitespace", "a\u200bb", True, 'key: Invalid value: "a\\u200bb"', 0),
    (
        "no-break space inside a value",
        "a=b\u00a0",
        True,
        'values[0][a]: Invalid value: "b\\u00a0"',
        2,
    ),
    ("control byte in key", "a\x01", True, 'key: Invalid value: "a\\x01"', 0),
    (
        "lone surrogate from JSON shown as Go bytes",
        "\ud800",
        True,
        'key: Invalid value: "\\xed\\xa0\\x80"',
        0,
    ),
    (
        "escape sequence in a stray token is escaped",
        "a=b \x1b[31m",
        False,
        "found '\\x1b[31m', ",
        4,
    ),
    (
        "lone surrogate in a stray token is escaped",
        "a=b \udfff",
        False,
        "found '\\xed\\xbf\\xbf', ",
        4,
    ),
    ("accented key", "\u00e9=a", True, NAME_RE, 0),
    ("accented value", "a=\u00e9", True, VALUE_RE, 2),
    ("emoji value shown as is", "a=\U0001f600", True, 'Invalid value: "\U0001f600"', 2),
    (
        "byte position after a two-byte character",
        "x in (\u00e9 a)",
        True,
        "found 'a', expected: ',' or ')'",
        9,
    ),
    ("byte position after three-byte characters", "x in (\u20ac,\u20ac b)", True, "found 'b'", 14),
    ("byte position of a key after a euro sign", "a=b \u20ac", False, f"found '\u20ac', {END}", 4),
    ("error after a multibyte value is located in bytes", "x in (\u00e9),,", True, VALUE_RE, 6),
    (
        "name of 32 two-byte characters is 64 bytes",
        "\u00e9" * 32,
        True,
        "name part must be no more than 63 bytes; name part must consist of",
        0,
    ),
    (
        "value of 32 two-byte characters is 64 bytes",
        "x=" + "\u00e9" * 32,
        True,
        f"{VALUE_LONG}; {VALUE_RE}",
        2,
    ),
    # --- values ----------------------------------------------------------------------------
    ("value starting with dash", "x=-a", True, VALUE_RE, 2),
    ("value ending with dash", "x=a-", True, VALUE_RE, 2),
    ("value starting with underscore", "x=_a", True, VALUE_RE, 2),
    ("value starting with dot", "x=.a", True, VALUE_RE, 2),
    ("slash in value", "x=a/b", True, VALUE_RE, 2),
    ("colon in value", "x=a:b", True, VALUE_RE, 2),
    ("quoted value", 'x="a"', True, VALUE_RE, 2),
    ("semicolon in value", "x=a;b", True, VALUE_RE, 2),
    ("bad value in a set", "x in (ok,-bad)", True, 'values[0][x]: Invalid value: "-bad"', 9),
    ("bad value in notin", "x notin (a_)", True, 'values[0][x]: Invalid value: "a_"', 9),
    ("64-byte value in a set", "x in (" + "v" * 64 + ")", True, VALUE_LONG, 6),
    ("64-byte value with not-equals", "x!=" + "v" * 64, True, VALUE_LONG, 3),
    (
        "two bad set values reported together",
        "x in (b,-z,-a)",
        True,
        '[values[0][x]: Invalid value: "-a": ',
        11,
    ),
    # --- gt / lt ---------------------------------------------------------------------------
    ("gt without value", "x>", True, f'values[0]: Invalid value: "": {INTEGER}', 2),
    ("lt without value", "x<", True, f'values[0]: Invalid value: "": {INTEGER}', 2),
    ("gt without value before comma", "x>,y", True, INTEGER, 2),
    ("gt with a word", "x>a", True, INTEGER, 2),
    ("gt with a decimal", "x>1.5", True, INTEGER, 2),
    ("gt with an underscore", "x>1_0", True, INTEGER, 2),
    ("gt with hex", "x>0x10", True, INTEGER, 2),
    ("gt with exponent", "x>1e3", True, INTEGER, 2),
    ("gt with plus sign", "x>+1", True, VALUE_RE, 2),
    ("lt with Arabic-Indic digit", "x<\u0663", True, INTEGER, 2),
    ("lt just above int64 max", "x<9223372036854775808", True, INTEGER, 2),
    ("gt far above int64 max", "x>99999999999999999999", True, INTEGER, 2),
    ("gt with leading zeros above int64 max", "x>09223372036854775808", True, INTEGER, 2),
    (
        "integer and value errors together",
        "a>1-",
        True,
        f'[values[0]: Invalid value: "1-": {INTEGER}, values[0][a]:',
        2,
    ),
    (
        "64 digits are not an integer and too long",
        "a>" + "9" * 64,
        True,
        f"{INTEGER}, values[0][a]:",
        2,
    ),
    ("5000 digits do not crash", "a>" + "9" * 5000, True, VALUE_LONG, 2),
]

ERROR_PARAMS = [pytest.param(*row[1:], id=row[0]) for row in ERRORS]


@pytest.mark.parametrize(("text", "in_requirement", "fragment", "position"), ERROR_PARAMS)
def test_selector_is_rejected_with_reason_and_position(
    text: str, in_requirement: bool, fragment: str, position: int
) -> None:
    with pytest.raises(SelectorError) as caught:
        parse(text)
    err = caught.value
    assert err.message.startswith(REQ) is in_requirement
    assert fragment in err.message
    assert err.position == position
    assert str(err) == f"{err.message} (at byte {position})"


def test_selector_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"found ',', expected"):
        parse(",")


@pytest.mark.parametrize(
    "value", [None, 5, b"a=b", ["a=b"]], ids=["null", "number", "bytes", "list"]
)
def test_non_string_selector_is_a_selector_error(value: object) -> None:
    with pytest.raises(SelectorError, match="a selector must be a string") as caught:
        parse(value)  # type: ignore[arg-type]
    assert caught.value.position is None
    with pytest.raises(SelectorError, match="a selector must be a string"):
        parse_cached(value)  # type: ignore[arg-type]


def test_every_error_message_can_be_encoded_as_utf8() -> None:
    for text in ("\ud800", "a=b \udfff", "x=\ud83d", "a in (\udc00 b)"):
        with pytest.raises(SelectorError) as caught:
            parse(text)
        str(caught.value).encode("utf-8")


def test_only_the_first_bad_requirement_is_reported() -> None:
    with pytest.raises(SelectorError) as caught:
        parse("a=-x,B_/y,c>z")
    assert '"-x"' in caught.value.message
    assert "B_/y" not in caught.value.message
    assert caught.value.position == 2
