"""The one place a node selector is applied to Nodes (pure; owned by :mod:`app.core.nodeipam`).

docs/design.md §1: there is exactly one implementation of node selection.
:class:`NodeIndex` is the Node snapshot :func:`app.core.nodeipam.select` works on. It memoises,
per :class:`~app.core.selector.Selector`, which of its Nodes the selector matches, so that
10,000 Services sharing a few selectors cost a few passes over 5,000 Nodes, not 10,000
(the reconciler keeps one index per Node snapshot: ``ClusterCache.node_index``). A plain
iterable of NodeViews handed to ``select`` (preview, admission) gets a throw-away index, so
both forms run the same code and give equal Selections.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterable, Sequence

from app.core.codes import SELECTOR_MISMATCH
from app.core.selector import DOUBLE_EQUALS, EQUALS, IN, Selector
from app.core.verdicts import NodeVerdict, new_verdict
from app.core.views import NodeView

MAX_MEMOISED_INDICES = 4_000_000
"""Bound on the memo of one index: the matching positions of all memoised selectors
together (4 bytes each, so at most 16 MB); beyond it the oldest selectors are dropped
(recomputed on their next use). A selective selector costs a few bytes, so thousands of
them fit; only selectors matching most of a large cluster compete for room."""
MAX_MEMOISED_SELECTORS = 4096
"""Bound on the number of selectors memoised by one index, whatever they match: a
selector matching no Node costs no positions but its key and entry (~700 bytes), so
without it distinct never-matching selectors (dry-run creates reach the webhook) would
pile up until the next Node change (docs/design.md §7.1). The oldest are dropped first."""
MAX_MEMOISED_REQUIREMENTS = 64
"""Selectors with more requirements are matched every time, never memoised: a key that
large would pin its requirements, and compiled matching costs them nothing per Node
(docs/design.md §6.1)."""
MAX_INDEXED_KEYS = 32
"""Label keys whose values an index maps to Node positions at most (the keys of the
``=``/``==``/``in`` requirements of the selectors it matched); beyond it, selectors on
other keys are matched against every Node, as before."""


MAX_SETS = 64
"""Pool node sets (:meth:`NodeIndex.within`) one index keeps (then it starts over)."""


class NodeIndex:
    """An immutable Node snapshot plus a thread-safe memo ``selector → matching positions``.

    ``nodes`` is the snapshot (tuple, in the order given; verdicts follow it). Build one per
    Node snapshot and share it between threads; never mutate the NodeViews it holds.
    """

    __slots__ = (
        "_by_address",
        "_by_label",
        "_by_name",
        "_lock",
        "_memo",
        "_memo_size",
        "_mismatch",
        "_sets",
        "nodes",
    )

    def __init__(self, nodes: Iterable[NodeView]) -> None:
        self.nodes: tuple[NodeView, ...] = tuple(nodes)
        self._memo: dict[Selector, array[int]] = {}
        self._memo_size = 0
        self._mismatch: tuple[NodeVerdict, ...] | None = None
        self._by_name: dict[str, tuple[int, ...]] | None = None
        self._by_label: dict[str, dict[str, array[int]]] = {}
        self._by_address: dict[str, str] | None = None
        self._sets: dict[Selector, bytes] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.nodes)

    def within(self, selector: Selector) -> bytes:
        """:meth:`matching` as a mask, one byte per position of :attr:`nodes` (1: the
        selector matches the Node; test with ``mask[i]``), memoised per selector: the
        nodes of a NodeAddressPool's ``spec.nodeSelector`` (docs/design.md §4.13), which
        every decision of the pool's Services intersects with. A mask of 5,000 Nodes is 5
        KB where a set of their positions was ~250 KB (bench/README.md §13). At most
        :data:`MAX_SETS` kept."""
        with self._lock:
            hit = self._sets.get(selector)
        if hit is not None:
            return hit
        mask = bytearray(len(self.nodes))
        for i in self.matching(selector):
            mask[i] = 1
        found = bytes(mask)
        with self._lock:
            if len(self._sets) >= MAX_SETS:
                self._sets.clear()
            self._sets[selector] = found
        return found

    def matching(self, selector: Selector | None) -> Sequence[int]:
        """Positions in :attr:`nodes` of the Nodes ``selector`` matches, ascending
        (``None``: no selector, every Node); memoised per selector.

        Label matching is apimachinery's ``labels.Selector.Matches``
        (:meth:`app.core.selector.Selector.matches`); docs/design.md §4.1.
        """
        if selector is None:
            return range(len(self.nodes))
        with self._lock:
            hit = self._memo.get(selector)
        if hit is not None:
            return hit
        matches = selector.matches
        nodes = self.nodes
        # A shared index (it has matched a selector before) narrows each further one to
        # the Nodes carrying a value one of its "="/"=="/"in" requirements asks for; every
        # Node the selector matches is among them, and each is still checked by matches().
        narrowed = self._narrowed(selector) if self._memo else None
        if narrowed is None:
            found = array("I", [i for i, node in enumerate(nodes) if matches(node.labels)])
        else:
            found = array("I", [i for i in narrowed if matches(nodes[i].labels)])
        if len(selector.requirements) > MAX_MEMOISED_REQUIREMENTS:
            return found
        with self._lock:
            if selector not in self._memo:
                self._memo[selector] = found
                self._memo_size += len(found)
                while len(self._memo) > 1 and (
                    self._memo_size > MAX_MEMOISED_INDICES
                    or len(self._memo) > MAX_MEMOISED_SELECTORS
                ):
                    self._memo_size -= len(self._memo.pop(next(iter(self._memo))))
        return found

    def _narrowed(self, selector: Selector) -> list[int] | None:
        """Ascending positions of the Nodes whose label satisfies the most selective
        ``=``/``==``/``in`` requirement of ``selector`` (a superset of its matches), or
        ``None`` when it has none (or its keys cannot be indexed any more)."""
        best: tuple[int, list[array[int]]] | None = None
        for requirement in selector.requirements:
            if requirement.operator not in (EQUALS, DOUBLE_EQUALS, IN):
                continue
            by_value = self._label_values(requirement.key)
            if by_value is None:
                continue
            lists = [by_value[v] for v in requirement.values if v in by_value]
            size = sum(len(found) for found in lists)
            if best is None or size < best[0]:
                best = (size, lists)
        if best is None:
            return None
        lists = best[1]
        # The values of one requirement are distinct, so the lists are disjoint.
        return list(lists[0]) if len(lists) == 1 else sorted(i for found in lists for i in found)

    def _label_values(self, key: str) -> dict[str, array[int]] | None:
        """``label value → ascending positions`` of the Nodes labelled ``key`` (built once
        per key, at most :data:`MAX_INDEXED_KEYS` keys), or ``None`` past that bound."""
        with self._lock:
            found = self._by_label.get(key)
            if found is not None or len(self._by_label) >= MAX_INDEXED_KEYS:
                return found
        built: dict[str, array[int]] = {}
        for i, node in enumerate(self.nodes):
            value = node.labels.get(key)
            if value is not None:
                positions = built.get(value)
                if positions is None:
                    positions = built[value] = array("I")
                positions.append(i)
        with self._lock:
            return self._by_label.setdefault(key, built)

    def positions(self, names: Iterable[str]) -> list[int]:
        """Positions in :attr:`nodes` of the Nodes named in ``names``, ascending (a name
        held by no Node is skipped; a name held by several Nodes, possible only in a plain
        list handed to ``select``, gives each). The name map is built once per index."""
        by_name = self._by_name
        if by_name is None:
            built: dict[str, list[int]] = {}
            for i, node in enumerate(self.nodes):
                built.setdefault(node.name, []).append(i)
            by_name = {name: tuple(found) for name, found in built.items()}
            self._by_name = by_name
        return sorted(i for name in names for i in by_name.get(name, ()))

    def node_of(self, address: str) -> str | None:
        """The name of the Node with ``address`` (canonical text) among its ExternalIPs
        or InternalIPs; ``None`` when no Node has it; the first Node in :attr:`nodes`
        order when several do. The map is built once per index (port ownership,
        docs/design.md §4.9, asks it of every address a conflict touches)."""
        by_address = self._by_address
        if by_address is None:
            by_address = {}
            for node in self.nodes:
                for _, _, ip in (*node.external_entries, *node.internal_entries):
                    by_address.setdefault(ip, node.name)
            self._by_address = by_address
        return by_address.get(address)

    def memoised(self) -> int:
        """How many selectors the memo holds now (at most :data:`MAX_MEMOISED_SELECTORS`)."""
        with self._lock:
            return len(self._memo)

    def mismatch_verdicts(self) -> tuple[NodeVerdict, ...]:
        """Every Node's ``SelectorMismatch`` verdict, in :attr:`nodes` order (built once):
        ``select`` copies it and overwrites the slots of the matching Nodes."""
        verdicts = self._mismatch
        if verdicts is None:
            verdicts = tuple(
                [
                    node.verdict_cache.get(SELECTOR_MISMATCH)
                    or new_verdict(node, SELECTOR_MISMATCH)
                    for node in self.nodes
                ]
            )
            self._mismatch = verdicts
        return verdicts


def node_index(nodes: Iterable[NodeView] | NodeIndex) -> NodeIndex:
    """``nodes`` itself when it already is a :class:`NodeIndex`, else a new one over it."""
    return nodes if isinstance(nodes, NodeIndex) else NodeIndex(nodes)
