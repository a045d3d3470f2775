"""Cilium's controller beside ours on one real API server: ``python -m bench.bench_peer``.

At each size (``--sizes``, Nodes; two managed Services per Node and ``--unmanaged-fraction``
of the Node count unmanaged ones: :func:`bench.cluster.make_cluster`) ONE kube-apiserver
v1.35 + etcd (:func:`bench.realapi.start_realapi`) is seeded once; then Cilium v1.20.2's
Node IPAM controller (:class:`tests.peers.cilium.peer.CiliumNodeIpam`, started as
cilium-operator runs it: ``--default-lb-service-ipam lbipam``, client QPS 100 / burst 200)
runs every phase below, then ours (``node-ipam-lb serve``, :func:`bench.procs.start_serve`)
does, each from blank statuses: between the two every managed Service's
``status.loadBalancer`` is cleared (parallel merge PATCHes of ``services/status``) and a
List checks it. Per controller:

1. cold start: wall time from the process start until every managed Service holds its
   expected ingress (a watch on Services started before the controller, a subclass of
   :class:`bench.realapi.IngressWatch`) and until quiet (ours:
   :func:`bench.bench_cold_start.wait_quiet` on serve's ``/metrics``; Cilium:
   :meth:`CiliumNodeIpam.wait_quiet`: its services/status requests still for 1 s); the
   controller's CPU (``utime + stime``) at both moments, its peak RSS (``VmHWM``), the API
   server's requests by verb and resource (``apiserver_request_total``, scraped before and
   after, never polled) and the CPU of kube-apiserver and etcd;
2. restart on the synced cluster: a new process, the same figures (ours: 0 status writes);
3. steady state for ``--steady-seconds``: each Node's status PATCHed as kubelet reports it
   (``nodeStatusReportFrequency`` 5 min, spread evenly over the window; a shorter window
   sends the share of the Nodes that keeps kubelet's per-Node rate, a longer one sends each
   Node more than once), bumping every condition's ``lastHeartbeatTime``; 1% of the
   reports (at least one) also toggle ``MemoryPressure`` or ``DiskPressure``, which neither
   controller reads (docs/design.md §4.2, §5 "Triggers"; Cilium's predicates,
   docs/reference/cilium-node-ipam.md §5). Status writes, controller CPU, API server CPU;
4. churn, ``--churn`` changes of each kind, one at a time, each written once the previous
   one converged: (a) the exclusion label on, then off, a Node; (b) a Node's IPv4
   InternalIP; (c) a ready endpoint added to, then removed from, a Local Service's
   EndpointSlice; (d) a rollout: a Local Service's endpoints replaced by endpoints on other
   Nodes. The expected ingress is recomputed on an in-memory copy of the cluster kept in
   step with the server (:func:`plan_churn`); the time runs from the PATCH until the watch
   sees every affected Service hold its new ingress. Per kind: p50/p99 and the status
   writes between one change and the next;
5. admission (ours only): AdmissionReviews (:func:`bench.bench_admission.admission_review`)
   POSTed to serve's ``/validate`` over TLS at ``--admission-rate`` per second from a
   separate process, during the cold start (latency from the first answer; connections
   refused before the listener is up are counted apart) and during the churn.

Every phase ends with a List checking every managed status and counting unmanaged
Services with an ingress, for both controllers. Ours must hold exactly
:func:`bench.cluster.expected_ingress`; Cilium's own value is what it writes where that
differs from ours only as docs/design.md §4.8 explains
(:func:`tests.peers.cilium.differential.classify`: ``family-numeric-order``,
``canonical-addresses``), counted per rule; anything else is unexplained, printed, and
makes the exit status 1 (as does a phase that did not converge within ``--cap``, whose
controller's later phases at that size are then skipped).

Requests "made by the controller": every ``apiserver_request_total`` increment between
the scrape just before the controller starts and the scrape just after the last expected
status arrived. The bench's own requests are kept out of that window, not subtracted: its
List and watch on Services start before the first scrape and the watch stays open past
the second (the server counts a request when it ends), and it sends nothing else
meanwhile. The API server's own loopback requests are not the controller's but are left
in (idle, 30 s held 3 each of ``update leases``, ``get endpoints``, ``create endpoints``:
0.3 per second); the breakdown by verb and resource shows them. The controller's watches, still
open, are not counted yet: ours has three; Cilium's client (client-go v0.36,
``WatchListClient`` on by default) streams even its initial lists as watches, so its
figure holds no ``list`` at all.

Targets (printed beside the figures, not asserted): 1,000 Nodes: ours every status written
≤ 6 s after start; ours/Cilium cold-start CPU ≤ 0.1 and wall ≤ 0.1; ours steady-state
status writes 0; ours churn p99 ≤ 1 s. 5,000 Nodes: ours written ≤ 20 s, serve CPU until
quiet ≤ 8 s, API requests by the controller before the last status is written ≤ 1.1 per
managed Service. Admission p99 ≤ 50 ms over TLS.

A default run (``--sizes 1000,5000``, 300 s steady, 20 changes of each kind) takes about
1.5 hours on 2 cores: seeding 5,000 Nodes takes 4-7 minutes, and most of the rest is
Cilium at 5,000 Nodes, whose every Node change requeues all 10,000 Services at 100
requests/s. ``--plot FILE.png`` draws both controllers' cold start (wall time until
written, CPU until quiet) against Nodes; ``--profile`` runs py-spy on serve during its
cold start; ``--workdir DIR`` keeps every log.

``--pools 0,20,0,20`` (ours only) installs the NodeAddressPool CRD
(deploy/base/crd-nodeaddresspools.yaml, waited for until ``Established`` and served) after
seeding and runs each controller once per count, in order, on the same seeded server:
before each run the server's pools are replaced by that many of
:func:`bench.address_pools.make_address_pools` (tenants by namespace label and by name,
node selectors, port ranges, address types, a low-priority catch-all), and the expected
ingress is the oracle's with them (:func:`bench.cluster.expected_ingress`, which also
holds the product's pool choice to the bench's own reading of the rule). The table has a
column per run (``ours/20 pools``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.peer_controllers import probe_admission
from bench.peer_phases import Options, SizeResult, run_size
from bench.peer_report import cold_start_points, failures, plot, plot_points, report, saved_points
from bench.peer_workload import ADMISSION_RATE, CONTROLLERS, PROBE_COMMAND, say
from bench.procs import (
    machine,
)


def run_bench(
    options: Options, workdir: Path, log: Callable[[str], None] = say
) -> list[SizeResult]:
    """Every size of ``options`` (logs under ``workdir``), each printed as it ends; the
    plot drawn when asked for."""
    results = []
    for nodes in options.sizes:
        result = run_size(nodes, options, workdir, log)
        log(report(result))
        log(f"machine: {machine()}")
        results.append(result)
    if options.plot is not None:
        plot(results, options.plot, options.cap)
        log(f"plot: {options.plot}")
    if options.save is not None:
        options.save.write_text(json.dumps(cold_start_points(results, options.cap), indent=1))
        log(f"cold-start figures: {options.save}")
    return results


def parse_args(argv: Sequence[str]) -> Options:
    """The command's flags as :class:`Options`.

    Raises:
        SystemExit: a bad flag (argparse's message, status 2).
    """
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000", help="Node counts, comma-separated")
    parser.add_argument("--unmanaged-fraction", type=float, default=0.1, help="unmanaged per Node")
    parser.add_argument(
        "--conflicting",
        type=int,
        default=0,
        help="extra managed Services sharing a twin's ports (docs/design.md §4.9); Cilium"
        " publishes them, so its statuses are wrong by our oracle: use --controllers ours",
    )
    parser.add_argument(
        "--pools",
        default=None,
        help="NodeAddressPools per run, comma-separated (0,20,0,20: four runs of each"
        " controller on one seeded API server, the CRD installed first; bench/address_pools.py)",
    )
    parser.add_argument("--steady-seconds", type=float, default=300.0)
    parser.add_argument("--churn", type=int, default=20, help="changes of each kind")
    parser.add_argument("--cap", type=float, default=900.0, help="convergence cap per phase (s)")
    parser.add_argument("--controllers", default=",".join(CONTROLLERS), help="cilium,ours")
    parser.add_argument("--plot", type=Path, default=None, help="PNG of the cold start growth")
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs here")
    parser.add_argument("--save", type=Path, default=None, help="JSON of the plotted figures")
    parser.add_argument("--profile", action="store_true", help="py-spy on serve's cold start")
    parser.add_argument("--admission-rate", type=float, default=ADMISSION_RATE, help="per second")
    parser.add_argument("--peer", type=Path, default=None, help="the Cilium peer's binary")
    args = parser.parse_args(argv)
    controllers = [c.strip() for c in args.controllers.split(",") if c.strip()]
    if not controllers or set(controllers) - set(CONTROLLERS):
        parser.error(f"--controllers: expected cilium, ours or both, not {args.controllers!r}")
    pools = None
    if args.pools is not None:
        try:
            pools = [int(n) for n in args.pools.split(",") if n.strip()]
        except ValueError:
            parser.error(f"--pools: expected counts separated by commas, not {args.pools!r}")
        if not pools or min(pools) < 0:
            parser.error(f"--pools: expected counts of 0 or more, not {args.pools!r}")
        if any(pools) and "cilium" in controllers:
            parser.error(
                "--pools: Cilium's controller reads no NodeAddressPool: use --controllers ours"
            )
    if args.steady_seconds <= 0 or args.churn < 0 or args.cap <= 0:
        parser.error("--steady-seconds and --cap must be positive, --churn not negative")
    return Options(
        sizes=[int(n) for n in args.sizes.split(",") if n.strip()],
        unmanaged_fraction=args.unmanaged_fraction,
        conflicting=args.conflicting,
        pools=pools,
        steady_seconds=args.steady_seconds,
        churn=args.churn,
        cap=args.cap,
        controllers=[c for c in CONTROLLERS if c in controllers],
        plot=args.plot,
        workdir=args.workdir,
        save=args.save,
        profile=args.profile,
        admission_rate=args.admission_rate,
        peer=args.peer,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (module docstring); returns the exit status: 0, or 1 when a
    status was wrong or unexplained, an unmanaged Service was written, a phase did not
    converge or an admission answer did not allow. ``probe-admission AIM RATE OUT`` as the
    first arguments runs the prober instead (:func:`probe_admission`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["plot"]:
        if len(args) < 3:
            say("usage: python -m bench.bench_peer plot OUT.png SAVED.json [SAVED.json ...]")
            return 2
        try:
            points = [p for path in args[2:] for p in saved_points(Path(path))]
        except (OSError, ValueError) as err:
            say(f"bench_peer plot: {err}")
            return 2
        plot_points(points, Path(args[1]))
        say(f"plot: {args[1]} ({len(points)} figures from {len(args) - 2} files)")
        return 0
    if args[:1] == [PROBE_COMMAND]:
        aim, rate, out = args[1:4]
        probe_admission(Path(aim), float(rate), Path(out))
        return 0
    options = parse_args(args)
    say(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        workdir = options.workdir or Path(tmp)
        results = run_bench(options, workdir)
    say(f"machine at the end: {machine()}")
    found = failures(results)
    for line in found:
        say(f"FAILURE {line}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
