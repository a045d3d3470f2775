"""Seed files: kubectl dumps (a v1 List, multi-document YAML or JSON, or single objects)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def parse_documents(text: str, source: str) -> list[dict[str, Any]]:
    """Objects in ``text``; ``*List`` documents are flattened.

    Raises :class:`ValueError` naming ``source`` when a document is not an object.
    """
    objects: list[dict[str, Any]] = []
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as err:
        raise ValueError(f"{source}: not YAML/JSON: {err}") from None
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ValueError(f"{source}: a document is not an object")
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            objects.extend(doc["items"])
        else:
            objects.append(doc)
    return objects


def load_files(paths: list[str]) -> list[dict[str, Any]]:
    """All objects of the seed files, in order."""
    objects: list[dict[str, Any]] = []
    for path in paths:
        objects.extend(parse_documents(Path(path).read_text(), path))
    return objects
