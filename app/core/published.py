"""What the Lease holder publishes of itself for the live preview (docs/design.md §8).

The record Lease ``<leader-election-id>-node-health`` in the leader-election namespace
(:mod:`app.controller.healthrecord`) carries two annotations: the node-health decision
(:data:`app.core.nodehealth.HEALTH_ANNOTATION`, §4.11) and :data:`SETTINGS_ANNOTATION`,
the settings the holder decides with, as JSON ``{flag name: value}`` (the names of
``serve --help`` and of the Helm values ``settings.<name>``; only those a decision reads,
:data:`app.config.PUBLISHED_SETTINGS`). ``kubectl node-ipam preview`` reads both with one
GET, so its answer is the running controller's, not one made with its own defaults.

Bounded: the settings take at most :data:`MAX_SETTINGS_BYTES`, the health decision at
most 128 KiB, so the Lease stays well under the API server's 256 KiB total of annotations
(apimachinery ``ValidateAnnotationsSize``). A value that does not fit is left out, longest
first; the preview then names it as unknown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

RECORD_SUFFIX = "-node-health"
"""The record Lease's name is the leader-election Lease's name plus this."""
SETTINGS_ANNOTATION = "node-ipam-lb.io/effective-settings"
"""The record's annotation holding the Lease holder's effective settings (JSON object)."""
MAX_SETTINGS_BYTES = 32 * 1024
"""Largest encoded settings annotation (UTF-8 bytes)."""

Value = str | bool | int | float


def encode_settings(values: Mapping[str, Value]) -> str:
    """``values`` as the annotation's compact JSON, keys in name order; when that would
    exceed :data:`MAX_SETTINGS_BYTES`, the entries with the longest encoded values are
    left out one by one until it fits (a reader names them as unknown)."""
    kept = dict(sorted(values.items()))
    text = _dump(kept)
    while len(text.encode()) > MAX_SETTINGS_BYTES and kept:
        del kept[max(kept, key=lambda name: len(_dump(kept[name]).encode()))]
        text = _dump(kept)
    return text


def decode_settings(text: str) -> dict[str, Value]:
    """The published ``{flag name: value}``.

    Raises:
        ValueError: ``text`` is longer than :data:`MAX_SETTINGS_BYTES`, not JSON, not an
            object, or holds a value that is not a string, boolean or number (the message
            names the annotation and the key).
    """
    found = json_object(text, annotation=SETTINGS_ANNOTATION, max_bytes=MAX_SETTINGS_BYTES)
    for name, value in found.items():
        if not isinstance(value, str | bool | int | float):
            raise ValueError(
                f"{SETTINGS_ANNOTATION}: Invalid value: {name!r}: must be a string, boolean"
                f" or number, not {type(value).__name__}"
            )
    return found


def json_object(text: str, *, annotation: str, max_bytes: int) -> dict[Any, Any]:
    """The JSON object an annotation of the record holds.

    Raises:
        ValueError: ``text`` is longer than ``max_bytes`` (UTF-8), not JSON, or not an
            object (someone else wrote the annotation); the message names ``annotation``.
    """
    if len(text.encode()) > max_bytes:
        raise ValueError(f"{annotation}: Too long: must have at most {max_bytes} bytes")
    try:
        found = json.loads(text)
    except ValueError as err:
        raise ValueError(f"{annotation}: Invalid value: not JSON: {err}") from err
    if not isinstance(found, dict):
        raise ValueError(f"{annotation}: Invalid value: must be a JSON object")
    return found


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
