"""What the preview and settings tests share: ``dump`` (objects as a cluster dump file) and
the type of the fixture that writes one (``Write``)."""

from __future__ import annotations

from collections.abc import Callable

import yaml

Write = Callable[..., str]


def dump(*objects: object) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(objects)})
