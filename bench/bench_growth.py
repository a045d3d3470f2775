"""Growth of the cold start (issue 15): ``.venv/bin/python -m bench.bench_growth``.

The cold start of :mod:`bench.bench_cold_start` at several sizes, two managed Services per
Node (and a tenth as many unmanaged ones as managed): ``serve``'s CPU until quiet and its
peak RSS per size, printed as a table with the cost per Service, and drawn as a PNG
(``--plot``, matplotlib) so anyone can see whether the cost grows linearly. Every run still
checks every status and that no unmanaged Service was written.

``--sizes`` picks the Node counts (default 1000,5000,10000,20000; bench/README.md says
which were run on the 2-core machine).
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.bench_cold_start import run_cold_start
from bench.cluster import Scale
from bench.procs import machine

DEFAULT_SIZES = (1000, 5000, 10000, 20000)


@dataclass(frozen=True)
class Point:
    """One size: Nodes, managed Services, ``serve`` CPU until quiet (s), peak RSS (MB),
    and whether every status was right."""

    nodes: int
    services: int
    cpu: float
    rss_mb: float
    correct: bool


def scale_for(nodes: int) -> Scale:
    """Two managed Services per Node, one unmanaged per ten managed."""
    return Scale(nodes=nodes, managed=2 * nodes, unmanaged=max(1, nodes // 5))


def measure(nodes: int, workdir: Path, *, timeout: float = 1200.0) -> Point:
    """One cold start at ``nodes`` Nodes (logs in ``workdir``, created if missing)."""
    workdir.mkdir(parents=True, exist_ok=True)
    run = run_cold_start(scale=scale_for(nodes), workdir=workdir, timeout=timeout, log=False)
    try:
        return Point(
            nodes=nodes,
            services=len(run.expected),
            cpu=run.serve_cpu_quiet,
            rss_mb=run.peak_rss_mb,
            correct=not run.mismatched and run.unmanaged_written == 0,
        )
    finally:
        run.stop()


def table(points: list[Point]) -> str:
    """The figures, one row per size, with CPU per 1,000 Services."""
    lines = [
        f"  {'Nodes':>7} {'Services':>9} {'CPU s':>7} {'ms/Service':>11} {'RSS MB':>8}  statuses"
    ]
    for p in points:
        per = 1000 * p.cpu / p.services if p.services else 0.0
        ok = "all right" if p.correct else "WRONG"
        lines.append(
            f"  {p.nodes:7d} {p.services:9d} {p.cpu:7.2f} {per:11.3f} {p.rss_mb:8.1f}  {ok}"
        )
    return "\n".join(lines)


def plot(points: list[Point], out: Path) -> None:
    """CPU and peak RSS against Nodes, with the straight line through the first and last
    CPU point for reference, as a PNG at ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = [p.nodes for p in points]
    fig, (cpu_ax, rss_ax) = plt.subplots(1, 2, figsize=(10, 4))
    cpu_ax.plot(nodes, [p.cpu for p in points], "o-", label="serve CPU until quiet")
    if len(points) > 1:
        first, last = points[0], points[-1]
        slope = (last.cpu - first.cpu) / (last.nodes - first.nodes)
        line = [first.cpu + slope * (n - first.nodes) for n in nodes]
        cpu_ax.plot(nodes, line, "--", color="grey", label="linear (first to last)")
    cpu_ax.set_xlabel("Nodes (two managed Services each)")
    cpu_ax.set_ylabel("CPU seconds")
    cpu_ax.set_title("cold start CPU")
    cpu_ax.legend()
    rss_ax.plot(nodes, [p.rss_mb for p in points], "o-", color="tab:orange")
    rss_ax.set_xlabel("Nodes (two managed Services each)")
    rss_ax.set_ylabel("peak RSS (MB)")
    rss_ax.set_title("cold start peak RSS")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    """Run the sizes, print the table, draw the plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default=",".join(str(n) for n in DEFAULT_SIZES),
        help="comma-separated Node counts",
    )
    parser.add_argument("--plot", type=Path, default=Path("bench-growth.png"), help="PNG path")
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs here")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.sizes.split(",") if n.strip()]
    print(f"machine: {machine()}", flush=True)
    points = []
    with tempfile.TemporaryDirectory(prefix="bench-growth-") as tmp:
        root = args.workdir or Path(tmp)
        for nodes in sizes:
            points.append(measure(nodes, root / str(nodes)))
            print(f"  {nodes} Nodes done: {points[-1]}", flush=True)
    print("cold start growth (two managed Services per Node):")
    print(table(points))
    plot(points, args.plot)
    print(f"plot: {args.plot}")
    print(f"machine at the end: {machine()}")


if __name__ == "__main__":
    main()
