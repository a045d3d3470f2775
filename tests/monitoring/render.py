"""Draw the Grafana dashboard (its JSON) as a PNG with matplotlib, from a Prometheus, without
a Grafana server: each panel at its ``gridPos``, each target's ``expr`` asked of the
Prometheus HTTP API (``query_range``), series named by the target's ``legendFormat``.
A stat panel shows each series' last value. A look at the layout and the queries on
real data, not Grafana's rendering.

The live test writes one when ``NODE_IPAM_DASHBOARD_PNG`` names a file
(tests/monitoring/test_prometheus_live.py).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx

from tests.monitoring.promql import grafana_to_promql

LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's ``{{label}}`` substitution (an empty template: the label set)."""
    if not template:
        return "{" + ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"
    return LEGEND.sub(lambda m: labels.get(m.group(1), ""), template)


def query_range(url: str, expr: str, start: float, end: float, step: float) -> list[Any]:
    """The ``result`` of ``GET /api/v1/query_range`` (a matrix); raises on an error."""
    answer = httpx.get(
        f"{url}/api/v1/query_range",
        params={"query": expr, "start": start, "end": end, "step": step},
        timeout=10,
    ).json()
    if answer["status"] != "success":
        raise RuntimeError(f"{expr}: {answer}")
    result: list[Any] = answer["data"]["result"]
    return result


def render(board: dict[str, Any], url: str, out: Path, *, seconds: float = 60) -> Path:
    """Draw ``board`` with the last ``seconds`` of data from the Prometheus at ``url`` into
    ``out`` (PNG); returns ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = time.time()
    start, step = end - seconds, max(seconds / 60, 1.0)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"])
    fig = plt.figure(figsize=(16, rows * 0.42))
    fig.suptitle(board["title"], fontsize=14)
    grid = fig.add_gridspec(rows, 24, hspace=2.5, wspace=1.5)
    for panel in board["panels"]:
        pos = panel["gridPos"]
        axes = fig.add_subplot(
            grid[pos["y"] + 1 : pos["y"] + pos["h"], pos["x"] : pos["x"] + pos["w"]]
        )
        axes.set_title(panel["title"], fontsize=9)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        lines: list[str] = []
        for target in panel.get("targets", []):
            expr = grafana_to_promql(target["expr"]).replace("[5m]", "[30s]")
            for series in query_range(url, expr, start, end, step):
                name = legend(target.get("legendFormat", ""), series["metric"])
                points = [(float(t) - end, float(v)) for t, v in series["values"]]
                if panel["type"] == "stat":
                    lines.append(f"{name}: {points[-1][1]:g} {unit}".strip())
                else:
                    axes.plot([p[0] for p in points], [p[1] for p in points], label=name)
        if panel["type"] == "stat":
            axes.axis("off")
            axes.text(0.5, 0.5, "\n".join(lines) or "no data", ha="center", va="center")
        else:
            axes.tick_params(labelsize=7)
            axes.set_xlabel(f"seconds before now ({unit})", fontsize=7)
            if axes.lines:
                axes.legend(fontsize=6, loc="upper left")
            else:
                axes.text(0.5, 0.5, "no data", ha="center", va="center", transform=axes.transAxes)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out
