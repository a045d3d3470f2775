"""deploy/README.md stays true to the manifests it documents."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from app import __version__
from app.config import Settings
from tests.deploy.readme import README, code_blocks, section
from tests.deploy.render import (
    DEPLOY,
    ROOT,
    WEBHOOK_CONFIGURATION,
    container,
    env,
    find,
    render,
)
from tests.kubectl import kubectl


def test_every_path_it_names_exists() -> None:
    paths = set(re.findall(r"`((?:deploy|tests)/[\w./-]+?)/?`", README))
    assert paths, "no paths found"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing


def test_uninstall_removes_both_webhooks_before_the_pods_that_serve_them() -> None:
    commands = [
        line.strip()
        for line in section("Uninstall").splitlines()
        if line.strip().startswith("kubectl delete")
    ]
    objects = render("deploy")
    webhooks = []
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        name = find(objects, kind, WEBHOOK_CONFIGURATION)["metadata"]["name"]
        webhooks.append(f"kubectl delete {kind.lower()} {name}")
    assert commands[:2] == webhooks
    assert commands[2].startswith("kubectl delete -k deploy/")


def test_migration_turns_off_cilium_node_ipam_by_its_flag_name() -> None:
    migration = section("Migrating from Cilium's Node IPAM")
    assert '"enable-node-ipam":"false"' in migration
    assert "rollout restart deployment/cilium-operator" in migration


def overlay_example() -> str:
    """The ``my-overlay/kustomization.yaml`` block the README shows, verbatim."""
    (block,) = [b for b in code_blocks(README, "yaml") if "# my-overlay/kustomization.yaml" in b]
    return block


def render_overlay(tmp_path: Path, text: str) -> list[dict[str, Any]]:
    """Render ``text`` as ``my-overlay/kustomization.yaml`` next to a ``deploy`` directory
    (a symbolic link to ours), where the README's ``../deploy/base`` points."""
    (tmp_path / "deploy").symlink_to(DEPLOY, target_is_directory=True)
    (tmp_path / "my-overlay").mkdir()
    (tmp_path / "my-overlay" / "kustomization.yaml").write_text(text)
    result = subprocess.run(
        [kubectl(), "kustomize", str(tmp_path / "my-overlay")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_the_overlay_example_points_the_deployment_at_your_registry(tmp_path: Path) -> None:
    objects = render_overlay(tmp_path, overlay_example())
    # newName alone keeps the release tag that deploy/base sets.
    assert container(objects)["image"] == f"registry.example.org/node-ipam-lb:{__version__}"
    # ... and the components it lists took effect.
    assert env(objects)["NODE_IPAM_DEFAULT_LB_SERVICE_IPAM"] == "nodeipam"
    assert "NODE_IPAM_CERT_SECRET_NAME" not in env(objects)


def test_the_overlay_example_with_new_tag_uncommented_replaces_the_tag(tmp_path: Path) -> None:
    text = overlay_example()
    commented = re.search(r"^( *)# (newTag: \S+)", text, re.M)
    assert commented, "the example shows newTag (commented out)"
    text = text.replace(commented.group(0), commented.group(1) + commented.group(2))
    tag = commented.group(2).split()[1]
    assert container(render_overlay(tmp_path, text))["image"] == (
        f"registry.example.org/node-ipam-lb:{tag}"
    )


def test_every_helm_settings_example_is_a_value_serve_accepts() -> None:
    # e.g. --set-string 'settings.reserved-port-exceptions=kube-system/bastion:22'
    examples = re.findall(r"--set(?:-string)? '?settings\.([a-z-]+)=([^'\s`]+)", README)
    names = {name for name, _ in examples}
    assert {"ip-mode", "reserved-port-exceptions", "allowed-namespaces"} <= names
    for name, value in examples:
        field = name.replace("-", "_")
        assert field in Settings.model_fields, name
        Settings(**{field: value.replace("\\,", ",")}).selection()  # helm unescapes "\,"
