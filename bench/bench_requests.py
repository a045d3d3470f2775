"""Client CPU per hot API write: ``.venv/bin/python -m bench.bench_requests``.

The cold start's bulk is ~20,000 small writes (issue 15; bench/README.md §5): a status
PATCH per managed Service (``KubernetesAPI.patch_service_status``) and an ``IPsAssigned``
Event create per Service (``KubernetesAPI.create_event``). This measures what one of them
costs the sending thread: ``time.thread_time()`` (CPU of this thread only, so the fake
API's work and other load on the machine do not count) over ``--count`` sequential
requests from one thread, after a few warm-up requests, against the fake API server
(``tests/fakeapi``) in its own process on 127.0.0.1, over plain HTTP and over TLS (its
``--tls``: a throw-away CA named by the kubeconfig, as a cluster's is).

Each write goes through the lean keep-alive path (``lean``: the default) and through the
``urllib3`` pool (``urllib3``: ``KubernetesAPI(lean_writes=False)``), side by side in one
run. Every status PATCH really changes the Service (the ingress IP alternates), as at a
cold start. Prints the figures; asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.kube.client import KubernetesAPI, connect
from bench.procs import Process, machine, python
from tests.support.objects import event_body

NAMESPACES = 10
WARM_UP = 20
PATHS = ("lean", "urllib3")
SCHEMES = ("http", "https")
OPS = ("patch status", "create event")


@dataclass(frozen=True)
class Figure:
    """Per-request cost of ``count`` sequential ``op`` requests on ``path`` over ``scheme``:
    thread CPU and wall time in microseconds."""

    scheme: str
    path: str
    op: str
    count: int
    cpu_us: float
    wall_us: float


def service_names(count: int) -> list[tuple[str, str]]:
    """``(namespace, name)`` of the ``count`` Services the benchmark writes."""
    return [(f"bench-{k % NAMESPACES}", f"svc-{k}") for k in range(count)]


def seed_objects(count: int) -> list[dict[str, Any]]:
    """``count`` LoadBalancer Services (the fake creates their namespaces)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "type": "LoadBalancer",
                "loadBalancerClass": "io.cilium/node",
                "ports": [{"port": 80, "protocol": "TCP"}],
            },
        }
        for namespace, name in service_names(count)
    ]


def start_fakeapi(*, objects: list[dict[str, Any]], workdir: Path, tls: bool) -> Process:
    """The fake API in its own process (``bench.fakeapi_proc``), serving once this returns;
    its kubeconfig is ``workdir / "kubeconfig"``.

    Raises:
        RuntimeError: it printed no URL; the message holds its log tail.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    seed = workdir / "seed.json"
    seed.write_text(json.dumps({"items": objects}))
    argv = python("-m", "bench.fakeapi_proc", "--seed-json", str(seed), *(["--tls"] * tls))
    process = Process(
        name="fakeapi", argv=argv, log=workdir / "fakeapi.log", env={}, capture_stdout=True
    )
    assert process.popen.stdout is not None
    url = process.popen.stdout.readline().decode().strip()
    if not url.startswith("https://" if tls else "http://"):
        process.stop()
        raise RuntimeError(f"fake API did not start:\n{process.tail()}")
    if not tls:
        (workdir / "kubeconfig").write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: c, cluster: {{server: '{url}'}}}}]\n"
            "users: [{name: u, user: {token: bench-token}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
        )
    return process


def _send(api: KubernetesAPI, op: str, index: int, target: tuple[str, str], round_: int) -> None:
    namespace, name = target
    if op == "patch status":
        ip = f"192.0.2.{(index + round_) % 2 + 1}"
        api.patch_service_status(
            namespace=namespace,
            name=name,
            patch={"status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}}},
        )
    else:
        api.create_event(namespace=namespace, body=event_body(namespace, name, index))


def measure(api: KubernetesAPI, *, op: str, count: int, round_: int) -> tuple[float, float]:
    """``(thread CPU µs, wall µs)`` per request over ``count`` sequential ``op`` requests
    (after ``WARM_UP`` untimed ones); ``round_`` shifts the status IPs so each PATCH is a
    change."""
    targets = service_names(count)
    for index in range(min(WARM_UP, count)):
        _send(api, op, index, targets[index], round_ + 1)
    wall, cpu = time.perf_counter(), time.thread_time()
    for index, target in enumerate(targets):
        _send(api, op, index, target, round_)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return cpu / count * 1e6, wall / count * 1e6


def new_api(kubeconfig: Path, path: str) -> KubernetesAPI:
    """A :class:`KubernetesAPI` on the kubeconfig, on the ``lean`` or ``urllib3`` path."""
    client = connect(kubeconfig).api_client
    return KubernetesAPI(client, request_timeout=10, lean_writes=path == "lean")


def run(
    *,
    count: int,
    workdir: Path,
    schemes: Sequence[str] = SCHEMES,
    paths: Sequence[str] = PATHS,
) -> list[Figure]:
    """Every (scheme, path, op) combination; one fake API per scheme."""
    figures: list[Figure] = []
    for scheme in schemes:
        where = workdir / scheme
        fakeapi = start_fakeapi(objects=seed_objects(count), workdir=where, tls=scheme == "https")
        try:
            for round_, path in enumerate(paths):
                api = new_api(where / "kubeconfig", path)
                try:
                    for op in OPS:
                        cpu, wall = measure(api, op=op, count=count, round_=round_)
                        figures.append(Figure(scheme, path, op, count, cpu, wall))
                finally:
                    api.close()
        finally:
            fakeapi.stop()
    return figures


def table(figures: Sequence[Figure]) -> str:
    """The figures as an aligned text table."""
    lines = [f"{'scheme':<6} {'path':<8} {'request':<13} {'n':>6} {'cpu µs':>8} {'wall µs':>8}"]
    for f in figures:
        lines.append(
            f"{f.scheme:<6} {f.path:<8} {f.op:<13} {f.count:>6} {f.cpu_us:>8.0f} {f.wall_us:>8.0f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="requests per figure")
    parser.add_argument("--scheme", choices=(*SCHEMES, "both"), default="both")
    parser.add_argument("--path", choices=(*PATHS, "both"), default="both")
    args = parser.parse_args(argv)
    if not 1 <= args.count <= 100_000:
        parser.error("--count: must be between 1 and 100000")
    schemes = SCHEMES if args.scheme == "both" else (args.scheme,)
    paths = PATHS if args.path == "both" else (args.path,)
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="bench-requests-") as tmp:
        figures = run(count=args.count, workdir=Path(tmp), schemes=schemes, paths=paths)
    print(table(figures))
    print(f"after: {machine()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
