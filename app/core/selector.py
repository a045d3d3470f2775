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

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
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
    _hash: int = field(init=False, repr=False, compare=False)

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
        object.__setattr__(self, "_hash", hash((self.key, self.operator, values)))

    def __hash__(self) -> int:
        # Computed once: a Selector of many requirements is hashed on every memo lookup.
        return self._hash

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

    Matching a selector of more than :data:`COMPILE_ABOVE` requirements uses a compiled
    form (docs/design.md §6.1): the requirements are folded per key into one check, so
    one Node costs at most about ``2 x len(labels)`` label lookups whatever the number of
    requirements (a selector is a conjunction; the result is apimachinery's ``Matches``).
    """

    requirements: tuple[Requirement, ...] = ()
    _hash: int = field(init=False, repr=False, compare=False)
    _compiled: _Compiled | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.requirements, key=attrgetter("key")))
        object.__setattr__(self, "requirements", ordered)
        object.__setattr__(self, "_hash", hash(ordered))
        compiled = _Compiled(ordered) if len(ordered) > COMPILE_ABOVE else None
        object.__setattr__(self, "_compiled", compiled)

    def __hash__(self) -> int:
        return self._hash

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True if every requirement matches ``labels``; the empty selector matches all."""
        compiled = self._compiled
        if compiled is not None:
            return compiled.matches(labels)
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


COMPILE_ABOVE = 8
"""Selectors with more requirements than this match through :class:`_Compiled`; below it
the plain loop over the requirements is as fast (and is the reference the compiled form
is tested against)."""


class _KeyCheck:
    """All requirements on one key, folded: a value check for a present label and whether
    an absent label passes (apimachinery ``Requirement.Matches`` for each, ANDed)."""

    __slots__ = ("absent_ok", "allowed", "forbidden", "greater", "less", "never")

    def __init__(self, requirements: list[Requirement]) -> None:
        allowed: frozenset[str] | None = None
        forbidden: set[str] = set()
        greater: list[int] = []
        less: list[int] = []
        never = False
        absent_ok = True
        for requirement in requirements:
            kind = requirement._kind
            if kind == _KIND_IN:
                values = requirement._value_set
                allowed = values if allowed is None else allowed & values
                absent_ok = False
            elif kind == _KIND_NOT_IN:
                forbidden |= requirement._value_set
            elif kind == _KIND_EXISTS:
                absent_ok = False
            elif kind == _KIND_ABSENT:
                never = True
            else:  # gt / lt: an absent label or an unparsable bound never matches
                absent_ok = False
                if requirement._bound is None:
                    never = True
                else:
                    (greater if kind == _KIND_GT else less).append(requirement._bound)
        self.absent_ok = absent_ok
        self.never = never
        self.allowed = allowed
        self.forbidden = frozenset(forbidden)
        self.greater = max(greater) if greater else None
        self.less = min(less) if less else None

    def present_ok(self, value: str) -> bool:
        if self.never or (self.allowed is not None and value not in self.allowed):
            return False
        if value in self.forbidden:
            return False
        if self.greater is None and self.less is None:
            return True
        number = _parse_int64(value)
        if number is None:
            return False
        return (self.greater is None or number > self.greater) and (
            self.less is None or number < self.less
        )


_SIMPLE_KINDS = frozenset({_KIND_IN, _KIND_EXISTS, _KIND_ABSENT})


def _never(_: str) -> bool:
    return False


class _Compiled:
    """A selector folded per key: ``required`` keys must be present, ``checks`` hold the
    value check of every key whose present value can fail; ``impossible`` when some key
    must be both present and absent."""

    __slots__ = ("checks", "impossible", "required")

    def __init__(self, requirements: tuple[Requirement, ...]) -> None:
        by_key: dict[str, list[Requirement]] = {}
        for requirement in dict.fromkeys(requirements):  # a conjunction: duplicates add nothing
            by_key.setdefault(requirement.key, []).append(requirement)
        required: list[str] = []
        checks: dict[str, Callable[[str], bool]] = {}
        impossible = False
        for key, group in by_key.items():
            if len(group) == 1 and group[0]._kind in _SIMPLE_KINDS:
                kind = group[0]._kind
                if kind == _KIND_ABSENT:
                    checks[key] = _never
                    continue
                required.append(key)
                if kind == _KIND_IN:
                    checks[key] = group[0]._value_set.__contains__
                continue
            check = _KeyCheck(group)
            if not check.absent_ok:
                required.append(key)
                impossible = impossible or check.never
            constrained = check.allowed is not None or check.forbidden
            if constrained or check.never or check.greater is not None or check.less is not None:
                checks[key] = check.present_ok
        self.required = tuple(required)
        self.checks = checks
        self.impossible = impossible

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.impossible:
            return False
        required = self.required
        size = len(labels)
        if len(required) > size:  # distinct keys: they cannot all be present
            return False
        for key in required:
            if key not in labels:
                return False
        checks = self.checks
        if len(checks) <= size:
            for key, check in checks.items():
                value = labels.get(key)
                if value is not None and not check(value):
                    return False
        else:
            for key, value in labels.items():
                found = checks.get(key)
                if found is not None and not found(value):
                    return False
        return True


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


def _lex(data: bytes, start: int = 0) -> list[_Token]:
    """Tokens of ``data`` from byte ``start`` up to and including the end token
    (apimachinery ``Lexer.Lex``)."""
    tokens: list[_Token] = []
    position, size = start, len(data)
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


def qualified_name_errors(name: str) -> list[str]:
    """Reasons ``name`` is not a qualified name (apimachinery ``IsQualifiedName``: an
    optional DNS subdomain prefix and ``/``, then a name of at most 63 characters); empty
    when valid. Label keys, annotation keys (lower-cased first, ``ValidateAnnotations``)
    and ``spec.loadBalancerClass`` (``validateLoadBalancerClassField``) are checked so."""
    return _label_key_errors(name)


def label_value_errors(value: str) -> list[str]:
    """Reasons ``value`` is not a label value (apimachinery ``IsValidLabelValue``: empty,
    or at most 63 characters of alphanumerics, ``-``, ``_`` and ``.``, alphanumeric at
    both ends); empty when valid."""
    return _label_value_errors(value)


def dns_subdomain_errors(name: str) -> list[str]:
    """Reasons ``name`` is not a DNS subdomain (apimachinery ``IsDNS1123Subdomain``: at
    most 253 characters of lowercase RFC 1123 labels joined by dots); empty when valid."""
    errors = []
    if len(name) > _PREFIX_MAX_BYTES:
        errors.append(_max_len_error(_PREFIX_MAX_BYTES))
    if _SUBDOMAIN_RE.fullmatch(name) is None:
        errors.append(_regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com"))
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

    Cost is linear in the text: a leading run of plain, valid requirements is read by
    :func:`_fast_prefix` (one regular expression per requirement, each distinct
    requirement text validated once), the rest by the token parser; both give the same
    requirements and errors (docs/design.md §6.1).
    """
    if not isinstance(text, str):
        raise SelectorError(f"a selector must be a string, not {type(text).__name__}")
    data = text.encode("utf-8", "surrogatepass")
    requirements, position, done = _fast_prefix(data)
    if not done:
        requirements.extend(_Parser(_lex(data, position)).requirements())
    return Selector(tuple(requirements))


# --- fast path for plain requirements ------------------------------------------------------
#
# A "plain" requirement uses only ASCII key/value bytes [A-Za-z0-9._/-] (a subset of the
# lexer's identifier bytes, so the identifier ends where the lexer's does) in one of the
# forms  !k | k | k<op>v | k<op> | k in (v,...) | k notin (v,...)  with op one of
# = == != < >. It must be followed by the end of the input, or by a comma whose next token
# is an identifier or "!" (not "!="): then the token parser, resuming after that comma,
# is in exactly the state it would have reached itself. Anything else (NUL, other bytes,
# empty set slots, an invalid key or value) stops the fast path before that requirement
# and the token parser reports it with the same message and byte position.

_WS = rb"[ \t\r\n]*"
_ID = rb"[A-Za-z0-9._/-]+"
_OPS = rb"==|=|!=|<|>"
_UNIT = (
    rb"!" + _WS + rb"(?P<absent>" + _ID + rb")"
    rb"|(?P<key>"
    + _ID
    + rb")(?:"
    + _WS
    + rb"(?P<op>"
    + _OPS
    + rb")"
    + _WS
    + rb"(?P<value>"
    + _ID
    + rb")?"
    rb"|[ \t\r\n]+(?P<set>in|notin)"
    + _WS
    + rb"\("
    + _WS
    + rb"(?P<values>"
    + _ID
    + rb"(?:"
    + _WS
    + rb","
    + _WS
    + _ID
    + rb")*)"
    + _WS
    + rb"\))?"
)
_NEXT_TOKEN = rb"(?=" + _WS + rb"(?:![^=]|!\Z|[^ \t\r\n=!(),<>\x00]))"
_SEPARATOR = _WS + rb"(?:," + _NEXT_TOKEN + rb"|(?P<end>\Z))"
_UNIT_RE = re.compile(_WS + rb"(?P<unit>" + _UNIT + rb")" + _SEPARATOR)
_SET_SPLIT_RE = re.compile(_WS + rb"," + _WS)


def _fast_prefix(data: bytes) -> tuple[list[Requirement], int, bool]:
    """The plain requirements at the start of ``data``: ``(requirements, next byte,
    whole input consumed)``, stopping before the first one that is not plain or not valid.
    Each distinct requirement text is validated and built once. One short regular
    expression match per requirement (not one over the whole text), so a long selector
    never holds the GIL for long."""
    requirements: list[Requirement] = []
    built: dict[bytes, Requirement] = {}
    position = 0
    while True:
        match = _UNIT_RE.match(data, position)
        if match is None:
            return requirements, position, False
        unit = match.group("unit")
        requirement = built.get(unit)
        if requirement is None:
            requirement = _plain_requirement(match)
            if requirement is None:
                return requirements, position, False
            built[unit] = requirement
        requirements.append(requirement)
        if match.group("end") is not None:
            return requirements, len(data), True
        position = match.end()


def _plain_requirement(match: re.Match[bytes]) -> Requirement | None:
    """The requirement of one fast-path match, or None when it is invalid (the token
    parser then reports the error with its exact message and position)."""
    absent = match.group("absent")
    key = (absent if absent is not None else match.group("key")).decode("ascii")
    if _VALID_KEY_RE.fullmatch(key) is None and _label_key_errors(key):
        return None
    if absent is not None:
        return _trusted(key, DOES_NOT_EXIST, ())
    operator_text, set_operator = match.group("op"), match.group("set")
    if set_operator is not None:
        operator = set_operator.decode("ascii")
        values = {v.decode("ascii"): 0 for v in _SET_SPLIT_RE.split(match.group("values"))}
    elif operator_text is not None:
        operator = _BINARY_OPERATORS[operator_text.decode("ascii")]
        value = (match.group("value") or b"").decode("ascii")
        if operator not in (GREATER_THAN, LESS_THAN) and _VALID_VALUE_RE.fullmatch(value):
            return _trusted(key, operator, (value,))
        values = {value: 0}
    else:
        return _trusted(key, EXISTS, ())
    if operator in (IN, NOT_IN) and all(_VALID_VALUE_RE.fullmatch(value) for value in values):
        return _trusted(key, operator, tuple(sorted(values)))
    try:
        return _new_requirement(key, operator, values)
    except SelectorError:
        return None


def _trusted(key: str, operator: str, values: tuple[str, ...]) -> Requirement:
    """``Requirement(key, operator, values)`` without its checks, for the fast path, which
    has already checked them (an operator of ``_KIND_BY_OPERATOR`` other than gt/lt, values
    sorted, distinct and as many as the operator needs): about 4x cheaper."""
    requirement = object.__new__(Requirement)
    setter = object.__setattr__
    setter(requirement, "key", key)
    setter(requirement, "operator", operator)
    setter(requirement, "values", values)
    setter(requirement, "_value_set", frozenset(values))
    setter(requirement, "_kind", _KIND_BY_OPERATOR[operator])
    setter(requirement, "_bound", None)
    setter(requirement, "_hash", hash((key, operator, values)))
    return requirement


# Shortcuts for the common case of the fast path (ASCII text, so bytes == characters):
# a full match means content.IsLabelKey / IsLabelValue find no error; no match means
# "ask them" (they then give the reasons).
_VALID_KEY_RE = re.compile(
    r"(?:(?=[a-z0-9.-]{1,253}/)" + _SUBDOMAIN_FMT + "/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_VALID_VALUE_RE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def parse_cached(text: str) -> Selector:
    """``parse`` memoised by text (Selectors are immutable); errors are not cached, so a
    bad text is re-parsed each time. Same contract as ``parse``.

    Bounded by entries (1,024) and by the total length of the cached texts
    (:data:`PARSE_CACHE_CHARS`): a few huge selectors cannot pin much memory.
    """
    if not isinstance(text, str):
        return parse(text)
    return _PARSE_CACHE.get(text)


PARSE_CACHE_ENTRIES = 1024
PARSE_CACHE_CHARS = 1024 * 1024
"""Total characters of the texts ``parse_cached`` keeps (a Selector costs a few to a few
dozen bytes per character of its text)."""


class _ParseCache:
    """Thread-safe LRU ``text -> Selector`` bounded by entries and total text length."""

    def __init__(self, *, max_entries: int, max_chars: int) -> None:
        self._entries: OrderedDict[str, Selector] = OrderedDict()
        self._chars = 0
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, text: str) -> Selector:
        with self._lock:
            hit = self._entries.get(text)
            if hit is not None:
                self._entries.move_to_end(text)
                return hit
        selector = parse(text)
        if len(text) > self._max_chars:
            return selector
        with self._lock:
            if text not in self._entries:
                self._entries[text] = selector
                self._chars += len(text)
                while len(self._entries) > self._max_entries or self._chars > self._max_chars:
                    old, _ = self._entries.popitem(last=False)
                    self._chars -= len(old)
        return selector


_PARSE_CACHE = _ParseCache(max_entries=PARSE_CACHE_ENTRIES, max_chars=PARSE_CACHE_CHARS)
