"""A deliberately small CEL subset for webhook ``matchConditions`` (KEP-3716).

Supported: ``true``/``false``/``null``, string and int literals, list literals, field access
rooted at ``object``, ``oldObject`` and ``request`` (``a.b``, ``a['b']``), ``has(a.b)``,
``==``, ``!=``, ``in``, ``!``, ``&&``, ``||`` and parentheses. Anything else is an
*evaluation error* (:class:`CelError`), which the admission chain handles per
``failurePolicy`` — never silently as true. As in CEL, selecting a missing field is an error
(``no such key``) and ``has()`` of a field under a missing parent is an error too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")|(?P<int>-?\d+)"
    r"|(?P<op>==|!=|&&|\|\||[!().\[\],])|(?P<id>[A-Za-z_][A-Za-z0-9_]*))"
)
ROOTS = ("object", "oldObject", "request")


class CelError(Exception):
    """The expression is outside the supported subset or failed to evaluate."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise CelError(f"unsupported expression at offset {pos}: {text[pos : pos + 20]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Eval:
    def __init__(self, text: str, env: Mapping[str, Any]) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.env = env

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise CelError("unexpected end of expression")
        tok = self.toks[self.i]
        if want is not None and tok[1] != want:
            raise CelError(f"expected {want!r}, found {tok[1]!r}")
        self.i += 1
        return tok

    def run(self) -> Any:
        value = self.or_()
        if self.i != len(self.toks):
            raise CelError(f"unsupported syntax near {self.toks[self.i][1]!r}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == "||":
            self.take()
            right = self.and_()
            value = _bool(value) or _bool(right)
        return value

    def and_(self) -> Any:
        value = self.unary()
        while self.peek() == "&&":
            self.take()
            right = self.unary()
            value = _bool(value) and _bool(right)
        return value

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not _bool(self.unary())
        left = self.primary()
        op = self.peek()
        if op in ("==", "!="):
            self.take()
            right = self.primary()
            return (left == right) == (op == "==")
        if op == "in":
            self.take()
            right = self.primary()
            if not isinstance(right, list | dict):
                raise CelError("'in' needs a list or map on the right")
            return left in right
        return left

    def primary(self) -> Any:
        kind, text = self.take()
        if kind == "str":
            return bytes(text[1:-1], "utf-8").decode("unicode_escape")
        if kind == "int":
            return int(text)
        if text == "(":
            value = self.or_()
            self.take(")")
            return value
        if text == "[":
            items: list[Any] = []
            while self.peek() != "]":
                items.append(self.primary())
                if self.peek() == ",":
                    self.take()
            self.take("]")
            return items
        if kind != "id":
            raise CelError(f"unexpected {text!r}")
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if text == "has":
            self.take("(")
            path = self.path(self.take()[1])
            self.take(")")
            parent = self.resolve(path[:-1])
            return isinstance(parent, Mapping) and path[-1] in parent
        return self.resolve(self.path(text))

    def path(self, root: str) -> list[str]:
        if root not in ROOTS:
            raise CelError(f"undeclared reference to {root!r} (supported: {', '.join(ROOTS)})")
        parts = [root]
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                kind, name = self.take()
                if kind != "id":
                    raise CelError(f"expected a field name, found {name!r}")
                parts.append(name)
            else:
                kind, name = self.take()
                if kind != "str":
                    raise CelError("only string map keys are supported")
                parts.append(name[1:-1])
                self.take("]")
        return parts

    def resolve(self, parts: list[str]) -> Any:
        value: Any = self.env
        for part in parts:
            if not isinstance(value, Mapping):
                raise CelError(f"no such key: {part}")
            if part not in value:
                raise CelError(f"no such key: {part}")
            value = value[part]
        return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise CelError(f"no matching overload: expected bool, got {type(value).__name__}")
    return value


def evaluate(expression: str, env: Mapping[str, Any]) -> bool:
    """Evaluate ``expression`` to a bool over ``env``; raises :class:`CelError`."""
    return _bool(_Eval(expression, env).run())
