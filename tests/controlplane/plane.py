"""A real kube-apiserver + etcd pair on loopback for tests (like controller-runtime's envtest).

``ControlPlane`` makes its own PKI (CA, serving certificate, an admin client certificate in
``system:masters``, service-account signing keys), starts etcd and kube-apiserver on free
127.0.0.1 ports with their data and logs in a temporary directory, and writes an admin
kubeconfig. No controller-manager or scheduler runs: nothing creates the ``default``
ServiceAccount, Endpoints or Pods on its own; tests create what they need.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.client
import ipaddress
import json
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.controlplane.build import Binaries, build
from tests.support.ports import free_port
from tests.support.processes import PortTaken, Server, StartError, tail

HOST = "127.0.0.1"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"  # configuration only; nothing routes to it
# ``dual_stack=True``: IPv4 then IPv6, so every ipFamilies/ipFamilyPolicy can be created.
DUAL_STACK_SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16,fd00:96::/108"
KUBECONFIG_TEMPLATE = """apiVersion: v1
kind: Config
clusters:
- name: controlplane
  cluster:
    server: {url}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
{credentials}
contexts:
- name: controlplane
  context:
    cluster: controlplane
    user: {user}
    namespace: default
current-context: controlplane
"""


COMPACT_REV_KEY = b"compact_rev_key"
"""The etcd key kube-apiserver keeps its last compaction revision under (storage/etcd3)."""
AUDIT_CONTROLLERS = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Request
    userGroups: ["system:serviceaccounts"]
    verbs: [create, update, patch]
    resources:
      - group: ""
        resources: ["services/status"]
      - group: coordination.k8s.io
        resources: [leases]
  - level: Metadata
    userGroups: ["system:serviceaccounts"]
  - level: None
"""
"""An audit policy (``ControlPlane(audit_policy=...)``) recording every request of every
ServiceAccount, with the request body of status writes and Lease writes (who wrote what
when, and who held the Lease then); nothing of ``system:masters`` or the server itself."""
THROTTLE_ARGS = ("--max-requests-inflight=1", "--max-mutating-requests-inflight=1")
"""kube-apiserver flags for a server concurrency limit of 2 seats: with APF every priority
level then gets one seat (``ceil``), so :meth:`ControlPlane.throttle` rejects a user's
second concurrent request. ``system:masters`` (the admin kubeconfig) is exempt."""
DEFAULT_THROTTLED: tuple[tuple[str, str], ...] = (
    ("", "nodes"),
    ("", "pods"),
    ("", "services"),
    ("", "services/status"),
    ("", "events"),
    ("discovery.k8s.io", "endpointslices"),
    ("events.k8s.io", "events"),
)
"""What :meth:`ControlPlane.throttle` limits by default: a controller's lists, watches,
status writes and Events, not its Lease (leader election stays on its usual level)."""


ControlPlaneStartError = StartError
"""etcd or kube-apiserver exited or never became ready; the message has its log tail."""


