"""Faults on the real control plane: ``.venv/bin/python -m bench.bench_faults``.

Every scenario of ``tests/controlplane/test_faults.py`` and the slow ones, each on a fresh
world (namespace, 5 Nodes, 40 Services of which 6 ``externalTrafficPolicy: Local`` with an
EndpointSlice, one Service of another class) with two ``serve`` replicas (leader election,
the product's 15 s / 10 s / 2 s) on one audited kube-apiserver v1.35 + etcd
(``tests/controlplane/faults.py``), Nodes, Services and EndpointSlices changed by the
admin every 0.25 s while the fault lasts:

1. kube-apiserver SIGKILLed at the cold start's first status write, back after 2 s;
2. the same, back after 20 s (longer than the Lease);
3. etcd restarted (SIGTERM) on a converged world;
4. etcd compacted while the watches are idle (then changes again);
5. the informer's initial List (pages of 2) compacted between its pages (the informer
   driven directly: serve's page size is 500);
6. API Priority and Fairness rejecting the controller beyond 3 seats during a cold start
   of 80 Services with 16 workers;
7. the webhook replica SIGSTOPped during ``kubectl apply`` of a malformed selector.

Columns: changes made by the admin during the fault (and refused: the server was away),
changes lost (managed Services whose status differs from ``preview`` on a dump of the
cluster after convergence), status writes to the unmanaged Service, writes by a replica
not holding the Lease, writes repeating the previous one (and retries of a write whose
answer the SIGKILL swallowed, counted apart), seconds from the fault's end to every
status right, the controller's requests by HTTP code (audit log), re-lists after a 410.
Ends with the table as Markdown (for bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.procs import machine
from tests.controlplane import faults, faultworld
from tests.controlplane.plane import AUDIT_CONTROLLERS, ControlPlane
from tests.devenv import manifests

COLUMNS = (
    ("scenario", "scenario"),
    ("changes", "changes (refused)"),
    ("lost", "lost"),
    ("unmanaged", "unmanaged writes"),
    ("not_leader", "writes not leader"),
    ("double", "double writes (unanswered retries, new-term rewrites)"),
    ("converge_s", "converge after fault, s"),
    ("fault", "fault"),
    ("codes", "controller requests by code"),
    ("relists", "re-lists"),
)


def _cell(result: dict[str, Any], key: str) -> str:
    if key == "changes":
        return f"{result.get('changes', '-')} ({result.get('refused_changes', 0)})"
    if key == "double":
        return (
            f"{result.get('double', '-')} ({result.get('unanswered_retries', 0)},"
            f" {result.get('term_rewrites', 0)})"
        )
    if key == "codes":
        codes = result.get("codes") or {}
        return " ".join(f"{code}:{n}" for code, n in sorted(codes.items())) or "-"
    value = result.get(key, "-")
    return "-" if value is None else str(value)


def table(results: list[dict[str, Any]]) -> str:
    """The figures as a Markdown table."""
    lines = [
        "| " + " | ".join(title for _, title in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for result in results:
        lines.append("| " + " | ".join(_cell(result, key) for key, _ in COLUMNS) + " |")
    return "\n".join(lines)


def _between_pages(plane: ControlPlane) -> dict[str, Any]:
    """Scenario 5 (as test_a_list_compacted_between_pages_is_listed_again)."""
    listed = faults.list_compacted_between_pages(plane, "bench-page")
    return {
        "scenario": "5. List compacted between pages",
        "changes": 1,
        "lost": len({*listed.names, listed.late} - listed.held),
        "converge_s": round(listed.synced - listed.resumed, 2),
        "fault": f"410 Expired {len(listed.errors)}x; token expired "
        f"{listed.expired_after_s:.1f} s after compaction",
        "relists": listed.lists - 1 + len(listed.errors),
    }


def _webhook(plane: ControlPlane, workdir: Path) -> dict[str, Any]:
    """Scenario 7 (:func:`tests.controlplane.faults.webhook_stopped`, as
    test_a_stopped_webhook_times_out_is_ignored_and_the_reconciler_reports)."""
    seen = faults.webhook_stopped(plane, workdir)
    figures = seen.figures
    return {
        "scenario": "7. webhook SIGSTOPped during kubectl apply",
        "changes": 1,
        "lost": int(bool(seen.status.get("loadBalancer"))),
        "unmanaged": len(figures["unmanaged"]),
        "not_leader": len(figures["not_leader"]),
        "double": len(figures["double"]),
        "converge_s": round(seen.reported_s, 2),
        "fault": f"apply admitted ({seen.admitted.returncode == 0}) after {seen.took_s:.1f} s;"
        f" next apply denied ({'denied the request' in seen.denied.stderr})",
        "codes": figures["codes"],
    }


WEBHOOK_HOST = "node-ipam-lb-webhook.node-ipam-lb.svc"
CERT_SECRET = "node-ipam-lb-webhook-tls"


def _certificates(workdir: Path) -> dict[str, Any]:
    """Scenario 8 on a plane of its own whose kube-apiserver resolves the webhook
    Service's DNS name to 127.0.0.1 (``ControlPlane(hosts=...)``): both replicas keep the
    serving certificate in deploy/'s Secret (``--cert-secret-name``, checked every 1 s),
    the webhooks' ``url:`` names that DNS name and carry no caBundle (the leader writes
    it). Then the Secret is deleted and both caBundles removed: the times until the
    Secret is back, both caBundles hold its CA, and the webhook denies again."""
    with ControlPlane(audit_policy=AUDIT_CONTROLLERS, hosts={WEBHOOK_HOST: "127.0.0.1"}) as plane:
        world = faultworld.new_world(plane, workdir, services=4)
        try:
            for _ in range(2):
                index = len(world.replicas)
                files = workdir / f"{world.run}-{index}"
                files.mkdir()
                world.start_replicas(
                    1,
                    f"--cert-secret-name={CERT_SECRET}",
                    "--cert-check-interval-seconds=1",
                    f"--tls-cert-file={files / 'tls.crt'}",
                    f"--tls-private-key-file={files / 'tls.key'}",
                )
            a = world.replicas[0]
            port = a.url.rsplit(":", 1)[1]
            configs = manifests.webhook_configurations(f"https://{WEBHOOK_HOST}:{port}", b"")
            for config in configs:
                for hook in config["webhooks"]:
                    hook["clientConfig"].pop("caBundle", None)
            bad = faults.apply_webhooks(plane, configs, world)

            def denied() -> bool:
                return faults.webhook_denies(plane, bad)

            deadline = time.monotonic() + 90
            while not denied():
                if time.monotonic() > deadline:
                    raise AssertionError("the webhook never denied (certificates not set up)")
                time.sleep(0.5)
            world.converge(60)
            secret = f"/api/v1/namespaces/node-ipam-lb/secrets/{CERT_SECRET}"
            _, before = plane.request("GET", secret)
            with faultworld.Changes(world) as changes:
                time.sleep(1.0)
                started = time.monotonic()
                plane.request("DELETE", secret)
                for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
                    plane.kubectl(
                        "patch",
                        kind,
                        "node-ipam-lb",
                        "--type=json",
                        "-p",
                        '[{"op":"remove","path":"/webhooks/0/clientConfig/caBundle"}]',
                    )
                marks: dict[str, float] = {}
                while len(marks) < 3 and time.monotonic() - started < 120:
                    code, now = plane.request("GET", secret)
                    if code == 200 and "secret" not in marks:
                        marks["secret"] = time.monotonic() - started
                    ca = now.get("data", {}).get("ca.crt") if code == 200 else None
                    bundles = [
                        hook.get("clientConfig", {}).get("caBundle")
                        for plural in ("validating", "mutating")
                        for hook in plane.request(
                            "GET",
                            "/apis/admissionregistration.k8s.io/v1/"
                            f"{plural}webhookconfigurations/node-ipam-lb",
                        )[1]["webhooks"]
                    ]
                    if ca and all(b == ca for b in bundles) and "caBundle" not in marks:
                        marks["caBundle"] = time.monotonic() - started
                    if "caBundle" in marks and "admission" not in marks and denied():
                        marks["admission"] = time.monotonic() - started
                    time.sleep(0.2)
                changes.stop()
            converge_s = world.converge(60)
            figures = world.figures()
            new_ca = ca != before.get("data", {}).get("ca.crt")
            return {
                "scenario": "8. cert Secret deleted + caBundle wiped",
                "changes": changes.made,
                "refused_changes": changes.failed,
                "lost": len(world.mismatches()),
                "unmanaged": len(figures["unmanaged"]),
                "not_leader": len(figures["not_leader"]),
                "double": len(figures["double"]),
                "converge_s": round(converge_s, 2),
                "fault": "restored: Secret "
                + ", caBundle ".join(
                    f"{marks.get(k, float('nan')):.1f} s" for k in ("secret", "caBundle")
                )
                + f", admission denies again {marks.get('admission', float('nan')):.1f} s"
                + f" (new CA: {new_ca})",
                "codes": figures["codes"],
            }
        finally:
            for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
                plane.kubectl("delete", kind, "node-ipam-lb", "--ignore-not-found", check=False)
            world.stop_replicas()
            faultworld.delete_nodes(world)


def main() -> None:
    """Run the scenarios (``--only 1,3``: some of them) and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated scenario numbers")
    parser.add_argument("--workdir", type=Path, default=None, help="keep serve's logs here")
    parser.add_argument(
        "--keep", action="store_true", help="keep the control plane's directory (audit log)"
    )
    args = parser.parse_args()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        run(args, args.workdir)
        return
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as scratch:  # nothing left
        run(args, Path(scratch))


