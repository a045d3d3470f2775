"""Text helpers for user-facing messages (pure).

Every message a person reads (admission denial and warning, log line, Event note, preview
table row) quotes user input such as a node selector annotation, which may be up to the
256 KiB annotation limit of ``metadata.annotations``. :func:`elide` cuts such a *value* in
the middle, so the message around it, and the reason it gives, stays whole and readable.
"""

from __future__ import annotations

DEFAULT_LIMIT = 200
"""Characters of a quoted value kept in a message by default."""


def elide(value: str, limit: int = DEFAULT_LIMIT) -> str:
    """``value`` when ``len(value) <= limit``, else its head and tail around a marker.

    The exact form is ``value[:head] + "…(N characters)…" + value[-tail:]``, where ``N`` is
    the number of characters left out (decimal, no separators), ``head = ceil(keep / 2)``,
    ``tail = floor(keep / 2)`` and ``keep = max(0, limit - len("…(<len(value)> characters)…"))``;
    so the result is at most ``limit`` characters whenever ``limit`` is at least the length
    of the marker (about 20), and it never splits the marker. Lengths count Python
    characters (code points), not bytes.

    Args:
        value: any text.
        limit: most characters kept, >= 0.

    Raises:
        ValueError: ``limit`` is negative.
    """
    if limit < 0:
        raise ValueError(f"limit: Invalid value: {limit}: must be greater than or equal to 0")
    if len(value) <= limit:
        return value
    keep = max(0, limit - len(f"…({len(value)} characters)…"))
    head, tail = (keep + 1) // 2, keep // 2
    omitted = len(value) - head - tail
    return value[:head] + f"…({omitted} characters)…" + (value[-tail:] if tail else "")
