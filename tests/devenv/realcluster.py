"""The walk-through on the real cluster of tests/cluster (``python -m tests.devenv --api
cluster``, and what ``auto`` picks when that cluster can run here).

Steps, each printed with the command it stands for:

1. the cluster: :class:`tests.cluster.cluster.Cluster`, what ``python -m tests.cluster up
   --nodes N --kubeconfig PATH`` runs (kubelet, containerd, kube-proxy per node in network
   namespaces; the images, the project's among them, imported on every node);
2. node-ipam-lb installed with Helm as deploy/README.md, "Install with Helm", says: its
   first ``sh`` block, run command by command, without the ``--set image.repository=``
   placeholder (the chart's default image, ``node-ipam-lb:<version>``, is what step 1
   imported on every node, as ``kind load`` would);
3. a backend Deployment (``app: nginx-pod``, tests/cluster's backend image) and the
   Services of ``examples/kind-4node/cluster.yaml``, rendered for this cluster's nodes
   (:func:`tests.devenv.manifests.example_services_for`: ``kind-worker`` -> ``node-1``
   ..., ``targetPort`` 80 -> 8080);
4. ``kubectl get svc -A`` once every Service of ours has settled, a Service with a
   malformed selector denied by the webhook Pod, ``node-ipam-lb preview -A -o wide``;
5. one HTTP request to each published ``EXTERNAL-IP:port`` from the cluster's client
   network namespace (``ip netns exec <client> curl``, made by
   :func:`tests.cluster.traffic.http_get`), each answered by a backend Pod;
6. waits for Ctrl-C or SIGTERM (or stops at once with ``--once``), then removes the
   cluster with its own teardown (:meth:`Cluster.stop`: processes, mounts, cgroups,
   namespaces, files); its logs are kept in ``<workdir>/cluster-logs``.

Needs root and what tests/cluster needs (README.md there); ``python -m tests.devenv``
checks that first (:func:`tests.devenv.__main__.cluster_unavailable`).
"""

from __future__ import annotations

import http.client
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from tests.cluster.cluster import Cluster
from tests.cluster.images import BACKEND_IMAGE, product_ref
from tests.cluster.netns import ClusterError
from tests.cluster.traffic import http_get, in_netns
from tests.controlplane.__main__ import _on_signal, _Stop
from tests.controlplane.build import ControlPlaneUnavailable, find_helm
from tests.deploy.helmchart import environment
from tests.deploy.readme import code_blocks, section
from tests.devenv.manifests import CLASS, example_backend, example_services_for
from tests.devenv.session import ROOT, DevEnvError, Session, apply, show, show_result

PLACEHOLDER = "image.repository=registry.example.org/"
"""The README's ``--set`` for an image pushed to a registry (a placeholder there)."""


def helm_install_commands() -> list[list[str]]:
    """The commands of deploy/README.md's "Install with Helm" block (its first ``sh``
    block), split as a shell would (``\\`` continuations joined, comments dropped), the
    ``--set image.repository=registry.example.org/...`` placeholder left out.

    Raises:
        DevEnvError: the block does not hold the commands this walk-through runs (a
            ``kubectl`` or ``helm install`` line each), so the README changed shape.
    """
    block = code_blocks(section("Install with Helm"), "sh")[0]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        kept: list[str] = []
        for word in words:
            if word.startswith((PLACEHOLDER, f"--set={PLACEHOLDER}")):
                if kept[-1:] == ["--set"]:
                    kept.pop()
                continue
            kept.append(word)
        commands.append(kept)
    if not any(c[:2] == ["helm", "install"] for c in commands) or any(
        c[0] not in ("kubectl", "helm") for c in commands
    ):
        raise DevEnvError(f"deploy/README.md, Install with Helm: unexpected commands {commands}")
    return commands


def install_chart(session: Session, helm: Path) -> None:
    """Run :func:`helm_install_commands` against the session's cluster (``helm`` with a
    private configuration, as tests/deploy runs it).

    Raises:
        DevEnvError: a command failed.
    """
    for command in helm_install_commands():
        shown = shlex.join(command)
        if command[:2] == ["helm", "install"]:
            shown += f"   # the chart's default image {product_ref()}, imported on every node"
        session.say(f"$ {shown}")
        if command[0] == "helm":
            result = subprocess.run(
                [str(helm), *command[1:]], cwd=ROOT, env=environment(session.kubeconfig),
                capture_output=True, text=True, timeout=session.timeout, check=False,
            )  # fmt: skip
        else:
            result = session.kubectl(*command[1:], timeout=session.timeout)
        show(session, result)
        if result.returncode != 0:
            raise DevEnvError(f"{shlex.join(command)} failed (exit {result.returncode})")


def apply_example(session: Session, nodes: list[str]) -> None:
    """The backend (one Pod per node) and the example's Services rendered for ``nodes``."""
    apply(
        session,
        [example_backend(replicas=len(nodes), image=BACKEND_IMAGE)],
        f"backend.yaml   # Deployment nginx (app=nginx-pod), {len(nodes)} Pods of {BACKEND_IMAGE}",
    )
    session.say("$ kubectl rollout status deployment/nginx")
    rolled = session.kubectl("rollout", "status", "deployment/nginx", timeout=session.timeout)
    show(session, rolled)
    if rolled.returncode != 0:
        raise DevEnvError("the backend did not roll out")
    services, mapping = example_services_for(nodes)
    renamed = ", ".join(f"{kind} -> {node}" for kind, node in mapping.items())
    apply(
        session,
        services,
        f"examples/kind-4node/cluster.yaml   # its Services only; {renamed}; targetPort 8080",
    )


