"""The NodeAddressPool CRD (deploy/base/crd-nodeaddresspools.yaml) and the examples that
use it, as data for the deploy tests."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.render import DEPLOY, ROOT

CRD_FILE = DEPLOY / "base" / "crd-nodeaddresspools.yaml"
CHART_CRD_FILE = DEPLOY / "helm" / "node-ipam-lb" / "crds" / CRD_FILE.name
EXAMPLES = ROOT / "examples"


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition as the API server receives it (YAML anchors expanded)."""
    loaded: dict[str, Any] = yaml.safe_load(CRD_FILE.read_text())
    return loaded


def schema() -> dict[str, Any]:
    """``openAPIV3Schema`` of the one version."""
    (version,) = crd()["spec"]["versions"]
    found: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return found


def spec_schema() -> dict[str, Any]:
    """The schema of ``spec``."""
    found: dict[str, Any] = schema()["properties"]["spec"]
    return found


def leaves(node: Mapping[str, Any], path: str = "") -> Iterator[str]:
    """The paths of the fields a structural schema declares (``.ports[].port``), an atomic
    object (``x-kubernetes-map-type: atomic``: a LabelSelector) or a list of them counting
    as one field."""
    atomic = node.get("x-kubernetes-map-type") == "atomic"
    if node.get("type") == "object" and "properties" in node and not atomic:
        for name, sub in node["properties"].items():
            yield from leaves(sub, f"{path}.{name}")
        return
    items = node.get("items", {})
    if "properties" in items and items.get("x-kubernetes-map-type") != "atomic":
        yield from leaves(items, f"{path}[]")
        return
    yield path


def json_schema(node: Any) -> Any:
    """A structural schema as a JSON Schema (draft 7) that checks what the API server's
    schema checks, CEL rules aside: ``x-kubernetes-list-type: set`` as ``uniqueItems``,
    and unknown fields as errors (the API server prunes them; an example with one says
    something the controller never reads)."""
    if isinstance(node, list):
        return [json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: json_schema(value)
        for key, value in node.items()
        if not key.startswith("x-kubernetes-") and key not in ("format", "description")
    }
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if "properties" in node and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


def example_objects(kind: str | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every object in ``examples/**/*.yaml`` outside the kind-4node dump, with its
    file; only those of ``kind`` when given."""
    found = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        if "kind-4node" in path.parts:
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and (kind is None or doc["kind"] == kind):
                found.append((path, doc))
    return found
