"""Kubernetes label selectors in string form: parse, canonical text, match (docs/design.md §6).

A re-implementation of k8s.io/apimachinery ``labels.Parse`` (``pkg/labels/selector.go``) with
the key/value validators of ``pkg/api/validate/content`` (``IsLabelKey``, ``IsLabelValue``), as of
apimachinery v0.35: every empty set slot is the value ``""`` and length limits are in bytes.
The rules restated in ``docs/reference/label-selectors.md`` are followed exactly:

* the input is lexed as UTF-8 bytes; whitespace is only space, tab, CR and LF; NUL ends the
  input where a token would start and is dropped right after a token;
* accepted/rejected inputs, the canonical ``String()`` and ``Matches`` are apimachinery's;
* error messages have apimachinery's shapes (``unable to parse requirement: ...``,
  ``found '<tok>', expected: ...``, ``prefix part ...``, ``must be no more than 63 bytes``).
  Two deliberate differences make them more useful to an operator: a bad key is reported
  under the field path ``key`` (apimachinery prints ``<nil>``), and ``str(err)`` ends with
  ``(at byte N)``; the bare apimachinery-shaped text is ``SelectorError.message``.

Pure module: no I/O, no Kubernetes client.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import NamedTuple

from app.core.text import elide

__all__ = [
    "DOES_NOT_EXIST",
    "DOUBLE_EQUALS",
    "EQUALS",
    "EXISTS",
    "GREATER_THAN",
    "IN",
    "LESS_THAN",
    "NOT_EQUALS",
    "NOT_IN",
    "Requirement",
    "Selector",
    "SelectorError",
    "parse",
    "parse_cached",
]

# apimachinery pkg/selection Operator values.
EXISTS = "exists"
DOES_NOT_EXIST = "!"
EQUALS = "="
DOUBLE_EQUALS = "=="
NOT_EQUALS = "!="
IN = "in"
NOT_IN = "notin"
GREATER_THAN = "gt"
LESS_THAN = "lt"

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_INT_RE = re.compile(r"[+-]?[0-9]+")

# Matching strategies, precomputed per Requirement so matches() does no string compares.
_KIND_IN, _KIND_NOT_IN, _KIND_EXISTS, _KIND_ABSENT, _KIND_GT, _KIND_LT = range(6)
# apimachinery validRequirementOperators, in its order (for the Unsupported value message).
_SUPPORTED_OPERATORS: tuple[str, ...] = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS)
_SUPPORTED_OPERATORS += (GREATER_THAN, LESS_THAN, EXISTS, DOES_NOT_EXIST)
_KIND_BY_OPERATOR = {
    EQUALS: _KIND_IN,
    DOUBLE_EQUALS: _KIND_IN,
    IN: _KIND_IN,
    NOT_EQUALS: _KIND_NOT_IN,
    NOT_IN: _KIND_NOT_IN,
    EXISTS: _KIND_EXISTS,
    DOES_NOT_EXIST: _KIND_ABSENT,
    GREATER_THAN: _KIND_GT,
    LESS_THAN: _KIND_LT,
}


class SelectorError(ValueError):
    """A label selector that ``labels.Parse`` would reject.

    ``message`` is the apimachinery-shaped reason; ``str(err)`` adds ``(at byte N)``.
    ``position`` is the byte offset (UTF-8) in the input where the problem was found,
    or None when unknown.
    """

    message: str
    position: int | None

    def __init__(self, message: str, *, position: int | None = None) -> None:
        self.message = message
        self.position = position
        super().__init__(message if position is None else f"{message} (at byte {position})")


def _parse_int64(text: str) -> int | None:
    """Go ``strconv.ParseInt(text, 10, 64)``: optional sign, ASCII digits, int64 range."""
    if len(text) < 19 and text.isascii() and text.isdigit():
        return int(text)  # fast path: plain digits that cannot overflow
    if _INT_RE.fullmatch(text) is None:
        return None
    # Bound the digit count first: int() refuses very long strings (and they overflow anyway).
    if len(text.lstrip("+-").lstrip("0")) > 19:
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ANDed condition of a selector (apimachinery ``labels.Requirement``).

    ``operator`` is a ``selection.Operator`` value (``exists``, ``!``, ``=``, ``==``, ``!=``,
    ``in``, ``notin``, ``gt``, ``lt``); ``values`` are de-duplicated and sorted bytewise on
    construction. Content validation (key/value syntax) is done by ``parse``; construction
    only checks the operator and the value count (``NewRequirement`` rules 1-5) and raises
    ``SelectorError`` if they are wrong.
    """

    key: str
    operator: str
    values: tuple[str, ...] = ()
    _value_set: frozenset[str] = field(init=False, repr=False, compare=False)
    _kind: int = field(init=False, repr=False, compare=False)
    _bound: int | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kind = _KIND_BY_OPERATOR.get(self.operator)
        if kind is None:
            supported = ", ".join(go_quote(op) for op in _SUPPORTED_OPERATORS)
            raise SelectorError(
                f"operator: Unsupported value: {go_quote(str(self.operator))}: "
                f"supported values: {supported}"
            )
        if isinstance(self.values, str):
            raise SelectorError(f"values: must be a tuple of strings, not {self.values!r}")
        values = tuple(sorted(set(self.values)))
        if kind in (_KIND_EXISTS, _KIND_ABSENT):
            if values:
                raise SelectorError("values set must be empty for exists and does not exist")
        elif self.operator in (IN, NOT_IN):
            if not values:
                raise SelectorError("for 'in', 'notin' operators, values set can't be empty")
        elif len(values) != 1:
            raise SelectorError(f"operator {self.operator!r} requires exactly one value")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "_value_set", frozenset(values))
        object.__setattr__(self, "_kind", kind)
        bound = _parse_int64(values[0]) if kind in (_KIND_GT, _KIND_LT) else None
        object.__setattr__(self, "_bound", bound)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True if ``labels`` satisfies this requirement (apimachinery ``Requirement.Matches``).

        ``!=``/``notin`` match an absent key; ``gt``/``lt`` need the label value to parse as a
        base-10 int64 (sign allowed) and compare strictly. Labels are not validated.
        """
        kind = self._kind
        value = labels.get(self.key)
        if kind == _KIND_IN:
            return value is not None and value in self._value_set
        if kind == _KIND_NOT_IN:
            return value is None or value not in self._value_set
        if kind == _KIND_EXISTS:
            return value is not None
        if kind == _KIND_ABSENT:
            return value is None
        if value is None or self._bound is None:
            return False
        if len(value) < 19 and value.isascii() and value.isdigit():
            number = int(value)  # _parse_int64's fast path, inlined for speed
        else:
            parsed = _parse_int64(value)
            if parsed is None:
                return False
            number = parsed
        return number > self._bound if kind == _KIND_GT else number < self._bound

    def __str__(self) -> str:
        """Canonical text (apimachinery ``Requirement.String``), e.g. ``rack in (r1,r2)``."""
        operator = self.operator
        if operator == EXISTS:
            return self.key
        if operator == DOES_NOT_EXIST:
            return "!" + self.key
        joined = ",".join(self.values)
        if operator in (IN, NOT_IN):
            return f"{self.key} {operator} ({joined})"
        symbol = {GREATER_THAN: ">", LESS_THAN: "<"}.get(operator, operator)
        return f"{self.key}{symbol}{joined}"


@dataclass(frozen=True, slots=True)
class Selector:
    """An AND of requirements (apimachinery ``internalSelector``), immutable and hashable.

    ``requirements`` are sorted by key, bytewise and stably (Go's ``sort.Sort`` is an
    insertion sort, hence stable, for up to 12 requirements); duplicates are kept.
    """

    requirements: tuple[Requirement, ...] = ()

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.requirements, key=attrgetter("key")))
        object.__setattr__(self, "requirements", ordered)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True if every requirement matches ``labels``; the empty selector matches all."""
        # A plain loop: all() over a generator costs ~2x on the 5,000-node hot path.
        for requirement in self.requirements:  # noqa: SIM110
            if not requirement.matches(labels):
                return False
        return True

    def empty(self) -> bool:
        """True when there are no requirements, i.e. the selector matches everything."""
        return not self.requirements

    def __str__(self) -> str:
        """Canonical form (apimachinery ``Selector.String``); re-parses to an equal selector."""
        return ",".join(str(requirement) for requirement in self.requirements)


