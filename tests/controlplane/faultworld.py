"""The world the fault scenarios (faults.py) run in: a control plane with deploy/'s RBAC,
two ``serve`` replicas (:class:`Replica`), Nodes, Services and EndpointSlices
(:func:`new_world`), a bounded loop of changes (:class:`Changes`), and the figures read
from the audit log (:class:`World`: changes lost, writes while not leader, double writes)."""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.client
import itertools
import json
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from app.core.dump import Dump, project
from app.preview.run import preview_dump, would_change
from tests.controller.support import distinct_port
from tests.controlplane.plane import AUDIT_CONTROLLERS, ControlPlane
from tests.controlplane.serving import (
    CLASS,
    EXCLUDE,
    NAMESPACE,
    apply_deploy,
    ready,
    start_serve,
    stop,
    tls,
)

SA_USER = f"system:serviceaccount:{NAMESPACE}:{NAMESPACE}"


MATCH = "io.cilium.nodeipam/match-node-labels"


CREDENTIAL = "authentication.kubernetes.io/credential-id"


MERGE = "application/merge-patch+json"


OTHER_CLASS = "example.com/other"


@dataclass
class Replica:
    """One ``serve`` process; ``jti`` is its token's id (the audit log's credential-id)."""

    name: str
    url: str
    ca: Path
    log: Path
    process: subprocess.Popen[bytes]
    jti: str

    def metrics(self) -> str:
        """``/metrics`` text, or ``""`` when it does not answer (stopped, SIGSTOPped)."""
        try:
            got = httpx.get(f"{self.url}/metrics", verify=tls(self.ca), timeout=3)
        except httpx.HTTPError:
            return ""
        return got.text if got.status_code == 200 else ""

    def log_count(self, message: str) -> int:
        """Lines of serve's log whose ``msg`` is ``message``."""
        needle = f'"msg":"{message}"'
        return sum(needle in line for line in self.log.read_text(errors="replace").splitlines())


def _jti(kubeconfig: Path) -> str:
    token = next(
        line.split("token:", 1)[1].strip()
        for line in kubeconfig.read_text().splitlines()
        if "token:" in line
    )
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return str(claims["jti"])