def run(args: argparse.Namespace, workdir: Path) -> None:
    """The scenarios ``args.only`` asks for (all when empty), serve's files in ``workdir``;
    prints one JSON line per scenario, then the table."""
    only = {int(n) for n in args.only.split(",") if n}
    print(f"bench_faults {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {machine()}")

    def wanted(number: int) -> bool:
        return not only or number in only

    results: list[dict[str, Any]] = []

    def attempt(name: str, run: Any) -> dict[str, Any] | None:
        """``run()``; a scenario that fails is a row saying so, the others still run."""
        try:
            result: dict[str, Any] = run()
        except AssertionError as err:
            record({"scenario": name, "fault": f"FAILED: {str(err)[:300]}"})
            return None
        return result

    def record(result: dict[str, Any], fault: str = "") -> None:
        if fault:
            result["fault"] = fault
        results.append(result)
        shown = {k: v for k, v in result.items() if k != "details"}
        print(json.dumps(shown), flush=True)

    with ControlPlane(audit_policy=AUDIT_CONTROLLERS, keep=args.keep) as plane:
        print(f"control plane: {plane.workdir}", flush=True)
        for number, downtime in ((1, 2.0), (2, 20.0)):
            if wanted(number):
                name = f"{number}. apiserver SIGKILL mid cold start, back after {downtime:g} s"
                got = attempt(
                    name,
                    lambda name=name, downtime=downtime: faults.run_scenario(
                        name, plane, workdir, faults.apiserver_kill(downtime)
                    ),
                )
                if got is not None:
                    record(got, f"down {got['down_s']} s (kill to /readyz)")
        if wanted(3):
            got = attempt(
                "3. etcd restart",
                lambda: faults.run_scenario(
                    "3. etcd restart", plane, workdir, faults.etcd_restart, warm=True
                ),
            )
            if got is not None:
                record(got, f"down {got['down_s']} s (SIGTERM to apiserver /readyz)")
        if wanted(4):
            got = attempt(
                "4. etcd compaction, idle watches",
                lambda: faults.run_scenario(
                    "4. etcd compaction, idle watches",
                    plane,
                    workdir,
                    faults.compaction_idle,
                    warm=True,
                ),
            )
            if got is not None:
                record(got, f"compacted at revision {got['compacted_at']}")
        if wanted(5):
            got = attempt("5. List compacted between pages", lambda: _between_pages(plane))
            if got is not None:
                record(got)
        if wanted(6):
            plane.throttle(faultworld.SA_USER)
            try:
                got = attempt(
                    "6. APF throttling, cold start of 80",
                    lambda: faults.run_scenario(
                        "6. APF throttling, cold start of 80",
                        plane,
                        workdir,
                        faults.throttled,
                        services=80,
                        extra=("--workers=16",),
                    ),
                )
            finally:
                plane.unthrottle()
            if got is not None:
                record(
                    got,
                    f"converged under throttle in {got['converged_throttled_s']} s;"
                    f" min retry gap after a 429 {got['min_retry_gap_s']} s;"
                    f" peak {got['peak_requests_per_s']} req/s",
                )
        if wanted(7):
            got = attempt(
                "7. webhook SIGSTOPped during kubectl apply", lambda: _webhook(plane, workdir)
            )
            if got is not None:
                record(got)
    if wanted(8):
        got = attempt("8. cert Secret deleted + caBundle wiped", lambda: _certificates(workdir))
        if got is not None:
            record(got)
    print(f"bench_faults done: {machine()}")
    print(table(results))


if __name__ == "__main__":
    main()