class KubectlError(subprocess.CalledProcessError):
    """A failed ``kubectl`` run; ``str()`` includes its stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr}"


# -- PKI ---------------------------------------------------------------------------------


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: Iterable[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class _Authority:
    """A throwaway CA that signs the serving certificate and client certificates."""

    def __init__(self) -> None:
        self.key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name("node-ipam-lb-test-ca"))
            .issuer_name(_name("node-ipam-lb-test-ca"))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        self.cert_pem = self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        subject: x509.Name,
        *,
        server: bool = False,
        dns_names: Sequence[str] = (),
        ips: Sequence[str] = (),
    ) -> tuple[bytes, bytes]:
        """Return ``(certificate PEM, key PEM)`` for a server or client certificate."""
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if dns_names or ips:
            sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
            sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


# -- the control plane -------------------------------------------------------------------


class ControlPlane:
    """etcd + kube-apiserver on ``https://127.0.0.1:<port>``; use as a context manager.

    ``binaries`` defaults to :func:`tests.controlplane.build.build` (cached binaries, built
    when missing). ``dual_stack`` serves IPv4 and IPv6 Service CIDRs
    (:data:`DUAL_STACK_SERVICE_CLUSTER_IP_RANGE`). After :meth:`start`: ``url``,
    ``kubeconfig_path`` (admin, client certificate in ``system:masters``, CA embedded),
    ``ca_pem``/``ca_path``, ``log_paths``.
    Start it from the main thread: the servers are tied to the starting thread's life.
    """

    def __init__(
        self,
        binaries: Binaries | None = None,
        *,
        start_timeout: float = 90.0,
        keep: bool = False,
        extra_apiserver_args: Sequence[str] = (),
        extra_etcd_args: Sequence[str] = (),
        dual_stack: bool = False,
        audit_policy: str | None = None,
        host: str = HOST,
        secure_port: int | None = None,
        command_prefix: Sequence[str] = (),
        serving_ips: Sequence[str] = (),
        serving_dns_names: Sequence[str] = (),
        authorization_mode: str = "RBAC",
        service_cluster_ip_range: str = SERVICE_CLUSTER_IP_RANGE,
        kubelet_client_certificate: bool = False,
        hosts: Mapping[str, str] | None = None,
    ) -> None:
        """``host``: the address etcd and kube-apiserver listen on and advertise (default
        127.0.0.1); ``secure_port``: kube-apiserver's port (default: a free one);
        ``command_prefix``: prepended to both servers' command lines (tests/cluster runs
        them with ``nsenter --net=/run/netns/<name>``, then ``host`` is an address in that
        namespace reachable from this one); ``serving_ips``/``serving_dns_names``: extra
        names in the serving certificate (the ``kubernetes`` Service's ClusterIP and DNS
        names for in-cluster clients); ``authorization_mode``: ``--authorization-mode``
        (``Node,RBAC`` for kubelets); ``service_cluster_ip_range``: one CIDR or a
        dual-stack pair "v4,v6"; ``kubelet_client_certificate``: give kube-apiserver a
        client certificate in ``system:masters`` for calls to kubelets (logs, exec);
        ``extra_etcd_args``: appended to etcd's command line (a benchmark's
        ``--quota-backend-bytes``)."""
        self.binaries = binaries
        self.hosts = dict(hosts or {})
        self.audit_policy = audit_policy
        self.audit_log_path: Path | None = None
        self.start_timeout = start_timeout
        self.keep = keep
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.extra_etcd_args = list(extra_etcd_args)
        self.host = host
        self.secure_port = secure_port
        self.command_prefix = list(command_prefix)
        self.serving_ips = list(serving_ips)
        self.serving_dns_names = list(serving_dns_names)
        self.authorization_mode = authorization_mode
        self.service_cluster_ip_range = (
            DUAL_STACK_SERVICE_CLUSTER_IP_RANGE if dual_stack else service_cluster_ip_range
        )
        self.kubelet_client_certificate = kubelet_client_certificate
        self.url = ""
        self.workdir = Path()
        self.kubeconfig_path = Path()
        self.ca_path = Path()
        self.ca_pem = b""
        self.log_paths: dict[str, Path] = {}
        self.etcd_url = ""  # http://127.0.0.1:<port>, etcd's client URL (its v3 JSON gateway)
        self._ca: _Authority | None = None
        self._servers: list[Server] = []
        self._tmp: str | None = None

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> Self:
        """Make the PKI, start etcd then kube-apiserver, and return once ``/readyz`` is 200.

        Raises :class:`ControlPlaneStartError` (with the log tail) if a server exits or the
        API is not ready within ``start_timeout`` seconds.
        """
        if self._tmp is not None:
            raise RuntimeError("control plane already started")
        binaries = self.binaries or build()
        self.binaries = binaries
        self._tmp = tempfile.mkdtemp(prefix="node-ipam-controlplane-")
        self.workdir = Path(self._tmp)
        try:
            self._write_pki()
            for attempt in range(3):  # a free port can be taken between probe and bind
                try:
                    self._start_servers(binaries)
                    break
                except PortTaken:
                    self._stop_servers()
                    if attempt == 2:
                        raise
            self._write_admin_kubeconfig()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop kube-apiserver, then etcd, and remove the temporary directory (unless
        ``keep``). Safe to call more than once."""
        self._stop_servers()
        if self._tmp is not None and not self.keep:
            shutil.rmtree(self._tmp, ignore_errors=True)
        self._tmp = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def poll(self) -> str | None:
        """Name of a server that has exited since start (``"etcd"``/``"kube-apiserver"``),
        else ``None``."""
        for server in self._servers:
            if server.exited() is not None:
                return server.name
        return None

    def pids(self) -> dict[str, int]:
        """Process ids of the running servers by name (``"etcd"``, ``"kube-apiserver"``),
        e.g. to read their CPU time from ``/proc`` (bench/realapi.py)."""
        return {
            server.name: server.proc.pid
            for server in self._servers
            if server.proc is not None and server.proc.poll() is None
        }

    def _hosts_wrapper(self) -> list[str]:
        """With ``hosts`` (name -> address): run kube-apiserver in a mount namespace of its
        own whose ``/etc/hosts`` has these lines too (``unshare --mount``, a bind mount;
        needs CAP_SYS_ADMIN), so a webhook ``url:`` can name a Service's DNS name (what a
        self-managed serving certificate is issued for) and reach 127.0.0.1. Nothing
        changes outside that process; the namespace ends with it."""
        if not self.hosts:
            return []
        hosts = self.workdir / "hosts"
        base = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else ""
        lines = "".join(f"{address} {name}\n" for name, address in self.hosts.items())
        hosts.write_text(base.rstrip("\n") + "\n" + lines)
        script = 'mount --bind "$0" /etc/hosts && exec "$@"'
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(hosts)]

    # -- audit ---------------------------------------------------------------------------
    def _audit_args(self) -> list[str]:
        if self.audit_policy is None:
            return []
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(self.audit_policy)
        self.audit_log_path = self.workdir / "audit.log"
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log_path}",
            "--audit-log-mode=blocking",  # each event written before the answer goes out
            "--audit-log-maxbackup=0",
        ]

    def audit_events(self) -> list[dict[str, Any]]:
        """The ``audit.k8s.io/v1`` Events written so far (``audit_policy`` given at
        construction; see :data:`AUDIT_CONTROLLERS`), oldest first; ``[]`` without."""
        if self.audit_log_path is None or not self.audit_log_path.exists():
            return []
        events = []
        for line in self.audit_log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):  # a line cut by a SIGKILL
                events.append(json.loads(line))
        return events

    # -- faults (tests/controlplane/README.md, "Faults") --------------------------------
    def _server(self, name: str) -> Server:
        for server in self._servers:
            if server.name == name:
                return server
        raise RuntimeError(f"{name} is not part of this control plane (not started?)")

    def stop_apiserver(self, *, kill: bool = False) -> None:
        """Stop kube-apiserver alone (etcd keeps running): SIGTERM and wait for its exit
        (an orderly shutdown: open watches are closed, ~1 s), or ``kill``: SIGKILL, no
        clean-up at all. Start it again with :meth:`start_apiserver`."""
        self._server("kube-apiserver").stop(kill=kill)

    def start_apiserver(self) -> float:
        """Start kube-apiserver again with exactly its first arguments: the same etcd, the
        same ``https://127.0.0.1:<port>``, PKI, service-account keys and flags, so every
        kubeconfig and token written before still works. Its log is appended to. Returns
        the seconds until ``/readyz`` answered 200; raises :class:`ControlPlaneStartError`
        if it exits or is not ready within ``start_timeout``. Call it from the main thread
        (the servers die with the thread that started them, ``PR_SET_PDEATHSIG``)."""
        apiserver = self._server("kube-apiserver")
        if apiserver.exited() is None and apiserver.proc is not None:
            raise RuntimeError("kube-apiserver is running; stop_apiserver() first")
        started = time.monotonic()
        apiserver.start(append=True)
        pki = self.workdir / "pki"
        context = self._ssl_context(pki / "admin.crt", pki / "admin.key")
        port = int(self.url.rsplit(":", 1)[1])
        self._wait(
            apiserver,
            started + self.start_timeout,
            lambda: _http_ok(self.host, port, "/readyz", context=context),
        )
        return time.monotonic() - started

    def restart_apiserver(self, kill: bool = False, *, downtime: float = 0.0) -> float:
        """:meth:`stop_apiserver` (``kill``: SIGKILL, else SIGTERM), ``downtime`` seconds
        with no API server, then :meth:`start_apiserver`; returns the seconds from the
        start until ``/readyz``. A restart drops every watch and the watch cache: clients
        come back with resourceVersions the new cache may not hold (410 Gone)."""
        self.stop_apiserver(kill=kill)
        if downtime > 0:
            time.sleep(downtime)
        return self.start_apiserver()

    def restart_etcd(self, *, kill: bool = False, downtime: float = 0.0) -> float:
        """Stop etcd (SIGTERM, or ``kill``: SIGKILL), wait ``downtime`` seconds, start it
        again on the same data directory and URLs (nothing is lost: data survives, only
        ``--unsafe-no-fsync`` writes not yet flushed could, and a SIGKILL of a process
        leaves the page cache intact). kube-apiserver keeps running and reconnects;
        returns the seconds from etcd's start until kube-apiserver's ``/readyz`` is 200
        again. Main thread only, like :meth:`start_apiserver`."""
        etcd = self._server("etcd")
        etcd.stop(kill=kill)
        if downtime > 0:
            time.sleep(downtime)
        started = time.monotonic()
        deadline = started + self.start_timeout
        etcd.start(append=True)
        port = int(self.etcd_url.rsplit(":", 1)[1])
        self._wait(etcd, deadline, lambda: _http_ok(self.host, port, "/health"))
        pki = self.workdir / "pki"
        context = self._ssl_context(pki / "admin.crt", pki / "admin.key")
        api_port = int(self.url.rsplit(":", 1)[1])
        self._wait(
            self._server("kube-apiserver"),
            deadline,
            lambda: _http_ok(self.host, api_port, "/readyz", context=context),
        )
        return time.monotonic() - started

    def etcd(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to etcd's v3 JSON gateway (``/v3/kv/range``, ``/v3/kv/put``,
        ``/v3/kv/compaction``, ``/v3/maintenance/defragment``, …; bytes fields are
        base64, int64 fields decimal strings) on its client URL; returns the decoded
        answer. Raises ``RuntimeError`` with etcd's message on a non-200 answer (e.g.
        "mvcc: required revision has been compacted")."""
        port = int(self.etcd_url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection(HOST, port, timeout=30)
        try:
            conn.request(
                "POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"}
            )
            response = conn.getresponse()
            raw = response.read().decode()
        finally:
            conn.close()
        if response.status != 200:
            raise RuntimeError(f"etcd {path}: {response.status} {raw[:300]}")
        answer: dict[str, Any] = json.loads(raw)
        return answer

    def etcd_revision(self) -> int:
        """etcd's current revision (the header of a range read; the resourceVersion the
        next write gets is one more)."""
        answer = self.etcd("/v3/kv/range", {"key": _b64(COMPACT_REV_KEY)})
        return int(answer["header"]["revision"])

    def compact_etcd(self, *, defragment: bool = True) -> int:
        """Compact etcd to its current revision, as kube-apiserver's own compactor does
        every ``--etcd-compaction-interval`` (5 min; apiserver storage/etcd3/compact.go):
        first ``compact_rev_key`` is set to the revision (kube-apiserver watches that key:
        its watch cache then drops List snapshots older than it within ~15 s, so a
        continue token of a List that started before answers ``410 Expired``), then
        ``/v3/kv/compaction`` (physical), then ``/v3/maintenance/defragment`` unless
        ``defragment`` is false. Every resourceVersion older than the returned revision is
        gone in etcd: a watch or a paginated List served from etcd (``--watch-cache=false``,
        or a continue token) from before it gets ``410 Gone``. Returns the revision."""
        key = _b64(COMPACT_REV_KEY)
        for _ in range(10):  # another write may land between the read and the put
            revision = self.etcd_revision() + 1  # what the put below will be
            put = self.etcd("/v3/kv/put", {"key": key, "value": _b64(str(revision).encode())})
            if int(put["header"]["revision"]) == revision:
                break
        else:
            revision = int(put["header"]["revision"])
        self.etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        if defragment:
            self.etcd("/v3/maintenance/defragment", {})
        return revision

    def throttle(
        self,
        user: str,
        *,
        name: str = "test-throttle",
        resources: Sequence[tuple[str, str]] = DEFAULT_THROTTLED,
        shares: int = 1,
    ) -> None:
        """API Priority and Fairness for ``user`` (e.g.
        ``system:serviceaccount:node-ipam-lb:node-ipam-lb``): a PriorityLevelConfiguration
        ``name`` with ``nominalConcurrencyShares: shares``, no lending or borrowing and
        ``limitResponse: Reject``, and a FlowSchema ``name`` (matchingPrecedence 100, before
        every default one but the exempt) sending that user's requests for ``resources``
        (``(apiGroup, resource)``, ``"*"`` for all; subresources as ``services/status``)
        there. A request beyond the level's seats is answered at once ``429`` with
        ``Retry-After`` (1 s, doubling up to 60 s while drops keep coming: apiserver
        flowcontrol/dropped_requests_tracker.go). Seats: ``ceil(server limit x shares /
        sum of all levels' shares)``, the server limit being ``--max-requests-inflight`` +
        ``--max-mutating-requests-inflight`` (400 + 200): start the plane with
        ``extra_apiserver_args=THROTTLE_ARGS`` for one seat. Takes effect within ~1 s
        (the APF controller's informer); :meth:`unthrottle` removes both."""
        version = "flowcontrol.apiserver.k8s.io/v1"
        level = {
            "apiVersion": version,
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": shares,
                    "lendablePercent": 0,
                    "borrowingLimitPercent": 0,
                    "limitResponse": {"type": "Reject"},
                },
            },
        }
        groups: dict[str, list[str]] = {}
        for group, resource in resources:
            groups.setdefault(group, []).append(resource)
        schema = {
            "apiVersion": version,
            "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": name},
                "matchingPrecedence": 100,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": user}}],
                        "resourceRules": [
                            {
                                "verbs": ["*"],
                                "apiGroups": [group],
                                "resources": names,
                                "clusterScope": True,
                                "namespaces": ["*"],
                            }
                            for group, names in sorted(groups.items())
                        ],
                    }
                ],
            },
        }
        base = f"/apis/{version}"
        for plural, body in (("prioritylevelconfigurations", level), ("flowschemas", schema)):
            status, answer = self.request("POST", f"{base}/{plural}", body)
            if status == 409:
                status, answer = self.request(
                    "PUT",
                    f"{base}/{plural}/{name}",
                    _latest(self.request("GET", f"{base}/{plural}/{name}")[1], body),
                )
            if status not in (200, 201):
                raise RuntimeError(f"throttle: {plural}/{name}: {status} {answer}")

    def unthrottle(self, name: str = "test-throttle") -> None:
        """Delete the FlowSchema and PriorityLevelConfiguration of :meth:`throttle`."""
        base = "/apis/flowcontrol.apiserver.k8s.io/v1"
        for plural in ("flowschemas", "prioritylevelconfigurations"):
            status, answer = self.request("DELETE", f"{base}/{plural}/{name}")
            if status not in (200, 404):
                raise RuntimeError(f"unthrottle: {plural}/{name}: {status} {answer}")

    # -- set-up steps --------------------------------------------------------------------
    def _write_pki(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir()
        self._ca = _Authority()
        self.ca_pem = self._ca.cert_pem
        self.ca_path = pki / "ca.crt"
        self.ca_path.write_bytes(self.ca_pem)
        ips = list(dict.fromkeys([HOST, self.host, *self.serving_ips]))
        cert, key = self._ca.issue(
            _name("kube-apiserver"),
            server=True,
            dns_names=["localhost", *self.serving_dns_names],
            ips=ips,
        )
        (pki / "apiserver.crt").write_bytes(cert)
        (pki / "apiserver.key").write_bytes(key)
        cert, key = self.client_certificate("admin", ["system:masters"])
        (pki / "admin.crt").write_bytes(cert)
        (pki / "admin.key").write_bytes(key)
        if self.kubelet_client_certificate:
            cert, key = self.client_certificate("kube-apiserver-kubelet-client", ["system:masters"])
            (pki / "kubelet-client.crt").write_bytes(cert)
            (pki / "kubelet-client.key").write_bytes(key)
        sa_key = _new_key()
        (pki / "sa.key").write_bytes(_key_pem(sa_key))
        (pki / "sa.pub").write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        for path in pki.iterdir():
            if path.suffix == ".key":
                path.chmod(0o600)

    def _start_servers(self, binaries: Binaries) -> None:
        pki = self.workdir / "pki"
        deadline = time.monotonic() + self.start_timeout
        client_port, peer_port = free_port(HOST), free_port(HOST)
        secure_port = self.secure_port or free_port(HOST)
        host = self.host
        etcd_url = f"http://{host}:{client_port}"
        peer_url = f"http://{host}:{peer_port}"
        data_dir = self.workdir / "etcd-data"
        shutil.rmtree(data_dir, ignore_errors=True)
        etcd = Server(
            "etcd",
            [
                *self.command_prefix,
                str(binaries.etcd),
                "--name=default",
                f"--data-dir={data_dir}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",
                "--log-level=warn",
                *self.extra_etcd_args,
            ],
            self.workdir / "etcd.log",
        )
        self.log_paths["etcd"] = etcd.log_path
        self._servers.append(etcd)
        etcd.start()
        self._wait(etcd, deadline, lambda: _http_ok(host, client_port, "/health"))
        self.etcd_url = etcd_url

        url = f"https://{host}:{secure_port}"
        kubelet_client = (
            [
                f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'kubelet-client.key'}",
            ]
            if self.kubelet_client_certificate
            else []
        )
        apiserver = Server(
            "kube-apiserver",
            [
                *self.command_prefix,
                *self._hosts_wrapper(),
                str(binaries.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={host}",
                f"--advertise-address={host}",
                f"--secure-port={secure_port}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--authorization-mode={self.authorization_mode}",
                f"--service-account-issuer={url}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={self.service_cluster_ip_range}",
                "--allow-privileged=true",
                "--profiling=false",
                *self._audit_args(),
                *kubelet_client,
                *self.extra_apiserver_args,
            ],
            self.workdir / "kube-apiserver.log",
        )
        self.log_paths["kube-apiserver"] = apiserver.log_path
        self._servers.append(apiserver)
        apiserver.start()
        context = self._ssl_context(pki / "admin.crt", pki / "admin.key")
        self._wait(
            apiserver, deadline, lambda: _http_ok(host, secure_port, "/readyz", context=context)
        )
        self.url = url

    def _wait(self, server: Server, deadline: float, ready: Any) -> None:
        while True:
            server.check_alive()
            if ready():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneStartError(
                    f"{server.name} not ready after {self.start_timeout:.0f} s; "
                    f"log {server.log_path}:\n{tail(server.log_path)}"
                )
            time.sleep(0.1)

    def _stop_servers(self) -> None:
        for server in reversed(self._servers):
            server.stop()
        self._servers = []

    def _write_admin_kubeconfig(self) -> None:
        self.kubeconfig_path = self.workdir / "kubeconfig"
        pki = self.workdir / "pki"
        self.write_kubeconfig(
            self.kubeconfig_path,
            user="admin",
            cert_pem=(pki / "admin.crt").read_bytes(),
            key_pem=(pki / "admin.key").read_bytes(),
        )

    # -- credentials ---------------------------------------------------------------------
    def client_certificate(self, user: str, groups: Sequence[str] = ()) -> tuple[bytes, bytes]:
        """``(certificate PEM, key PEM)`` signed by the cluster CA: the API server
        authenticates it as ``user`` (CN) in ``groups`` (O)."""
        if self._ca is None:
            raise RuntimeError("control plane not started")
        return self._ca.issue(_name(user, groups))

    def write_kubeconfig(
        self,
        path: Path,
        *,
        user: str,
        cert_pem: bytes | None = None,
        key_pem: bytes | None = None,
        token: str | None = None,
    ) -> Path:
        """Write a kubeconfig for this server (CA embedded, context ``controlplane``,
        namespace ``default``) authenticating with a client certificate or a bearer token."""
        if token is not None:
            credentials = f"    token: {token}"
        elif cert_pem is not None and key_pem is not None:
            credentials = (
                f"    client-certificate-data: {_b64(cert_pem)}\n"
                f"    client-key-data: {_b64(key_pem)}"
            )
        else:
            raise ValueError("give cert_pem and key_pem, or token")
        path = Path(path)
        path.write_text(
            KUBECONFIG_TEMPLATE.format(
                url=self.url, ca=_b64(self.ca_pem), user=user, credentials=credentials
            )
        )
        path.chmod(0o600)
        return path

    def kubeconfig_for(
        self, user: str, groups: Sequence[str] = (), *, path: Path | None = None
    ) -> Path:
        """A kubeconfig with a fresh client certificate for ``user`` in ``groups`` (RBAC
        applies to it; only ``system:masters`` bypasses RBAC)."""
        cert, key = self.client_certificate(user, groups)
        safe = "".join(c if c.isalnum() else "-" for c in user)
        path = path or self.workdir / f"kubeconfig-{safe}"
        return self.write_kubeconfig(path, user=user, cert_pem=cert, key_pem=key)

    def token_for(
        self,
        namespace: str,
        serviceaccount: str,
        *,
        audiences: Sequence[str] = (),
        expiration_seconds: int = 3600,
    ) -> str:
        """A bound service-account token from the TokenRequest API (what
        ``kubectl create token`` does). The ServiceAccount must exist."""
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = list(audiences)
        status, body = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{serviceaccount}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        if status != 201:
            raise RuntimeError(f"TokenRequest for {namespace}/{serviceaccount}: {status} {body}")
        return str(body["status"]["token"])

    # -- talking to it -------------------------------------------------------------------
    def _ssl_context(self, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        if cert is not None:
            context.load_cert_chain(cert, key)
        return context

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """One HTTP request to the API server as admin (or with ``token``); returns
        ``(status, decoded JSON body or text)``."""
        pki = self.workdir / "pki"
        if token is None:
            context = self._ssl_context(pki / "admin.crt", pki / "admin.key")
        else:
            context = self._ssl_context()
        port = int(self.url.rsplit(":", 1)[1])
        conn = http.client.HTTPSConnection(self.host, port, context=context, timeout=30)
        headers = {"Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read().decode()
        finally:
            conn.close()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, raw

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig <admin> ARGS`` (``input`` on stdin) and return the
        completed process; raises :class:`KubectlError` (with stderr) when ``check`` and it
        fails. A later ``--kubeconfig`` in ``args`` wins over the admin one."""
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig_path}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, result.args, result.stdout, result.stderr)
        return result

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """A ``kubernetes.client.ApiClient`` for the admin kubeconfig (or ``kubeconfig``);
        close it (or use ``with``) when done."""
        import kubernetes.client
        import kubernetes.config

        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            config_file=str(kubeconfig or self.kubeconfig_path),
            client_configuration=configuration,
        )
        return kubernetes.client.ApiClient(configuration)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _latest(current: Any, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with ``current``'s resourceVersion, for a PUT over an existing object."""
    version = (
        current.get("metadata", {}).get("resourceVersion") if isinstance(current, dict) else None
    )
    return {**body, "metadata": {**body["metadata"], "resourceVersion": version}}


def _http_ok(host: str, port: int, path: str, *, context: ssl.SSLContext | None = None) -> bool:
    conn: http.client.HTTPConnection
    if context is None:
        conn = http.client.HTTPConnection(host, port, timeout=2)
    else:
        conn = http.client.HTTPSConnection(host, port, context=context, timeout=2)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()
