"""Admission load (issue 7, scenario 4): ``.venv/bin/python -m bench.bench_admission``.

``wrk`` (Debian package ``wrk``) posts one AdmissionReview (CREATE of a ~2 KB LoadBalancer
Service with a node selector annotation) to ``/validate`` over TLS, on loopback:

- against ``node-ipam-lb serve`` (one process, cache synced with ``--nodes`` Nodes from the
  fake API, so the cluster-state warnings run the selection over every cached Node);
- against the ceiling: a trivial FastAPI endpoint that parses the body and answers
  ``allowed``, on the same uvicorn setup (:mod:`bench.ceiling_app`).

Two loads each, ``--duration`` seconds (default 30): light (4 connections: requests/s, p50,
p99) and saturation (50 connections: requests/s, errors). Targets: light p99 ≤ 10 ms;
saturation ≥ 60% of the ceiling's requests/s with zero errors. ``--profile`` attaches
py-spy to ``serve`` during its saturation run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.cluster import Cluster, Scale, make_node
from bench.procs import (
    ROOT,
    Process,
    machine,
    python,
    start_fakeapi,
    start_serve,
    tls_files,
    trusting,
)
from bench.profile import PySpy, summary
from tests.support.ports import free_port
from tests.support.waiting import wait_for

LUA = ROOT / "bench" / "wrk" / "admission.lua"
LOADS = (("light", 4), ("saturation", 50))
WRK_MISSING = (
    "bench_admission: wrk is not installed. Install it with `apt-get install -y wrk`"
    " (Debian package wrk), then run this command again."
)


def service_object() -> dict[str, Any]:
    """A realistic LoadBalancer Service as ``kubectl apply`` sends it (~2 KB of JSON with
    the last-applied annotation)."""
    spec = {
        "type": "LoadBalancer",
        "loadBalancerClass": "io.cilium/node",
        "externalTrafficPolicy": "Cluster",
        "selector": {"app.kubernetes.io/name": "storefront", "app.kubernetes.io/component": "web"},
        "ports": [
            {"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"},
            {"name": "https", "port": 443, "protocol": "TCP", "targetPort": "https"},
        ],
        "ipFamilyPolicy": "PreferDualStack",
        "ipFamilies": ["IPv4", "IPv6"],
        "sessionAffinity": "None",
        "internalTrafficPolicy": "Cluster",
        "allocateLoadBalancerNodePorts": True,
    }
    labels = {
        "app.kubernetes.io/name": "storefront",
        "app.kubernetes.io/component": "web",
        "app.kubernetes.io/part-of": "shop",
        "app.kubernetes.io/managed-by": "kubectl",
    }
    annotations = {
        "io.cilium.nodeipam/match-node-labels": (
            "node-pool in (pool-1,pool-2),kubernetes.io/os=linux"
        ),
    }
    applied = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "storefront",
            "namespace": "bench-1",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }
    annotations_full = dict(annotations)
    annotations_full["kubectl.kubernetes.io/last-applied-configuration"] = (
        json.dumps(applied, separators=(",", ":")) + "\n"
    )
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "storefront",
            "namespace": "bench-1",
            "labels": labels,
            "annotations": annotations_full,
        },
        "spec": spec,
    }


def admission_review() -> dict[str, Any]:
    """The AdmissionReview v1 the API server sends for ``kubectl apply`` of that Service."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0f6c2a4e-6b0e-4a59-9c1e-3c1d2b7e9a10",
            "kind": {"group": "", "version": "v1", "kind": "Service"},
            "resource": {"group": "", "version": "v1", "resource": "services"},
            "requestKind": {"group": "", "version": "v1", "kind": "Service"},
            "requestResource": {"group": "", "version": "v1", "resource": "services"},
            "name": "storefront",
            "namespace": "bench-1",
            "operation": "CREATE",
            "userInfo": {
                "username": "kubernetes-admin",
                "groups": ["kubeadm:cluster-admins", "system:authenticated"],
            },
            "object": service_object(),
            "oldObject": None,
            "dryRun": False,
            "options": {
                "apiVersion": "meta.k8s.io/v1",
                "kind": "CreateOptions",
                "fieldManager": "kubectl-client-side-apply",
            },
        },
    }