# --- lexer -------------------------------------------------------------------------------

_IDENTIFIER = "identifier"
_END = "end of string"
_KEYWORDS = frozenset({IN, NOT_IN})
_WHITESPACE_BYTES = frozenset(b" \t\r\n")
_SPECIAL_BYTES = frozenset(b"=!(),<>")
_IDENTIFIER_RE = re.compile(rb"[^ \t\r\n=!(),<>\x00]+")


class _Token(NamedTuple):
    kind: str  # _IDENTIFIER, _END, "in", "notin", or the special token's own text
    text: str
    position: int  # byte offset of the token's first byte


def _lex(data: bytes) -> list[_Token]:
    """Tokens of ``data`` up to and including the end token (apimachinery ``Lexer.Lex``)."""
    tokens: list[_Token] = []
    position, size = 0, len(data)
    while True:
        while position < size and data[position] in _WHITESPACE_BYTES:
            position += 1
        if position >= size or data[position] == 0:
            tokens.append(_Token(_END, "", position))
            return tokens
        start = position
        if data[position] in _SPECIAL_BYTES:
            pair = data[position : position + 2]
            width = 2 if pair in (b"==", b"!=") else 1
            position += width
            text = data[start:position].decode("ascii")
            kind = text
        else:
            match = _IDENTIFIER_RE.match(data, position)
            assert match is not None  # the byte at `position` is an identifier byte
            position = match.end()
            text = data[start:position].decode("utf-8", "surrogatepass")
            kind = text if text in _KEYWORDS else _IDENTIFIER
        if position < size and data[position] == 0:
            position += 1  # Go's scanners consume a NUL that ends a token
        tokens.append(_Token(kind, text, start))


