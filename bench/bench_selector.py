"""Benchmark of the label-selector engine (``.venv/bin/python -m bench.bench_selector``).

Target: ``Selector.matches`` over 5,000 nodes well under 5 ms for simple selectors.
Prints, per selector, the median time to parse it (uncached and via ``parse_cached``) and to
match it against 5,000 node label sets, plus how many nodes matched.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial

from app.core.selector import Selector, parse, parse_cached

NODES = 5000
SELECTORS = (
    "",
    "pool=edge",
    "node-role.kubernetes.io/worker,!node-role.kubernetes.io/control-plane",
    "topology.kubernetes.io/zone in (eu-1a,eu-1b),pool!=core",
    "cores>8,cores<64",
    "a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8",
)


def make_label_sets(count: int = NODES) -> list[dict[str, str]]:
    """``count`` realistic node label sets (hostname, zone, pool, role, cores)."""
    label_sets = []
    for i in range(count):
        labels = {
            "kubernetes.io/hostname": f"node-{i}",
            "kubernetes.io/os": "linux",
            "topology.kubernetes.io/zone": f"eu-1{'abc'[i % 3]}",
            "pool": "edge" if i % 2 else "core",
            "cores": str(4 * (i % 32)),
        }
        labels[
            "node-role.kubernetes.io/control-plane" if i < 3 else "node-role.kubernetes.io/worker"
        ] = ""
        label_sets.append(labels)
    return label_sets


def median_ms(run: Callable[[], object], *, repeat: int = 30) -> float:
    """Median wall time of ``run()`` in milliseconds over ``repeat`` runs."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def match_all(selector: Selector, label_sets: list[dict[str, str]]) -> int:
    """How many of ``label_sets`` ``selector`` matches (the loop the core runs per Service)."""
    return sum(1 for labels in label_sets if selector.matches(labels))


def main() -> None:
    label_sets = make_label_sets()
    print(f"{'selector':72} {'parse ms':>9} {'cached ms':>9} {'match 5k ms':>11} {'matched':>7}")
    for text in SELECTORS:
        selector = parse(text)
        parse_ms = median_ms(partial(parse, text), repeat=200)
        cached_ms = median_ms(partial(parse_cached, text), repeat=200)
        match_ms = median_ms(partial(match_all, selector, label_sets))
        matched = match_all(selector, label_sets)
        shown = repr(text) if len(text) < 70 else repr(text[:64] + "...")
        print(f"{shown:72} {parse_ms:9.4f} {cached_ms:9.4f} {match_ms:11.3f} {matched:7}")


if __name__ == "__main__":
    main()
