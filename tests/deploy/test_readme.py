"""deploy/README.md stays true to the manifests it documents."""

from __future__ import annotations

import re

from tests.deploy.render import DEPLOY, ROOT, WEBHOOK_CONFIGURATION, find, render

README = (DEPLOY / "README.md").read_text()


def section(title: str) -> str:
    """The text of the ``## title`` section."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"no section {title!r}"
    return match.group(1)


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
