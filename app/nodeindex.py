"""The one place a node selector is applied to Nodes (pure; owned by :mod:`app.nodeipam`).

DESIGN.md §1 and STYLE.md: there is exactly one implementation of node selection.
:class:`NodeIndex` is the Node snapshot :func:`app.nodeipam.select` works on. It memoises,
per :class:`~app.selector.Selector`, which of its Nodes the selector matches, so that
10,000 Services sharing a few selectors cost a few passes over 5,000 Nodes, not 10,000
(the reconciler keeps one index per Node snapshot: ``ClusterCache.node_index``). A plain
iterable of NodeViews handed to ``select`` (preview, admission) gets a throw-away index, so
both forms run the same code and give equal Selections.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.selector import Selector
from app.verdicts import NodeVerdict, new_verdict
from app.views import NodeView

MAX_MEMOISED_SELECTORS = 256
"""Bound on memoised selectors per index: each entry holds two tuples as long as the
snapshot (about 80 kB for 5,000 Nodes), so the memo stays under ~20 MB whatever the Services
use; beyond it the oldest entry is dropped (recomputed on its next use)."""


@dataclass(frozen=True, slots=True)
class Match:
    """The result of applying one selector to a :class:`NodeIndex`.

    ``indices``: positions (in ``NodeIndex.nodes``) of the matching Nodes, ascending.
    ``verdicts``: one slot per Node: its ``SelectorMismatch`` verdict, or ``None`` for a
    matching Node (``select`` fills those slots).
    """

    indices: Sequence[int]
    verdicts: tuple[NodeVerdict | None, ...]


class NodeIndex:
    """An immutable Node snapshot plus a thread-safe memo ``selector → Match``.

    ``nodes`` is the snapshot (tuple, in the order given; verdicts follow it). Build one per
    Node snapshot and share it between threads; never mutate the NodeViews it holds.
    """

    __slots__ = ("_lock", "_memo", "nodes")

    def __init__(self, nodes: Iterable[NodeView]) -> None:
        self.nodes: tuple[NodeView, ...] = tuple(nodes)
        self._memo: dict[Selector | None, Match] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.nodes)

    def match(self, selector: Selector | None) -> Match:
        """The Nodes ``selector`` matches (``None``: no selector, every Node), memoised.

        Label matching is apimachinery's ``labels.Selector.Matches``
        (:meth:`app.selector.Selector.matches`); DESIGN.md §4.1.
        """
        with self._lock:
            hit = self._memo.get(selector)
        if hit is not None:
            return hit
        nodes = self.nodes
        if selector is None:
            hit = Match(range(len(nodes)), (None,) * len(nodes))
        else:
            matches = selector.matches
            verdicts: list[NodeVerdict | None] = []
            indices: list[int] = []
            for i, node in enumerate(nodes):
                if matches(node.labels):
                    indices.append(i)
                    verdicts.append(None)
                else:
                    verdicts.append(
                        node.verdict_cache.get("SelectorMismatch")
                        or new_verdict(node, "SelectorMismatch")
                    )
            hit = Match(tuple(indices), tuple(verdicts))
        with self._lock:
            if len(self._memo) >= MAX_MEMOISED_SELECTORS:
                del self._memo[next(iter(self._memo))]
            self._memo[selector] = hit
        return hit


def node_index(nodes: Iterable[NodeView] | NodeIndex) -> NodeIndex:
    """``nodes`` itself when it already is a :class:`NodeIndex`, else a new one over it."""
    return nodes if isinstance(nodes, NodeIndex) else NodeIndex(nodes)
