"""Seed files: kubectl dumps (a v1 List, multi-document YAML or JSON, or single objects)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

# libyaml's C loader is ~10x faster on large dumps; same safe semantics.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_documents(text: str, source: str) -> list[dict[str, Any]]:
    """Objects in ``text`` (JSON, or YAML with libyaml when available); ``*List`` documents
    are flattened.

    Raises :class:`ValueError` naming ``source`` when a document is not an object.
    """
    objects: list[dict[str, Any]] = []
    docs: list[Any]
    try:
        if text.lstrip().startswith("{"):
            docs = [json.loads(text)]
        else:
            docs = list(yaml.load_all(text, Loader=_LOADER))
    except (ValueError, yaml.YAMLError) as err:
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
