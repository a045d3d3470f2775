"""kube-apiserver's own request counters, read from its ``/metrics`` text, keyed like the
fake API's counters (``"patch services/status"``, ``"create events"``)."""

from __future__ import annotations

import re
from collections import Counter

VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
"""``apiserver_request_total`` verbs as the fake API's counters name them (the rest
lower-cased: ``get``, ``list``, ``watch``, ``apply``)."""
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def request_counts(metrics_text: str) -> Counter[str]:
    """``apiserver_request_total`` from a ``/metrics`` text, summed by verb, resource and
    subresource (``"patch services/status"``, ``"create events"``); requests with no
    resource (``/readyz``, ``/metrics``) are left out."""
    counts: Counter[str] = Counter()
    for line in metrics_text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        resource = labels.get("resource", "")
        if not resource:
            continue
        verb = VERBS.get(labels.get("verb", ""), labels.get("verb", "").lower())
        sub = labels.get("subresource", "")
        counts[f"{verb} {resource}/{sub}" if sub else f"{verb} {resource}"] += int(
            float(match["value"])
        )
    return counts