def _time(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass
class World:
    """See the module docstring. ``run`` is the value of label ``e2e-run`` on its Nodes."""

    plane: ControlPlane
    workdir: Path
    run: str
    namespace: str
    services: int
    local: int
    nodes: list[str]
    lease_duration: float
    replicas: list[Replica] = field(default_factory=list)
    timings: tuple[str, ...] = ()
    created: float = field(default_factory=time.time)
    """Wall-clock time the world was made: :meth:`figures` reads audit events from then."""

    # -- objects -----------------------------------------------------------------------
    def node(self, name: str, index: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"e2e-run": self.run}},
            "status": {
                "addresses": [{"type": "InternalIP", "address": f"10.78.0.{index}"}],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    def service(self, name: str, *, local: bool = False, lb_class: str = CLASS) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "type": "LoadBalancer",
            "loadBalancerClass": lb_class,
            # A port of its own: the real API server is shared by every module (§4.9).
            "ports": [{"port": distinct_port(self.namespace, name)}],
        }
        if local:
            spec["externalTrafficPolicy"] = "Local"
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "annotations": {MATCH: f"e2e-run={self.run}"},
            },
            "spec": spec,
        }

    def endpoint_slice(self, service: str, nodes: list[str], ready: bool = True) -> dict[str, Any]:
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{service}-1",
                "namespace": self.namespace,
                "labels": {"kubernetes.io/service-name": service},
            },
            "addressType": "IPv4",
            "endpoints": [
                {
                    "addresses": [f"10.79.0.{i + 1}"],
                    "nodeName": node,
                    "conditions": {"ready": ready},
                }
                for i, node in enumerate(nodes)
            ],
            "ports": [{"port": 80, "protocol": "TCP"}],
        }

    def service_names(self) -> list[str]:
        return [f"svc-{i:03d}" for i in range(self.services)]

    def local_names(self) -> list[str]:
        return self.service_names()[: self.local]

    def populate(self) -> None:
        """Create the Nodes, EndpointSlices and Services (one ``kubectl apply``)."""
        self.plane.kubectl("create", "namespace", self.namespace)
        objects: list[dict[str, Any]] = [self.node(n, i + 1) for i, n in enumerate(self.nodes)]
        for i, name in enumerate(self.local_names()):
            objects.append(self.endpoint_slice(name, [self.nodes[i % len(self.nodes)]]))
        local = set(self.local_names())
        objects += [self.service(n, local=n in local) for n in self.service_names()]
        objects.append(self.service("other-class", lb_class=OTHER_CLASS))
        listing = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        self.plane.kubectl("apply", "-f", "-", input=listing, timeout=120)

    # -- replicas ----------------------------------------------------------------------
    def start_replicas(self, count: int = 2, *extra: str) -> list[Replica]:
        """Start ``count`` replicas (``replica-a``, ``replica-b``, …) with this world's
        leader-election timings; returns them at once (not waiting for readiness)."""
        started = []
        for index in range(count):
            name = f"r{self.run[:4]}-{chr(ord('a') + len(self.replicas))}"
            process, url, ca, log = start_serve(
                self.plane, self.workdir, name, *self.timings, *extra, env={"POD_NAME": name}
            )
            replica = Replica(
                name, url, ca, log, process, _jti(self.workdir / f"{name}.kubeconfig")
            )
            self.replicas.append(replica)
            started.append(replica)
            del index
        return started

    def wait_ready(self, replicas: list[Replica], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for r in replicas:
            while not ready(r.url, r.ca):
                if r.process.poll() is not None:
                    raise AssertionError(f"{r.name} exited:\n{r.log.read_text()[-3000:]}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"{r.name} not ready within {timeout} s")
                time.sleep(0.2)

    def stop_replicas(self) -> None:
        for r in self.replicas:
            if r.process.poll() is None:
                with_cont(r)
            stop(r.process)

    def _cached_views(self, wrong: list[str]) -> dict[str, Any]:
        """Each replica's ``/preview/<ns>/<name>`` (computed from its own cache) for the
        Services named in ``wrong`` lines, to tell a lost event from a lost write."""
        seen: dict[str, Any] = {}
        for line in wrong:
            name = line.split(":", 1)[0]
            for r in self.replicas:
                try:
                    got = httpx.get(
                        f"{r.url}/preview/{self.namespace}/{name}", verify=tls(r.ca), timeout=5
                    )
                    body = got.json()
                    seen[f"{r.name} {name}"] = {
                        "ingress": [e.get("ip") for e in body.get("ingress") or ()],
                        "nodes": body.get("nodes"),
                        "reason": body.get("reason"),
                    }
                except (httpx.HTTPError, ValueError) as err:
                    seen[f"{r.name} {name}"] = str(err)
        return seen

    def _terms(self) -> dict[str, list[float]]:
        """When each replica logged "leadership acquired" (wall clock, epoch seconds)."""
        terms: dict[str, list[float]] = {}
        for r in self.replicas:
            for line in r.log.read_text(errors="replace").splitlines():
                if '"msg":"leadership acquired"' in line:
                    with contextlib.suppress(ValueError, KeyError):
                        terms.setdefault(r.name, []).append(_time(json.loads(line)["time"]))
        return terms

    def _acknowledged(self) -> Counter[tuple[str, str]]:
        """Status writes each replica logged as answered 2xx, by (replica, Service key)."""
        done: Counter[tuple[str, str]] = Counter()
        for r in self.replicas:
            for line in r.log.read_text(errors="replace").splitlines():
                if '"msg":"status.loadBalancer.ingress written"' in line:
                    with contextlib.suppress(ValueError, KeyError):
                        done[r.name, str(json.loads(line)["service"])] += 1
        return done

    def holder(self) -> str:
        """The Lease's holderIdentity now ("" when unreadable)."""
        status, body = self.plane.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{NAMESPACE}"
        )
        if status != 200:
            return ""
        return str(body["spec"].get("holderIdentity") or "")

    # -- checks ------------------------------------------------------------------------
    def dump(self) -> Dump:
        """Nodes, Services and EndpointSlices of the whole cluster, as ``kubectl get -o
        json`` would dump them."""
        dump = Dump()
        for attr, path in (
            ("nodes", "/api/v1/nodes"),
            ("services", "/api/v1/services"),
            ("endpoint_slices", "/apis/discovery.k8s.io/v1/endpointslices"),
        ):
            status, body = self.plane.request("GET", path)
            if status != 200:
                raise RuntimeError(f"GET {path}: {status} {str(body)[:200]}")
            kind = {"nodes": "Node", "services": "Service"}.get(attr, "EndpointSlice")
            version = "discovery.k8s.io/v1" if attr == "endpoint_slices" else "v1"
            for item in body["items"]:
                getattr(dump, attr).append({"apiVersion": version, "kind": kind, **item})
        return dump

    def mismatches(self) -> list[str]:
        """Managed Services of this world whose stored ingress differs from ``preview``
        on a dump of the cluster (``[]``: converged); ``["unreachable"]`` while the API
        server does not answer."""
        try:
            views = project(self.dump())
        except (OSError, RuntimeError) as err:
            return [f"unreachable: {err}"]
        services = {(s.namespace, s.name): s for s in views.services}
        wrong = []
        selections = preview_dump(views, settings=Settings().selection(), now=time.time())
        for sel in selections:
            if sel.namespace != self.namespace:
                continue
            svc = services[sel.namespace, sel.name]
            if would_change(sel, svc):
                wanted = [e.get("ip") for e in sel.ingress or ()]
                stored = [e.get("ip") for e in svc.ingress or ()]
                wrong.append(f"{sel.name}: preview {wanted}, stored {stored}")
        return wrong

    def converge(self, timeout: float = 60) -> float:
        """Seconds until :meth:`mismatches` is empty; raises ``AssertionError`` naming
        what is still wrong after ``timeout``."""
        started = time.monotonic()
        while True:
            wrong = self.mismatches()
            if not wrong:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise AssertionError(
                    f"not converged within {timeout} s: {len(wrong)} Services: {wrong[:5]};"
                    f" what the replicas' caches say: {self._cached_views(wrong[:3])}"
                )
            time.sleep(0.3)

    def figures(self) -> dict[str, Any]:
        """What the audit log says about the controller's requests (module docstring)."""
        events = [
            e
            for e in self.plane.audit_events()
            if e.get("user", {}).get("username") == SA_USER
            and e.get("stage") == "ResponseComplete"
            and _time(e["requestReceivedTimestamp"]) >= self.created
        ]
        by_jti = {r.jti: r.name for r in self.replicas}
        codes: Counter[int] = Counter()
        leases: list[tuple[float, str]] = []  # (time, holder) of successful Lease writes
        writes: list[tuple[float, str, str, str, int]] = []  # time, replica, service, body, code
        refused = []
        for e in events:
            code = int(e.get("responseStatus", {}).get("code", 0))
            codes[code] += 1
            ref = e.get("objectRef", {})
            if 400 <= code < 500 and code not in (404, 409, 410, 429):
                what = f"{ref.get('resource')}/{ref.get('subresource') or ''}"
                since = _time(e["requestReceivedTimestamp"]) - self.created
                refused.append(
                    (
                        since,
                        f"+{since:.2f} s {code} {e['verb']} {what}"
                        f" {ref.get('namespace')}/{ref.get('name')}",
                    )
                )
            at = _time(e["requestReceivedTimestamp"])
            if ref.get("resource") == "leases" and e["verb"] in ("create", "update"):
                if code in (200, 201):
                    holder = (e.get("requestObject") or {}).get("spec", {}).get("holderIdentity")
                    leases.append((_time(e["stageTimestamp"]), str(holder or "")))
            elif ref.get("resource") == "services" and ref.get("subresource") == "status":
                extra = e.get("user", {}).get("extra", {}).get(CREDENTIAL, [""])
                jti = extra[0].removeprefix("JTI=") if extra else ""
                body = json.dumps(e.get("requestObject"), sort_keys=True)
                key = f"{ref.get('namespace')}/{ref.get('name')}"
                writes.append((at, by_jti.get(jti, jti), key, body, code))
        leases.sort()
        not_leader = []
        for at, replica, key, _, code in writes:
            if code != 200:
                continue
            before = [lease for lease in leases if lease[0] <= at + 0.001]
            if not before:
                not_leader.append(f"{replica} wrote {key} before any Lease write")
                continue
            when, holder = before[-1]
            if not holder.startswith(f"{replica}_") or at - when > self.lease_duration:
                not_leader.append(f"{replica} wrote {key}; Lease: {holder!r} {at - when:.1f} s ago")
        unmanaged = [w[2] for w in writes if w[2] == f"{self.namespace}/other-class"]
        last: dict[str, tuple[float, str]] = {}
        double, unanswered, rewrites = [], [], []
        acknowledged = self._acknowledged()
        terms = self._terms()
        served: Counter[tuple[str, str]] = Counter()
        for at, replica, key, body, code in writes:
            if code != 200:
                continue
            served[replica, key] += 1
            if key in last and last[key][1] == body:
                line = (
                    f"{replica} wrote {key} again at +{at - self.created:.2f} s"
                    f" (before: +{last[key][0] - self.created:.2f} s): {body}"
                )
                # The server took the earlier write but its answer never reached the
                # replica (the API server was killed first): a retry, not a double write.
                lost = served[replica, key] - 1 > acknowledged[replica, key]
                # A new leadership term forgets the last term's writes (the reconciler's
                # reset: another replica may have written meanwhile); with the echo of the
                # earlier write lost in the outage, the cache still shows the old status.
                new_term = any(last[key][0] < t < at for t in terms.get(replica, ()))
                if lost:
                    unanswered.append(line)
                elif new_term:
                    rewrites.append(line)
                else:
                    double.append(line)
            last[key] = (at, body)
        # A retry is the same request again: a status write of the same Service, or a
        # read (get, list, watch) of the same URI by the same replica. Event creates are
        # left out (the next POST to the same URI is usually another Event).
        attempts: dict[tuple[str, ...], list[tuple[float, int]]] = {}
        for at, _, key, _, code in writes:
            attempts.setdefault(("status", key), []).append((at, code))
        for e in events:
            if e["verb"] in ("get", "list", "watch"):
                extra = e.get("user", {}).get("extra", {}).get(CREDENTIAL, [""])
                what = (extra[0] if extra else "", e["verb"], e.get("requestURI", ""))
                code = int(e.get("responseStatus", {}).get("code", 0))
                attempts.setdefault(what, []).append((_time(e["requestReceivedTimestamp"]), code))
        gaps = [
            later[0] - earlier[0]
            for tries in attempts.values()
            for earlier, later in itertools.pairwise(sorted(tries))
            if earlier[1] == 429
        ]
        seconds = Counter(int(_time(e["requestReceivedTimestamp"])) for e in events)
        return {
            "retry_gaps": gaps,
            "peak_requests_per_s": max(seconds.values(), default=0),
            "requests": sum(codes.values()),
            "codes": dict(sorted(codes.items())),
            "status_writes": sum(1 for w in writes if w[4] == 200),
            "throttled_writes": sum(1 for w in writes if w[4] == 429),
            "unmanaged": unmanaged,
            "refused": refused,
            "unanswered": unanswered,
            "term_rewrites": rewrites,
            "not_leader": not_leader,
            "double": double,
            "writes": writes,
            "lease_writes": leases,
        }


def with_cont(replica: Replica) -> None:
    """SIGCONT (harmless when the process was not stopped)."""
    replica.process.send_signal(signal.SIGCONT)


class Changes:
    """A bounded loop of changes as the admin, on its own thread, one every ``interval``
    seconds, at most ``limit``: a Node's exclusion label set or removed, an EndpointSlice's
    endpoint made ready or not, a Service of this world created or deleted. A change the
    API server does not take (down, restarting) is tried again at the next tick and
    counted in ``failed``; ``made`` counts the ones it took."""

    def __init__(self, world: World, *, interval: float = 0.25, limit: int = 400) -> None:
        self.world, self.interval, self.limit = world, interval, limit
        self.made = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="changes", daemon=True)
        self._excluded: set[str] = set()
        self._unready: set[str] = set()
        self._extra = 0

    def __enter__(self) -> Changes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _steps(self) -> Iterator[Callable[[], bool]]:
        world = self.world
        for i in itertools.count():
            # Exclude a Node, next time put it back: at most one is out at any time (all
            # out would make every status empty, a state that hides lost changes).
            node = world.nodes[(i // 2) % len(world.nodes)]
            yield lambda node=node: self._toggle_node(node)
            if world.local:
                svc = world.local_names()[i % world.local]
                yield lambda svc=svc: self._toggle_slice(svc)
            yield self._churn_service

    def _run(self) -> None:
        steps = self._steps()
        step = next(steps)
        while not self._stop.is_set() and self.made < self.limit:
            try:
                ok = step()
            except (OSError, http.client.HTTPException):
                ok = False
            if ok:
                self.made += 1
                step = next(steps)
            else:
                self.failed += 1
            self._stop.wait(self.interval)

    def _toggle_node(self, node: str) -> bool:
        excluded = node in self._excluded
        patch = {"metadata": {"labels": {EXCLUDE: None if excluded else ""}}}
        status, _ = self.world.plane.request(
            "PATCH", f"/api/v1/nodes/{node}", patch, content_type=MERGE
        )
        if status != 200:
            return False
        self._excluded ^= {node}
        return True

    def _toggle_slice(self, svc: str) -> bool:
        world = self.world
        unready = svc in self._unready
        index = world.local_names().index(svc)
        body = world.endpoint_slice(svc, [world.nodes[index % len(world.nodes)]], unready)
        path = f"/apis/discovery.k8s.io/v1/namespaces/{world.namespace}/endpointslices/{svc}-1"
        status, _ = world.plane.request("PATCH", path, body, content_type=MERGE)
        if status != 200:
            return False
        self._unready ^= {svc}
        return True

    def _churn_service(self) -> bool:
        world = self.world
        name = f"churn-{self._extra // 2:03d}"
        base = f"/api/v1/namespaces/{world.namespace}/services"
        if self._extra % 2 == 0:
            status, _ = world.plane.request("POST", base, world.service(name))
            ok = status in (201, 409)
        else:
            status, _ = world.plane.request("DELETE", f"{base}/{name}")
            ok = status in (200, 404)
        if ok:
            self._extra += 1
        return ok


def new_world(
    plane: ControlPlane,
    workdir: Path,
    *,
    services: int = 40,
    local: int = 6,
    nodes: int = 5,
    lease: tuple[float, float, float] = (15, 10, 2),
) -> World:
    """deploy/ applied and a fresh namespace populated (no replica yet). ``plane`` must
    be audited with :data:`AUDIT_CONTROLLERS`. ``lease``: leaseDuration, renewDeadline,
    retryPeriod seconds (default: the product's)."""
    if plane.audit_policy != AUDIT_CONTROLLERS:
        raise ValueError("the plane must be started with audit_policy=AUDIT_CONTROLLERS")
    apply_deploy(plane)
    run = uuid.uuid4().hex[:8]
    duration, renew, retry = lease
    world = World(
        plane=plane,
        workdir=workdir,
        run=run,
        namespace=f"faults-{run}",
        services=services,
        local=min(local, services),
        nodes=[f"fault-{run}-{i}" for i in range(1, nodes + 1)],
        lease_duration=duration,
        timings=(
            f"--lease-duration-seconds={duration:g}",
            f"--renew-deadline-seconds={renew:g}",
            f"--retry-period-seconds={retry:g}",
        ),
    )
    world.populate()
    return world


def delete_nodes(world: World) -> None:
    """Remove the world's Nodes (cluster-scoped; namespaces stay without a controller)."""
    for node in world.nodes:
        world.plane.request("DELETE", f"/api/v1/nodes/{node}")
