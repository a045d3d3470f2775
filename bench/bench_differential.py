"""Cilium's own Node IPAM controller against ours on many generated clusters (issue 20):
``.venv/bin/python -m bench.bench_differential --clusters N``.

The suite's comparison (:mod:`tests.peers.cilium.differential`: two dual-stack real API
servers, Cilium's controller on one, ``serve`` on the other, ``preview`` on a dump) on
``N`` clusters of :mod:`tests.peers.cilium.clusters`, seeds ``--first-seed`` onwards,
modes alternating (``--mode`` picks one). Prints one line per cluster and, at the end,
the Services per rule (``identical``, each docs/design.md §4.8 rule, ``unexplained``),
what the real server rejected, wall time, machine and date. An unexplained difference is
shrunk and printed with its seed; the exit code is then 1.

Needs the binaries of ``python3 -m tests.controlplane build`` (kube-apiserver, etcd and
the Cilium peer).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path

from bench.procs import machine
from tests.peers.cilium.clusters import generate
from tests.peers.cilium.differential import RULES, ClusterResult, Differential, counts, report
from tests.peers.cilium.peer import MODES


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit code (1 on an unexplained difference)."""
    parser = argparse.ArgumentParser(prog="python -m bench.bench_differential")
    parser.add_argument("--clusters", type=int, default=20, help="how many clusters")
    parser.add_argument("--first-seed", type=int, default=1000, help="seed of the first cluster")
    parser.add_argument("--seeds", type=int, nargs="*", help="exactly these seeds instead")
    parser.add_argument("--mode", choices=MODES, help="only this --default-lb-service-ipam")
    parser.add_argument("--shrink-seconds", type=float, default=120.0)
    parser.add_argument(
        "--tally",
        nargs="+",
        metavar="LOG",
        help="run nothing: sum the per-cluster lines of earlier runs' output files",
    )
    args = parser.parse_args(argv)
    if args.tally:
        return tally(args.tally)
    seeds = args.seeds or list(range(args.first_seed, args.first_seed + args.clusters))
    runs = [(seed, args.mode or MODES[i % 2]) for i, seed in enumerate(seeds)]
    # One mode after the other: each switch restarts both controllers.
    runs.sort(key=lambda run: MODES.index(run[1]))
    started = time.monotonic()
    results: list[ClusterResult] = []
    rejected: Counter[str] = Counter()
    failures = 0
    print(f"bench_differential: {len(runs)} clusters; {machine()}", flush=True)
    with Differential() as diff:  # its own temporary directory, removed at the end
        for seed, mode in runs:
            result = diff.run(generate(seed), mode)
            results.append(result)
            for message in result.rejected.values():
                rejected[message.split(":", 1)[0][:120]] += 1
            per_rule = counts([result])
            print(
                f"seed {seed} {mode} (cilium {diff.version}): {len(result.outcomes)} Services"
                f" in {result.seconds:.1f} s; "
                + ", ".join(f"{k} {v}" for k, v in sorted(per_rule.items())),
                flush=True,
            )
            for outcome in result.unexplained()[:1]:
                failures += 1
                shrunk = diff.shrink(generate(seed), mode, outcome.key, budget=args.shrink_seconds)
                print(report(result, outcome, shrunk), flush=True)
    total = counts(results)
    wall = time.monotonic() - started
    print(f"\nServices per rule over {len(results)} clusters ({sum(total.values())} Services):")
    for rule in ["identical", *RULES, "unexplained"]:
        print(f"  {rule:24} {total.get(rule, 0):7}")
    if rejected:
        print("rejected by the real API server (objects not created):")
        for message, n in rejected.most_common():
            print(f"  {n:5}  {message}")
    print(f"wall {wall:.0f} s; {machine()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    return 1 if failures else 0


_LINE = re.compile(r"^seed (\d+) (\w+) \(cilium (\S+)\): (\d+) Services in [\d.]+ s; (.*)$")


def tally(paths: list[str]) -> int:
    """``--tally``: Services per rule summed over the ``seed ...`` lines of ``paths``
    (each seed and mode counted once); exit code 1 if any line counts ``unexplained``."""
    seen: dict[tuple[int, str], Counter[str]] = {}
    versions: set[str] = set()
    for path in paths:
        for line in Path(path).read_text().splitlines():
            match = _LINE.match(line)
            if match is None:
                continue
            seed, mode, version, _, rules = match.groups()
            versions.add(version)
            seen[int(seed), mode] = Counter(
                {name: int(n) for name, n in (part.rsplit(" ", 1) for part in rules.split(", "))}
            )
    total: Counter[str] = Counter()
    for counted in seen.values():
        total.update(counted)
    modes = Counter(mode for _, mode in seen)
    print(
        f"Services per rule over {len(seen)} clusters ({sum(total.values())} Services;"
        f" cilium {', '.join(sorted(versions))}; {dict(modes)}):"
    )
    for rule in ["identical", *RULES, "unexplained"]:
        print(f"  {rule:24} {total.get(rule, 0):7}")
    return 1 if total.get("unexplained") else 0


if __name__ == "__main__":
    sys.exit(main())
