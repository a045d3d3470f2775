"""Streamed ``-o json`` / ``-o yaml`` output of ``node-ipam-lb preview`` (docs/design.md §8).

The document is ``{"items": [Selection.to_dict(), ...]}``: one item per Service, each
with a verdict per Node, so it grows as Services times Nodes (2,000 Services on 5,000 Nodes
are 10 million verdicts). It is written item by item, so memory is bounded by one item,
and the text of each verdict is rendered once: verdict objects are memoised per Node
(:mod:`app.core.verdicts`) and shared by every Service that reaches the same verdict, so the
writer caches their rendering by identity, and ingress entries (up to one per Node) by
value.

The bytes are those of ``json.dumps(doc, indent=2)`` and, for YAML, a document that
loads to the same value as ``yaml.safe_dump(doc, sort_keys=False)`` (libyaml's emitter
when available).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TextIO

import yaml

from app.core.nodeipam import NodeVerdict, Selection

_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _verdict_dict(v: NodeVerdict) -> dict[str, Any]:
    return {"name": v.name, "selected": v.selected, "code": v.code, "reason": v.reason}


def _frozen(value: Any) -> Any:
    """``value`` with its lists and mappings as tuples (an ingress entry's ``ports``), so
    it keys a dict."""
    if isinstance(value, Mapping):
        return tuple((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


class _Fragments:
    """Rendered text per list entry, rendered once per distinct entry: verdicts by identity
    (kept alive with their text, so an ``id`` is never reused), ingress entries by value."""

    def __init__(self, render: Callable[[Mapping[str, Any]], str]) -> None:
        self._render = render
        self._verdicts: dict[int, tuple[NodeVerdict, str]] = {}
        self._entries: dict[tuple[tuple[str, Any], ...], str] = {}

    def verdict(self, verdict: NodeVerdict) -> str:
        hit = self._verdicts.get(id(verdict))
        if hit is None:
            hit = self._verdicts[id(verdict)] = (verdict, self._render(_verdict_dict(verdict)))
        return hit[1]

    def entry(self, entry: Mapping[str, Any]) -> str:
        key = tuple((k, _frozen(v)) for k, v in entry.items())
        text = self._entries.get(key)
        if text is None:
            text = self._entries[key] = self._render(dict(entry))
        return text

    def segments(self, sel: Selection) -> Iterator[tuple[str, Any, list[str] | None]]:
        """``(key, value, None)`` for plain fields and ``(key, None, fragments)`` for the
        non-empty ``ingress``/``nodes`` lists, in ``sel.to_dict()`` key order; the
        per-node dicts of ``to_dict`` are never built."""
        slim = replace(sel, nodes=(), ingress=None if sel.ingress is None else ())
        for key, value in slim.to_dict().items():
            if key == "nodes" and sel.nodes:
                yield key, None, [self.verdict(v) for v in sel.nodes]
            elif key == "ingress" and sel.ingress:
                yield key, None, [self.entry(e) for e in sel.ingress]
            else:
                yield key, value, None


def _indent(text: str, spaces: int) -> str:
    """Indent every line but the first (JSON strings never hold a raw newline)."""
    return text.replace("\n", "\n" + " " * spaces)


def write_json(selections: Iterable[Selection], out: TextIO) -> None:
    """Write ``json.dumps({"items": [...]}, indent=2)`` (same bytes), item by item."""
    fragments = _Fragments(lambda d: "        " + _indent(json.dumps(d, indent=2), 8))
    first = True
    for sel in selections:
        out.write('{\n  "items": [\n' if first else ",\n")
        first = False
        fields = []
        for key, value, listed in fragments.segments(sel):
            if listed is None:
                fields.append(f'      "{key}": ' + _indent(json.dumps(value, indent=2), 6))
            else:
                fields.append(f'      "{key}": [\n' + ",\n".join(listed) + "\n      ]")
        out.write("    {\n" + ",\n".join(fields) + "\n    }")
    out.write('{\n  "items": []\n}\n' if first else "\n  ]\n}\n")


def _yaml(value: Any) -> str:
    text: str = yaml.dump(
        value, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000
    )
    return text


def _shift(text: str, spaces: int) -> str:
    """Indent every line of block YAML ``text`` by ``spaces``."""
    pad = " " * spaces
    return "".join(pad + line for line in text.splitlines(keepends=True))


def write_yaml(selections: Iterable[Selection], out: TextIO) -> None:
    """Write ``items:`` and one block-sequence entry per Selection, item by item."""
    fragments = _Fragments(lambda d: _shift(_yaml([d]), 2))
    first = True
    for sel in selections:
        if first:
            out.write("items:\n")
            first = False
        run: dict[str, Any] = {}
        started = False
        for key, value, listed in fragments.segments(sel):
            if listed is None:
                run[key] = value
                continue
            if run:  # the plain fields so far; the first ones open the list entry ("- ")
                out.write(_shift(_yaml(run), 2) if started else _yaml([run]))
                started, run = True, {}
            out.write(f"  {key}:\n" + "".join(listed))
            started = True
        if run:
            out.write(_shift(_yaml(run), 2) if started else _yaml([run]))
    if first:
        out.write("items: []\n")
