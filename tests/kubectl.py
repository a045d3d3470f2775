"""kubectl for the tests that drive it: its path, or a skip with the reason.

README.md lists kubectl as a prerequisite of the test suite. Without it on ``PATH`` those
tests are skipped with a reason rather than failing with ``FileNotFoundError``, except
where kubectl is required: in CI (``CI`` set to ``true`` or ``1``, as ``.ci/run`` and
most CI systems do) or with ``NODE_IPAM_REQUIRE_KUBECTL=1``, where its absence fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

import pytest

MISSING = "kubectl is not on PATH (https://kubernetes.io/docs/tasks/tools/)"


def required(environ: Mapping[str, str] | None = None) -> bool:
    """True when a missing kubectl must fail the test rather than skip it."""
    environ = os.environ if environ is None else environ
    return (
        environ.get("CI", "").lower() in ("true", "1")
        or environ.get("NODE_IPAM_REQUIRE_KUBECTL") == "1"
    )


def kubectl() -> str:
    """The path of kubectl; skips the calling test when there is none, or fails it when
    :func:`required`."""
    path = shutil.which("kubectl")
    if path is not None:
        return path
    if required():
        pytest.fail(f"{MISSING}; required here (CI or NODE_IPAM_REQUIRE_KUBECTL=1)", pytrace=False)
    pytest.skip(MISSING)
