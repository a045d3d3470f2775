"""deploy/image/requirements.lock: the image's dependencies, pinned with hashes.

It must cover exactly the runtime dependencies of pyproject.toml, resolved (what
``pip install --require-hashes --no-deps`` in the Dockerfile installs is all the app
needs, and nothing else), with at least one sha256 per pin.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.render import ROOT

IMAGE = ROOT / "deploy" / "image"
# The image's interpreter: python:3.11-slim on linux x86_64 (deploy/image/lock.sh).
TARGET = {
    **default_environment(),
    "python_version": "3.11",
    "python_full_version": "3.11.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
    "extra": "",
}


def entries(path: Path) -> dict[str, tuple[Version, list[str], list[str]]]:
    """name -> (version, hashes, the packages its ``# via`` comment names) of a lock."""
    text = path.read_text()
    out: dict[str, tuple[Version, list[str], list[str]]] = {}
    blocks = re.split(r"^(?=[A-Za-z0-9])", text, flags=re.M)
    for block in blocks:
        match = re.match(r"([A-Za-z0-9._-]+)==(\S+)", block)
        if not match:
            continue
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", block)
        via_text = block.split("# via", 1)[1] if "# via" in block else ""
        via = [
            canonicalize_name(v)
            for v in re.findall(r"([A-Za-z0-9._-]+)(?: \(|\s*$)", via_text, re.M)
        ]
        out[canonicalize_name(match.group(1))] = (Version(match.group(2)), hashes, via)
    return out


def runtime_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


LOCK = entries(IMAGE / "requirements.lock")


def test_every_pin_has_a_sha256_hash() -> None:
    for lock in ("requirements.lock", "build-requirements.lock"):
        text = (IMAGE / lock).read_text()
        pins = re.findall(r"^\S+==\S+", text, re.M)
        assert pins, lock
        for name, (version, hashes, _) in entries(IMAGE / lock).items():
            assert hashes, f"{lock}: {name}=={version} has no hash"
        # Nothing but pins, hashes, comments and continuation lines.
        for line in text.splitlines():
            assert re.match(r"(\S+==\S+ \\$|    --hash=sha256:[0-9a-f]{64}( \\)?$|\s*#|$)", line), (
                line
            )


def test_every_runtime_dependency_is_pinned_within_its_range() -> None:
    for requirement in runtime_requirements():
        name = canonicalize_name(requirement.name)
        assert name in LOCK, f"{name} is a dependency in pyproject.toml but not in the lock"
        assert requirement.specifier.contains(LOCK[name][0], prereleases=True), name


def test_the_lock_holds_nothing_the_dependencies_do_not_pull_in() -> None:
    """Walk the resolver's ``# via`` annotations: every pin is reached from pyproject."""
    direct = {canonicalize_name(r.name) for r in runtime_requirements()}
    reached = set(direct)
    changed = True
    while changed:
        changed = False
        for name, (_, _, via) in LOCK.items():
            if name not in reached and any(v in reached for v in via):
                reached.add(name)
                changed = True
    assert set(LOCK) == reached, f"not reached from pyproject.toml: {set(LOCK) - reached}"


def test_each_locked_package_has_its_own_requirements_in_the_lock() -> None:
    """Closure check from the packages' own metadata, where the installed version (this
    virtualenv) is the locked one; others are covered by the ``# via`` walk above."""
    checked = 0
    for name, (version, _, _) in LOCK.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if Version(dist.version) != version:
            continue
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(TARGET):
                continue
            assert canonicalize_name(requirement.name) in LOCK, f"{name} needs {requirement}"
        checked += 1
    assert checked >= 5, "too few locked versions installed here to check any closure"
