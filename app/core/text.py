"""Cutting long values for people to read (docs/design.md §5): keep both ends, drop the middle.

Every user-facing message that quotes a value the user wrote (an admission denial, a
warning, a log line, an Event note, a preview table row) must stay readable and keep its
*reason* whole, however long the value is: a 200 KB selector must not turn a denial into
200 KB of text, nor push the reason past an API limit such as the Event note's 1,024
bytes. :func:`elide` cuts one value in the middle, keeping its start and end (where the
difference between two long values usually shows) with a marker that says how much was
left out; :func:`elide_bytes` does the same to fit a limit in UTF-8 bytes, which is how
kube-apiserver measures (Go ``len``). Pure functions, no I/O.
"""

from __future__ import annotations

ELLIPSIS = "…"
DEFAULT_LIMIT = 200
"""Characters of a quoted value kept in a message by default."""


def _marker(omitted: int, unit: str) -> str:
    return f"{ELLIPSIS}({omitted} {unit}){ELLIPSIS}"


def elide(value: str, limit: int = DEFAULT_LIMIT) -> str:
    """``value`` unchanged when it has at most ``limit`` characters, else its head and tail
    around a marker, the whole at most ``limit`` characters.

    E.g. ``elide("a" * 300, 40)`` is ``"aaaaaaaaaaa…(278 characters)…aaaaaaaaaaa"`` (the
    count is of the characters of ``value`` that are not shown). The head gets the extra
    character when the room is odd. Characters are Python ``str`` code points.

    Args:
        value: any text.
        limit: the most characters the result may have, at least 1.

    Returns:
        The text to show. When ``limit`` is too small for a marker, the plain head of
        ``value`` cut to ``limit`` characters.

    Raises:
        ValueError: ``limit`` is below 1.
    """
    if limit < 1:
        raise ValueError(f"limit: must be at least 1, not {limit}")
    if len(value) <= limit:
        return value
    # The marker's length depends on the count it prints; the count is at most len(value).
    room = limit - len(_marker(len(value), "characters"))
    if room < 2:
        return value[:limit]
    head = (room + 1) // 2
    tail = room - head
    omitted = len(value) - head - tail
    return value[:head] + _marker(omitted, "characters") + (value[-tail:] if tail else "")


def elide_bytes(value: str, limit: int) -> str:
    """``value`` unchanged when its UTF-8 encoding has at most ``limit`` bytes, else its
    head and tail (cut at character boundaries) around a marker, the whole encoding at
    most ``limit`` bytes.

    For API fields limited in bytes: kube-apiserver's Event ``note`` (``NoteLengthLimit``
    1,024, ``k8s.io/kubernetes/pkg/apis/core/validation/events.go``) measures Go's
    ``len``, bytes, so 2,000 ``ü`` (2 bytes each) do not fit. A lone surrogate (not
    encodable) counts and is sent as ``?``.

    Args:
        value: any text.
        limit: the most UTF-8 bytes of the result, at least 1.

    Returns:
        The text to send; when ``limit`` is too small for a marker, the head of ``value``
        cut to ``limit`` bytes at a character boundary.

    Raises:
        ValueError: ``limit`` is below 1.
    """
    if limit < 1:
        raise ValueError(f"limit: must be at least 1, not {limit}")
    data = value.encode("utf-8", "replace")
    if len(data) <= limit:
        return data.decode("utf-8")
    room = limit - len(_marker(len(data), "bytes").encode())
    if room < 2:
        return data[:limit].decode("utf-8", "ignore")
    head = data[: (room + 1) // 2].decode("utf-8", "ignore")
    tail_bytes = data[len(data) - (room - (room + 1) // 2) :]
    tail = tail_bytes.decode("utf-8", "ignore")
    omitted = len(data) - len(head.encode()) - len(tail.encode())
    return head + _marker(omitted, "bytes") + tail
