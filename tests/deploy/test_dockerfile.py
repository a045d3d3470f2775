"""The Dockerfile follows the image rules (no container engine here: parsed, not built).

Parsed with dockerfile-parse, which follows Docker's own instruction syntax
(line continuations, JSON and shell forms, build ARG substitution).
"""

from __future__ import annotations

import fnmatch
import io
import json
import re
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from tests.deploy.render import ROOT, container, render

BUILD_TOOLS = re.compile(r"\b(apt-get|apk|gcc|g\+\+|make|build-essential|pip install)\b")


@pytest.fixture(scope="module")
def parser() -> DockerfileParser:
    dockerfile = DockerfileParser(fileobj=io.BytesIO((ROOT / "Dockerfile").read_bytes()))
    return dockerfile


def stages(parser: DockerfileParser) -> list[list[dict[str, Any]]]:
    """Instructions grouped by build stage (a new stage starts at every FROM)."""
    grouped: list[list[dict[str, Any]]] = []
    for instruction in parser.structure:
        if instruction["instruction"] == "FROM":
            grouped.append([])
        if grouped:
            grouped[-1].append(instruction)
    return grouped


def test_base_image_is_an_official_slim_python_image(parser: DockerfileParser) -> None:
    images = [parser.args.get(b.strip("${}"), b) for b in parser.parent_images]
    assert images, "no FROM"
    for image in images:
        assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image), image


def test_dependencies_install_from_the_lock_in_their_own_layer_before_the_code_is_copied(
    parser: DockerfileParser,
) -> None:
    build = stages(parser)[0]
    lines = [f"{i['instruction']} {i['value']}" for i in build]
    deps = next(
        n
        for n, line in enumerate(lines)
        if "requirements.lock" in line and re.search(r"\bpip\b.*\binstall\b", line)
    )
    code = next(n for n, line in enumerate(lines) if line.startswith("COPY app"))
    copied_before_deps = [line for line in lines[:deps] if line.startswith("COPY")]
    assert copied_before_deps == [
        "COPY deploy/image/requirements.lock deploy/image/build-requirements.lock ./"
    ]
    assert deps < code
    # Every pip install: only hash-checked locked files, or the app's own wheel without
    # dependencies; nothing is resolved or downloaded unchecked. What ships (/opt/venv) is
    # made without pip, so it holds nothing but the lock and the app.
    assert "python -m venv --without-pip /opt/venv" in " ".join(lines)
    installs = [
        part.strip()
        for i in build
        if i["instruction"] == "RUN"
        for part in i["value"].split("&&")
        if re.search(r"\bpip\b.*\b(install|wheel)\b", part)
    ]
    assert len(installs) == 4, installs
    for command in installs:
        assert "--no-deps" in command, command
        if " -r " in command:
            assert "--require-hashes" in command, command
        else:
            assert "--no-build-isolation" in command or "/tmp/dist/" in command, command


def test_final_stage_has_no_build_tools_and_runs_as_a_numeric_non_root_user(
    parser: DockerfileParser,
) -> None:
    final = stages(parser)[-1]
    assert len(stages(parser)) >= 2, "multi-stage build expected"
    for instruction in final:
        if instruction["instruction"] == "RUN":
            assert not BUILD_TOOLS.search(instruction["value"]), instruction["value"]
    users = [i["value"] for i in final if i["instruction"] == "USER"]
    assert users, "final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0, users[-1]
    assert not gid or (gid.isdigit() and int(gid) > 0)
    pod = render("deploy")
    security = next(o for o in pod if o["kind"] == "Deployment")["spec"]["template"]["spec"][
        "securityContext"
    ]
    assert security["runAsUser"] == int(uid)


def test_entrypoint_is_node_ipam_lb_serve_and_the_deployment_adds_no_command(
    parser: DockerfileParser,
) -> None:
    entrypoints = [i["value"] for i in stages(parser)[-1] if i["instruction"] == "ENTRYPOINT"]
    assert [json.loads(e) for e in entrypoints] == [["node-ipam-lb", "serve"]]
    c = container(render("deploy"))
    assert "command" not in c
    assert "args" not in c
    exposed = [i["value"] for i in stages(parser)[-1] if i["instruction"] == "EXPOSE"]
    assert exposed == [str(p["containerPort"]) for p in c["ports"]]


def test_build_context_holds_only_what_the_image_needs() -> None:
    rules = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def sent(path: str) -> bool:
        included = True
        for rule in rules:
            negate = rule.startswith("!")
            pattern = rule.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
                included = negate
        return included

    for needed in (
        "pyproject.toml",
        "README.md",
        "app/cli.py",
        "deploy/image/requirements.lock",
        "deploy/image/build-requirements.lock",
    ):
        assert sent(needed), needed
    for excluded in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "deploy/README.md"):
        assert not sent(excluded), excluded
