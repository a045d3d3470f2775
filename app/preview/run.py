"""``node-ipam-lb preview``: run the selection core offline on a cluster dump (docs/design.md §8).

Output formats: ``table`` (like ``kubectl get svc``: NAMESPACE, NAME, CLASS, EXTERNAL-IP,
REASON; warnings go to stderr as ``Warning: ...`` lines, like kubectl's), ``json`` and
``yaml`` (``{"items": [Selection.to_dict(), ...]}``, streamed item by item by
:mod:`app.preview.output`).

Exit codes: 0 every Service previewed; 1 previewed, but at least one Service has an
``error`` (malformed selector annotation: the controller would not write its status);
2 unusable input or settings (one ``error: ...`` line on stderr naming the file and
object, nothing on stdout).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from app.core.dump import DumpError, DumpViews, load_views
from app.core.nodeipam import Selection, select
from app.core.options import SelectionSettings
from app.core.views import EndpointSliceView
from app.preview.output import write_json, write_yaml

OUTPUT_FORMATS = ("table", "json", "yaml")
EXIT_OK, EXIT_SERVICE_ERROR, EXIT_UNUSABLE = 0, 1, 2


def preview_dump(
    views: DumpViews, *, settings: SelectionSettings, now: float
) -> Iterator[Selection]:
    """One :class:`Selection` per Service of ``views``, in namespace/name order, computed
    as it is consumed (a 5,000-node Selection holds 5,000 verdicts)."""
    by_service: dict[tuple[str, str | None], list[EndpointSliceView]] = defaultdict(list)
    for s in views.endpoint_slices:
        by_service[s.namespace, s.service_name].append(s)
    for svc in views.services:
        yield select(
            service=svc,
            nodes=views.nodes,
            endpoint_slices=by_service.get((svc.namespace, svc.name), []),
            settings=settings,
            now=now,
        )


def _external_ip(sel: Selection) -> str:
    if not sel.managed:
        return "<not managed>"
    if sel.ingress is None:
        return "<error>"
    return ",".join(e["ip"] for e in sel.ingress) or "<pending>"


def format_table(selections: Sequence[Selection], classes: Sequence[str | None]) -> str:
    """``kubectl get svc``-style table; REASON is filled only when there is no IP to show."""
    rows = [("NAMESPACE", "NAME", "CLASS", "EXTERNAL-IP", "REASON")]
    for sel, cls in zip(selections, classes, strict=True):
        reason = "" if sel.ingress else (sel.error or sel.reason)
        rows.append((sel.namespace, sel.name, cls or "<none>", _external_ip(sel), reason))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(r, [*widths, 0], strict=True)).rstrip()
        for r in rows
    )


def run_preview(
    *,
    paths: Sequence[str],
    output: str,
    settings: dict[str, Any],
    stdout: TextIO,
    stderr: TextIO,
    now: float | None = None,
) -> int:
    """Read ``paths``, preview every Service, print in ``output`` format; return the exit code.

    ``settings`` are :class:`SelectionSettings` keyword arguments (validated here).
    Never raises for bad input: errors are one ``error: ...`` line on ``stderr``.
    """
    if output not in OUTPUT_FORMATS:
        print(
            f"error: --output: Unsupported value: {output!r}: supported values:"
            f" {', '.join(OUTPUT_FORMATS)}",
            file=stderr,
        )
        return EXIT_UNUSABLE
    try:
        selection_settings = SelectionSettings(**settings)
        views = load_views(
            paths, match_node_labels_annotation=selection_settings.match_node_labels_annotation
        )
    except (DumpError, ValueError) as err:
        print(f"error: {err}", file=stderr)
        return EXIT_UNUSABLE
    selections = preview_dump(
        views, settings=selection_settings, now=time.time() if now is None else now
    )
    if output == "table":
        listed = list(selections)
        classes = [svc.load_balancer_class for svc in views.services]
        print(format_table(listed, classes), file=stdout)
        for sel in listed:
            for warning in sel.warnings:
                print(f"Warning: {sel.namespace}/{sel.name}: {warning}", file=stderr)
        return EXIT_SERVICE_ERROR if any(s.error for s in listed) else EXIT_OK
    failed = False

    def tracked() -> Iterator[Selection]:
        nonlocal failed
        for sel in selections:
            failed = failed or bool(sel.error)
            yield sel

    (write_json if output == "json" else write_yaml)(tracked(), stdout)
    return EXIT_SERVICE_ERROR if failed else EXIT_OK
