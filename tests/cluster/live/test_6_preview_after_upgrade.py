"""``kubectl node-ipam preview`` tells the truth about the running controller (issue 37
item 6; docs/design.md §8): after ``helm upgrade`` changes a setting, the live preview's
answer equals the status the controller wrote, for every Service of our class.

Before, the live preview decided with its own defaults: after
``--set-string settings.allowed-namespaces=traffic`` it still gave team-b's Service two
addresses (``CHANGE yes``) while the controller had made it ``<pending>``
(``NamespaceNotAllowed``). The release is left as it was found: the setting is removed by
a second upgrade and the namespace deleted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.cluster.helpers import (
    APP,
    CLASS,
    NAMESPACE,
    apply,
    figure,
    ingress_of,
    kubectl_json,
    namespaces,
    our_service,
)
from tests.cluster.images import ROOT
from tests.cluster.release import ROLLING_TIMEOUT, helm_upgrade
from tests.support.waiting import wait_for

TEAM_B = "team-b"
TEAM_B_PORT = 8093
RECORD = "node-ipam-lb-node-health"
SETTINGS_ANNOTATION = "node-ipam-lb.io/effective-settings"


def live_preview(cluster: Cluster, *args: str) -> tuple[dict[tuple[str, str], dict[str, Any]], str]:
    """``kubectl node-ipam preview -A -o json [args]`` as a user runs it (this repository's
    CLI, the cluster's admin kubeconfig): the items by (namespace, name), and stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "preview", "-A", "-o", "json",
         "--kubeconfig", str(cluster.kubeconfig_path), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    items = json.loads(done.stdout)["items"]
    return {(i["namespace"], i["name"]): i for i in items}, done.stderr


def canonical(entries: list[dict[str, Any]] | None) -> list[str]:
    """An ingress list compared as the reconciler compares it: every entry's ip, ipMode
    and ports, in any order."""
    return sorted(
        json.dumps({**e, "ports": sorted(e.get("ports") or [], key=json.dumps)}, sort_keys=True)
        for e in entries or []
    )


def stored_ingress(cluster: Cluster) -> dict[tuple[str, str], list[str]]:
    """Every Service of our class, all namespaces: its stored ingress, canonical."""
    return {
        (s["metadata"]["namespace"], s["metadata"]["name"]): canonical(
            (s.get("status") or {}).get("loadBalancer", {}).get("ingress")
        )
        for s in kubectl_json(cluster, "get", "services", "-A")["items"]
        if s["spec"].get("loadBalancerClass") == CLASS
    }


def disagreements(cluster: Cluster) -> dict[str, Any]:
    """Where the live preview's answer differs from the stored status (empty: it agrees on
    every Service of our class), and the Warning lines it printed."""
    stored = stored_ingress(cluster)
    items, stderr = live_preview(cluster)
    managed = {key for key, item in items.items() if item["managed"]}
    found: dict[str, Any] = {}
    if managed != set(stored):
        found["managed"] = {"preview": sorted(managed), "ours": sorted(stored)}
    for key in sorted(managed & set(stored)):
        if canonical(items[key]["ingress"]) != stored[key]:
            found["/".join(key)] = {
                "preview": items[key]["ingress"],
                "code": items[key]["code"],
                "stored": stored[key],
            }
    warnings = [line for line in stderr.splitlines() if line.startswith("Warning:")]
    if warnings:
        found["warnings"] = warnings
    return found


class Agreement:
    """A check for ``wait_for``: true when :func:`disagreements` finds none; :meth:`why`
    says what the last call found."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.last: dict[str, Any] = {}

    def __call__(self) -> bool:
        self.last = disagreements(self.cluster)
        return not self.last

    def why(self) -> str:
        return json.dumps(self.last, indent=1)


def published(cluster: Cluster) -> dict[str, Any]:
    lease = kubectl_json(cluster, "-n", NAMESPACE, "get", "lease", RECORD)
    text = (lease["metadata"].get("annotations") or {}).get(SETTINGS_ANNOTATION)
    return {} if text is None else dict(json.loads(text))


@pytest.mark.timeout(2 * ROLLING_TIMEOUT + 180)
def test_after_helm_upgrade_the_live_preview_agrees_with_the_controller(
    release: Cluster, helm: Path
) -> None:
    with namespaces(release, TEAM_B):
        apply(release, our_service(TEAM_B, "web", TEAM_B_PORT))
        wait_for(
            "team-b/web to get addresses",
            lambda: ingress_of(release, TEAM_B, "web"),
            timeout=60,
            interval=0.5,
        )
        assert published(release).get("allowed-namespaces") == ""
        agree_before = Agreement(release)
        wait_for("the preview to agree before", agree_before, timeout=30, explain=agree_before.why)
        try:
            helm_upgrade(helm, release, "--set-string", f"settings.allowed-namespaces={APP}")
            wait_for(
                "the new Lease holder to publish allowed-namespaces",
                lambda: published(release).get("allowed-namespaces") == APP,
                timeout=90,
                interval=0.5,
            )
            wait_for(
                "the controller to take team-b/web's addresses away",
                lambda: not ingress_of(release, TEAM_B, "web"),
                timeout=60,
                interval=0.5,
            )
            assert ingress_of(release, APP, "web"), "traffic/web keeps its addresses"
            # The same answer on every Service, with no Warning (what it could not know).
            agree = Agreement(release)
            wait_for("the preview to agree", agree, timeout=30, interval=2, explain=agree.why)
            items, _ = live_preview(release)
            assert items[TEAM_B, "web"]["code"] == "NamespaceNotAllowed"
            figure("live preview after helm upgrade: Services compared", len(items))
            # What the preview said before it read the record (its own defaults): team-b's
            # Service addressed while the controller has it pending; now with a Warning.
            blind, stderr = live_preview(release, "--leader-election-id", "elsewhere")
            assert blind[TEAM_B, "web"]["ingress"], blind[TEAM_B, "web"]
            assert f"Warning: lease {NAMESPACE}/elsewhere-node-health not found" in stderr
        finally:
            # "" is the default (every namespace). Not --set ...=null: with --reuse-values
            # the published value was still "traffic" 90 s after it (run of 2026-12-04).
            helm_upgrade(helm, release, "--set-string", "settings.allowed-namespaces=")
            wait_for(
                "the allowed-namespaces setting gone from the published ones",
                lambda: published(release).get("allowed-namespaces") == "",
                timeout=90,
                interval=0.5,
            )
