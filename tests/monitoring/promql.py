"""The metric names a PromQL expression reads, and the names a ``/metrics`` text offers.

Parsing is ``promql-parser`` (Python bindings of GreptimeDB's Rust PromQL parser, which
follows Prometheus' grammar); Grafana's variables are replaced first (:func:`grafana_to_promql`).
"""

from __future__ import annotations

from typing import Any

import promql_parser
from prometheus_client.parser import text_string_to_metric_families

GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$job": ".*"}
"""What a dashboard's variables stand for when its queries are parsed outside Grafana."""


def grafana_to_promql(expr: str) -> str:
    """``expr`` with the dashboard's Grafana variables replaced by plain values."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def metric_names(expr: str) -> set[str]:
    """Every metric name a vector selector of ``expr`` selects (``rate(a_total[5m]) / b``:
    ``{"a_total", "b"}``). Raises ``ValueError`` when ``expr`` does not parse or selects a
    series without a metric name."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if not node.name:
                raise ValueError(f"{expr!r}: a selector without a metric name: {node}")
            names.add(node.name)
            return
        if isinstance(node, promql_parser.MatrixSelector):
            walk(node.vector_selector)
            return
        if isinstance(node, promql_parser.Call):
            for arg in node.args:
                walk(arg)
            return
        for attribute in ("lhs", "rhs", "expr", "param"):
            child = getattr(node, attribute, None)
            if child is not None and not isinstance(child, (int, float, str)):
                walk(child)

    walk(promql_parser.parse(expr))
    return names


def exposed_names(text: str) -> set[str]:
    """The series names a Prometheus text exposition offers: each family's samples, and
    for a family without samples yet the names its type gives it (counter ``_total``,
    histogram ``_bucket``/``_sum``/``_count``, gauge its name)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(sample.name for sample in family.samples)
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
    return names