def published(session: Session) -> list[tuple[str, str, int]]:
    """``(namespace/name, ip, port)`` of every address a Service of ours has, first port."""
    result = session.kubectl("get", "services", "-A", "-o", "json")
    if result.returncode != 0:
        raise DevEnvError(f"kubectl get services: {result.stderr.strip()}")
    found = []
    for svc in json.loads(result.stdout)["items"]:
        if svc["spec"].get("loadBalancerClass") != CLASS or not svc["spec"].get("ports"):
            continue
        name = f"{svc['metadata']['namespace']}/{svc['metadata']['name']}"
        port = int(svc["spec"]["ports"][0]["port"])
        for entry in svc.get("status", {}).get("loadBalancer", {}).get("ingress", []):
            if entry.get("ip"):
                found.append((name, entry["ip"], port))
    return found


def get_from(session: Session, client_netns: str, ip: str, port: int) -> str | None:
    """The body of one ``GET http://ip:port/`` sent from ``client_netns``, or ``None``
    when it failed (the error goes to the log)."""
    try:
        return in_netns(client_netns, lambda: http_get(ip, port))
    except (OSError, http.client.HTTPException, RuntimeError) as err:
        session.note(f"GET {ip} port {port} from {client_netns}: {err}")
        return None


def curl(session: Session, client_netns: str) -> None:
    """One ``GET /`` to every published address from ``client_netns``, each retried every
    0.5 s until it answers (kube-proxy programs a new address within a second or two).

    Raises:
        DevEnvError: nothing published, or an address that did not answer in time.
    """
    targets = published(session)
    if not targets:
        raise DevEnvError("no Service of ours has an address")
    for name, ip, port in targets:
        url = f"http://{f'[{ip}]' if ':' in ip else ip}:{port}/"
        session.say(f"$ ip netns exec {client_netns} curl -s {url}   # {name}")
        deadline = time.monotonic() + session.timeout
        while (body := get_from(session, client_netns, ip, port)) is None:
            if time.monotonic() > deadline:
                raise DevEnvError(
                    f"{url} did not answer from {client_netns}; see {session.log_path}"
                )
            time.sleep(0.5)
        session.say(body.rstrip("\n"))


def run_cluster(
    *,
    nodes: int = 3,
    workdir: Path,
    once: bool = False,
    timeout: float = 180.0,
    out: IO[str] = sys.stdout,
) -> int:
    """Run the walk-through (module docstring); return 0 when done (or stopped by a
    signal), 1 when a step failed (its reason printed, the logs named)."""
    helm = find_helm()
    if helm is None:
        print("devenv: helm is not built: python3 -m tests.controlplane build", file=out)
        return 1
    session = Session(workdir=workdir, out=out, timeout=timeout)
    session.say(f"devenv: logs go to {session.log_path} and {workdir / 'cluster-logs'}")
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    cluster: Cluster | None = None
    code = 0
    try:
        session.say(
            f"$ python -m tests.cluster up --nodes {nodes} --kubeconfig {session.kubeconfig}"
            "   # images imported on every node"
        )
        started = time.monotonic()
        cluster = Cluster(nodes, keep_logs=workdir / "cluster-logs")
        cluster.start()
        shutil.copyfile(cluster.kubeconfig_path, session.kubeconfig)
        session.kubeconfig.chmod(0o600)
        session.say(
            f"  cluster {cluster.id}: {nodes} nodes Ready in {time.monotonic() - started:.1f} s,"
            f" API {cluster.url}, client network namespace {cluster.client_netns},"
            f" work dir {cluster.workdir}"
        )
        for node in cluster.nodes:
            external = f", ExternalIPs {node.external_ipv4} {node.external_ipv6}"
            session.say(
                f"  {node.name}: InternalIPs {node.ipv4} {node.ipv6}"
                + (external if node.external_ipv4 else "")
            )
        install_chart(session, helm)
        apply_example(session, [node.name for node in cluster.nodes])
        show_result(session)
        curl(session, cluster.client_netns)
        session.say()
        session.say(f"Try it:  export KUBECONFIG={session.kubeconfig}; kubectl get svc -A -w")
        session.say(f"         ip netns exec {cluster.client_netns} <command>   # the client side")
        if once:
            session.say("--once: stopping now.")
        else:
            session.say(f"Stop it: press Ctrl-C (or kill -TERM {os.getpid()}).")
            while (dead := cluster.poll()) is None:
                time.sleep(1.0)
            raise DevEnvError(f"the cluster lost a process: {dead}")
    except _Stop:
        code = 0
    except (
        DevEnvError, ClusterError, ControlPlaneUnavailable, OSError, subprocess.SubprocessError,
    ) as err:  # fmt: skip
        session.say(f"devenv: {err}")
        code = 1
    finally:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)  # the teardown must run to its end
        if cluster is not None:
            session.say("removing the cluster ...")
            stopping = time.monotonic()
            try:
                cluster.stop()
            except ClusterError as err:
                session.say(f"devenv: {err}")
                code = code or 1
            session.say(f"  removed in {time.monotonic() - stopping:.1f} s")
        session.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        session.say(f"stopped. Logs: {session.log_path}, {workdir / 'cluster-logs'}")
    return code