@dataclass
class Load:
    """One wrk run: requests/s, latency percentiles (ms) and error counts."""

    target: str
    name: str
    connections: int
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors: int
    error_detail: dict[str, int]


def run_wrk(
    *, url: str, body_file: Path, connections: int, duration: float, target: str, name: str
) -> Load:
    """Run wrk (one thread) against ``url`` and parse the script's ``BENCH`` line.

    Raises:
        RuntimeError: wrk failed or printed no figures (its output is in the message).
    """
    wrk = shutil.which("wrk")
    if wrk is None:
        raise RuntimeError(WRK_MISSING)
    argv = [wrk, "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--timeout", "5s"]
    argv += ["-s", str(LUA), url]
    out = subprocess.run(
        argv,
        env={**os.environ, "BENCH_BODY_FILE": str(body_file)},
        capture_output=True,
        text=True,
        timeout=duration + 60,
        check=False,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("BENCH ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    figures = json.loads(line[len("BENCH ") :])
    detail = {k: figures[k] for k in ("connect", "read", "write", "status", "timeout")}
    return Load(
        target=target,
        name=name,
        connections=connections,
        requests_per_second=figures["requests"] / (figures["duration_us"] / 1e6),
        p50_ms=figures["p50_us"] / 1000,
        p99_ms=figures["p99_us"] / 1000,
        errors=sum(detail.values()),
        error_detail=detail,
    )


def check_answer(url: str, ca: Path, review: dict[str, Any]) -> str:
    """POST the review once; return a one-line description of the answer.

    Raises:
        RuntimeError: not HTTP 200, or not an allowed response echoing the uid.
    """
    response = httpx.post(url, json=review, verify=trusting(ca), timeout=30)
    body = response.json()
    answer = body.get("response") or {}
    if response.status_code != 200 or answer.get("uid") != review["request"]["uid"]:
        raise RuntimeError(f"unexpected answer {response.status_code}: {response.text[:300]}")
    if not answer.get("allowed"):
        raise RuntimeError(f"the review was denied: {answer}")
    warnings = answer.get("warnings") or []
    return f"allowed, {len(warnings)} warning(s)" + (f": {warnings}" if warnings else "")


def run_loads(
    *, target: str, url: str, body_file: Path, duration: float, spy_pid: int | None, workdir: Path
) -> list[Load]:
    """Light then saturation load on ``url``; py-spy on ``spy_pid`` during saturation."""
    results = []
    for name, connections in LOADS:
        spy = None
        if spy_pid is not None and name == "saturation":
            spy = PySpy(pid=spy_pid, out=workdir / f"{target}-{name}.raw")
        try:
            results.append(
                run_wrk(
                    url=url,
                    body_file=body_file,
                    connections=connections,
                    duration=duration,
                    target=target,
                    name=name,
                )
            )
        finally:
            if spy is not None:
                spy.stop()
                print(summary(spy.out), flush=True)
    return results


def bench_serve(
    *, nodes: int, workdir: Path, body_file: Path, duration: float, profile: bool
) -> tuple[list[Load], str]:
    """The two loads against ``serve`` with a synced cache of ``nodes`` Nodes."""
    scale = Scale(nodes=nodes, managed=0, unmanaged=0)
    cluster = Cluster(
        nodes=[make_node(i, scale) for i in range(nodes)], services=[], endpoint_slices=[]
    )
    fakeapi = start_fakeapi(objects=cluster.objects(), workdir=workdir)
    try:
        serve = start_serve(kubeconfig=fakeapi.kubeconfig, workdir=workdir)
    except BaseException:
        fakeapi.stop()
        raise
    try:
        wait_for("serve /readyz", serve.ready, timeout=120, interval=0.05)
        url = f"{serve.url}/validate"
        ca = workdir / "certs" / "ca.crt"
        answer = check_answer(url, ca, json.loads(body_file.read_text()))
        loads = run_loads(
            target="serve",
            url=url,
            body_file=body_file,
            duration=duration,
            spy_pid=serve.process.pid if profile else None,
            workdir=workdir,
        )
        return loads, answer
    finally:
        serve.stop()
        fakeapi.stop()


def bench_ceiling(*, workdir: Path, body_file: Path, duration: float) -> tuple[list[Load], str]:
    """The two loads against the trivial endpoint (:mod:`bench.ceiling_app`)."""
    ca, cert, key = tls_files(workdir / "ceiling")
    port = free_port()
    process = Process(
        name="ceiling",
        argv=python(
            "-m",
            "bench.ceiling_app",
            "--port",
            str(port),
            "--tls-cert-file",
            str(cert),
            "--tls-private-key-file",
            str(key),
        ),
        log=workdir / "ceiling.log",
        env={},
        capture_stdout=True,
    )
    try:
        assert process.popen.stdout is not None
        if process.popen.stdout.readline().decode().strip() != "ready":
            raise RuntimeError(f"ceiling app did not start:\n{process.tail()}")
        url = f"https://127.0.0.1:{port}/validate"
        answer = check_answer(url, ca, json.loads(body_file.read_text()))
        loads = run_loads(
            target="ceiling",
            url=url,
            body_file=body_file,
            duration=duration,
            spy_pid=None,
            workdir=workdir,
        )
        return loads, answer
    finally:
        process.stop()


def report(serve: list[Load], ceiling: list[Load], *, body_bytes: int, nodes: int) -> str:
    """The figures as a table plus the two target lines."""
    lines = [
        f"admission: POST /validate, AdmissionReview CREATE of a Service ({body_bytes} bytes),"
        f" TLS, wrk -t1; serve's cache holds {nodes} Nodes",
        f"  {'target':8} {'load':18} {'requests/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}",
    ]
    for load in [*serve, *ceiling]:
        lines.append(
            f"  {load.target:8} {load.name + f' (c{load.connections})':18}"
            f" {load.requests_per_second:10.0f} {load.p50_ms:8.2f} {load.p99_ms:8.2f}"
            f" {load.errors:7d}" + (f"  {load.error_detail}" if load.errors else "")
        )
    light, saturated = serve
    ratio = saturated.requests_per_second / ceiling[1].requests_per_second
    lines.append(f"  (a) serve light p99: {light.p99_ms:.2f} ms (target <= 10 ms)")
    lines.append(
        f"  (b) serve saturation: {ratio:.0%} of the ceiling's requests/s (target >= 60%),"
        f" {saturated.errors} errors (target 0)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run scenario 4 and print its figures (exit 2 when wrk is missing)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per load")
    parser.add_argument("--nodes", type=int, default=5000, help="Nodes in serve's cache")
    parser.add_argument("--profile", action="store_true", help="py-spy on serve (saturation)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs here")
    args = parser.parse_args(argv)
    print(f"machine: {machine()}", flush=True)
    if shutil.which("wrk") is None:
        print(WRK_MISSING, file=sys.stderr)
        raise SystemExit(2)
    with tempfile.TemporaryDirectory(prefix="bench-admission-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        body = json.dumps(admission_review(), separators=(",", ":"))
        body_file = workdir / "review.json"
        body_file.write_text(body)
        serve, serve_answer = bench_serve(
            nodes=args.nodes,
            workdir=workdir,
            body_file=body_file,
            duration=args.duration,
            profile=args.profile,
        )
        ceiling, ceiling_answer = bench_ceiling(
            workdir=workdir, body_file=body_file, duration=args.duration
        )
        print(f"  serve answers: {serve_answer}; ceiling answers: {ceiling_answer}")
        print(report(serve, ceiling, body_bytes=len(body), nodes=args.nodes))
    print(f"machine at the end: {machine()}")


if __name__ == "__main__":
    main()