# --- validation (pkg/api/validate/content) -------------------------------------------------

_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_NAME_RE = re.compile(_NAME_FMT)
_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_VALUE_FMT = f"({_NAME_FMT})?"
_VALUE_RE = re.compile(_VALUE_FMT)
_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, "
    "'-', '_' or '.', and must start and end with an alphanumeric character"
)
_SUBDOMAIN_FMT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_SUBDOMAIN_RE = re.compile(_SUBDOMAIN_FMT)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)
_NAME_MAX_BYTES = 63
_VALUE_MAX_BYTES = 63
_PREFIX_MAX_BYTES = 253


def _byte_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _max_len_error(limit: int) -> str:
    return f"must be no more than {limit} bytes"


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    """apimachinery ``RegexError``, including its double space between examples."""
    shown = "".join(("" if i == 0 else " or ") + f"'{ex}', " for i, ex in enumerate(examples))
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def _label_key_errors(key: str) -> list[str]:
    """Reasons ``key`` is not a qualified name (``content.IsLabelKey``); empty if valid."""
    errors: list[str] = []
    parts = key.split("/")
    if len(parts) > 2:
        detail = _regex_error(_NAME_MSG, _NAME_FMT, "MyName", "my.name", "123-abc")
        return [
            f"a valid label key {detail} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if _byte_length(prefix) > _PREFIX_MAX_BYTES:
                errors.append("prefix part " + _max_len_error(_PREFIX_MAX_BYTES))
            if _SUBDOMAIN_RE.fullmatch(prefix) is None:
                detail = _regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com")
                errors.append("prefix part " + detail)
    if not name:
        errors.append("name part must be non-empty")
    elif _byte_length(name) > _NAME_MAX_BYTES:
        errors.append("name part " + _max_len_error(_NAME_MAX_BYTES))
    if _NAME_RE.fullmatch(name) is None:
        detail = _regex_error(_NAME_MSG, _NAME_FMT, "MyName", "my.name", "123-abc")
        errors.append("name part " + detail)
    return errors


def _label_value_errors(value: str) -> list[str]:
    """Reasons ``value`` is not a label value (``content.IsLabelValue``); empty if valid."""
    errors: list[str] = []
    if _byte_length(value) > _VALUE_MAX_BYTES:
        errors.append(_max_len_error(_VALUE_MAX_BYTES))
    if _VALUE_RE.fullmatch(value) is None:
        errors.append(_regex_error(_VALUE_MSG, _VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r"}
_GO_ESCAPES.update({"\t": "\\t", "\v": "\\v"})
_GO_QUOTE_ESCAPES = {**_GO_ESCAPES, '"': '\\"', "\\": "\\\\"}


def _escape(text: str, escapes: Mapping[str, str] = _GO_ESCAPES) -> str:
    """Go ``%q`` escaping without the quotes: printable runes as-is, others escaped.

    Keeps control bytes and lone surrogates (from JSON ``\\ud800``) out of messages, so an
    error can always be logged and encoded.
    """
    if text.isprintable() and not any(char in escapes for char in text):
        return text
    out: list[str] = []
    for char in text:
        code = ord(char)
        if char in escapes:
            out.append(escapes[char])
        elif 0xD800 <= code <= 0xDFFF:  # lone surrogate: invalid UTF-8 bytes to Go
            out.extend(f"\\x{b:02x}" for b in char.encode("utf-8", "surrogatepass"))
        elif char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def go_quote(text: str) -> str:
    """Go ``%q`` of a string, as apimachinery field errors print bad values: control
    characters and lone surrogates escaped, so the result always encodes as UTF-8."""
    return '"' + _escape(text, _GO_QUOTE_ESCAPES) + '"'


def _invalid(path: str, value: str, detail: str) -> str:
    """apimachinery ``field.Invalid(...).Error()``."""
    return f"{path}: Invalid value: {go_quote(elide(value))}: {detail}"


def _aggregate(messages: list[str]) -> str:
    """apimachinery ``ErrorList.ToAggregate().Error()``: de-duplicated, ``[a, b]`` if several."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


# --- parser --------------------------------------------------------------------------------

_BINARY_OPERATORS = {
    IN: IN,
    NOT_IN: NOT_IN,
    "=": EQUALS,
    "==": DOUBLE_EQUALS,
    "!=": NOT_EQUALS,
    ">": GREATER_THAN,
    "<": LESS_THAN,
}
_OPERATOR_LIST = "in, notin, =, ==, !=, gt, lt"


def _found(token: _Token, expected: str) -> SelectorError:
    found = _escape(elide(token.text))
    return SelectorError(f"found '{found}', expected: {expected}", position=token.position)


class _Parser:
    """Recursive descent over the token list (apimachinery ``Parser``).

    ``_peek``/``_take`` read in value context, where ``in``/``notin`` are identifiers; only the
    operator position reads keywords as keywords.
    """

    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._index = 0

    def _peek(self) -> _Token:
        token = self._tokens[self._index]
        return token._replace(kind=_IDENTIFIER) if token.kind in _KEYWORDS else token

    def _take(self) -> _Token:
        token = self._peek()
        self._index += 1
        return token

    def requirements(self) -> list[Requirement]:
        parsed: list[Requirement] = []
        while True:
            token = self._peek()
            if token.kind == _END:
                return parsed
            if token.kind not in (_IDENTIFIER, "!"):
                raise _found(token, "!, identifier, or 'end of string'")
            try:
                parsed.append(self._requirement())
            except SelectorError as err:
                message = "unable to parse requirement: " + err.message
                raise SelectorError(message, position=err.position) from None
            token = self._take()
            if token.kind == _END:
                return parsed
            if token.kind != ",":
                raise _found(token, "',' or 'end of string'")
            following = self._peek()
            if following.kind not in (_IDENTIFIER, "!"):
                raise _found(following, "identifier after ','")

    def _requirement(self) -> Requirement:
        token = self._take()
        negated = token.kind == "!"
        if negated:
            token = self._take()
        if token.kind != _IDENTIFIER:
            raise _found(token, "identifier")
        key = token.text
        key_errors = _label_key_errors(key)
        if key_errors:
            raise SelectorError(
                _invalid("key", key, "; ".join(key_errors)), position=token.position
            )
        if negated:
            return Requirement(key, DOES_NOT_EXIST)
        if self._peek().kind in (_END, ","):
            return Requirement(key, EXISTS)
        token = self._tokens[self._index]  # operator position: keywords stay keywords
        self._index += 1
        operator = _BINARY_OPERATORS.get(token.kind)
        if operator is None:
            raise _found(token, _OPERATOR_LIST)
        values = self._set_values() if operator in (IN, NOT_IN) else self._exact_value()
        return _new_requirement(key, operator, values)

    def _set_values(self) -> dict[str, int]:
        """``( slot, ... )`` as {value: byte offset of its first occurrence}."""
        token = self._take()
        if token.kind != "(":
            message = f"found '{_escape(token.text)}' expected: '('"  # sic: no comma upstream
            raise SelectorError(message, position=token.position)
        token = self._peek()
        if token.kind == ")":
            self._take()
            return {"": token.position}
        if token.kind not in (_IDENTIFIER, ","):
            raise _found(token, "',', ')' or identifier")
        values: dict[str, int] = {}
        while True:
            token = self._take()
            if token.kind == _IDENTIFIER:
                values.setdefault(token.text, token.position)
                following = self._peek()
                if following.kind == ")":
                    break
                if following.kind != ",":
                    raise _found(following, "',' or ')'")
            elif token.kind == ",":
                following = self._peek()
                # An empty slot before or after this comma is the value "" (v0.35 rules).
                if not values or following.kind in (",", ")"):
                    values.setdefault("", token.position)
                if following.kind == ")":
                    break
            else:
                raise _found(token, "',', or identifier")
        self._take()  # the ")"
        return values

    def _exact_value(self) -> dict[str, int]:
        token = self._peek()
        if token.kind in (_END, ","):
            return {"": token.position}
        token = self._take()
        if token.kind != _IDENTIFIER:
            raise _found(token, "identifier")
        return {token.text: token.position}


def _new_requirement(key: str, operator: str, values: dict[str, int]) -> Requirement:
    """Validate values like apimachinery ``NewRequirement``; all errors reported together."""
    ordered = sorted(values)
    errors: list[tuple[str, int]] = []
    if operator in (GREATER_THAN, LESS_THAN):
        for index, value in enumerate(ordered):
            if _parse_int64(value) is None:
                detail = "for 'Gt', 'Lt' operators, the value must be an integer"
                errors.append((_invalid(f"values[{index}]", value, detail), values[value]))
    for index, value in enumerate(ordered):
        value_errors = _label_value_errors(value)
        if value_errors:
            path = f"values[{index}][{key}]"
            errors.append((_invalid(path, value, "; ".join(value_errors)), values[value]))
    if errors:
        raise SelectorError(_aggregate([m for m, _ in errors]), position=errors[0][1])
    return Requirement(key, operator, tuple(ordered))


def parse(text: str) -> Selector:
    """Parse a label selector string exactly like apimachinery ``labels.Parse`` (v0.35).

    ``text`` is the annotation / ``kubectl -l`` form, e.g. ``zone=eu,!control-plane``.
    Empty or whitespace-only text gives the empty selector (matches everything).
    Raises ``SelectorError`` (a ``ValueError``) with an apimachinery-shaped message and the
    byte ``position`` of the first structural error; the validation errors of one requirement
    are aggregated. A non-string ``text`` (e.g. a YAML number) is a ``SelectorError`` too.
    See ``docs/reference/label-selectors.md`` for the full rules.
    """
    if not isinstance(text, str):
        raise SelectorError(f"a selector must be a string, not {type(text).__name__}")
    tokens = _lex(text.encode("utf-8", "surrogatepass"))
    return Selector(tuple(_Parser(tokens).requirements()))


def parse_cached(text: str) -> Selector:
    """``parse`` memoised by text (1,024 entries; ``Selector`` is immutable).

    Same contract as ``parse``; errors are not cached, so a bad text is re-parsed each time.
    """
    if not isinstance(text, str):
        return parse(text)
    return _parse_cached(text)


_parse_cached = functools.lru_cache(maxsize=1024)(parse)
