"""Label and field selectors for list/watch and webhook ``namespaceSelector``/``objectSelector``.

Label selector strings are parsed by the product's own ``app.core.selector.parse`` (the
apimachinery ``labels.Parse`` grammar); a string that does not parse answers 400 like the
real server. Field selectors follow
``fields.ParseSelector`` (``a=b``, ``a==b``, ``a!=b``, comma = AND, ``\\`` escapes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from app.core.selector import SelectorError, parse
from tests.fakeapi.errors import ApiError, bad_request

Matcher = Callable[[Mapping[str, str]], bool]


def _requirement(key: str, op: str, values: list[str]) -> Matcher:
    if op in ("=", "==", "in"):
        return lambda labels: labels.get(key) in values
    if op in ("!=", "notin"):
        return lambda labels: labels.get(key) not in values
    if op == "exists":
        return lambda labels: key in labels
    if op == "!":
        return lambda labels: key not in labels
    bound = int(values[0])

    def compare(labels: Mapping[str, str]) -> bool:
        raw = labels.get(key)
        if raw is None or not re.fullmatch(r"-?\d+", raw):
            return False
        return int(raw) > bound if op == ">" else int(raw) < bound

    return compare


def parse_label_selector(text: str) -> Matcher:
    """Compile a label selector string with :func:`app.core.selector.parse` (``labels.Parse``).

    Raises :class:`ApiError` 400 with the parser's message when it does not parse.
    """
    try:
        selector = parse(text)
    except SelectorError as err:
        raise bad_request(str(err)) from None
    return selector.matches


def match_label_selector_object(selector: Mapping[str, Any] | None) -> Matcher:
    """Compile a ``metav1.LabelSelector`` object (``matchLabels`` + ``matchExpressions``).

    An absent or empty selector matches everything (webhook ``namespaceSelector`` rule).
    Raises :class:`ValueError` on an unknown operator.
    """
    if not selector:
        return lambda labels: True
    matchers: list[Matcher] = [
        _requirement(k, "=", [v]) for k, v in (selector.get("matchLabels") or {}).items()
    ]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        op = ops.get(expr.get("operator", ""))
        if op is None:
            raise ValueError(f"{expr.get('operator')!r} is not a valid label selector operator")
        matchers.append(_requirement(expr["key"], op, list(expr.get("values") or [])))
    return lambda labels: all(m(labels) for m in matchers)


def _field_value(obj: Mapping[str, Any], path: str, default: str = "") -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    if cur is None:
        return default
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, list):
        return ""  # not a selectable scalar (a Pod's status.podIPs): never set
    return str(cur)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, cur, i = [], "", 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            cur += text[i : i + 2]
            i += 2
            continue
        if text[i] == sep:
            parts.append(cur)
            cur = ""
        else:
            cur += text[i]
        i += 1
    parts.append(cur)
    return parts


def parse_field_selector(
    text: str,
    *,
    allowed: tuple[str, ...],
    aliases: tuple[tuple[str, str], ...] = (),
    defaults: tuple[tuple[str, str], ...] = (),
) -> Callable[[Mapping[str, Any]], bool]:
    """Compile a field selector over the fields ``allowed`` (plus ``metadata.name/namespace``);
    ``aliases`` rename labels first (a Pod's ``spec.host`` is ``spec.nodeName``), ``defaults``
    give the value of a field the object leaves out (a Pod's ``spec.hostNetwork``: ``false``).

    Raises :class:`ApiError` 400 ``field label not supported: x`` like the real server.
    """
    renamed, absent = dict(aliases), dict(defaults)
    tests: list[tuple[str, bool, str]] = []
    for term in _split_unescaped(text, ","):
        if not term.strip():
            continue
        m = re.match(r"^([^=!]+?)(==|=|!=)(.*)$", term)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        key, op, value = m.group(1).strip(), m.group(2), m.group(3)
        value = re.sub(r"\\(.)", r"\1", value)
        key = renamed.get(key, key)
        if key not in ("metadata.name", "metadata.namespace", *allowed):
            raise ApiError(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"field label not supported: {key}",
                    "reason": "BadRequest",
                    "code": 400,
                }
            )
        tests.append((key, op == "!=", value))
    return lambda obj: all(
        (_field_value(obj, k, absent.get(k, "")) == v) != neg for k, neg, v in tests
    )
