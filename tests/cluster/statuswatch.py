"""Every status of one Service as the API server hands it out, from a watch (tests/cluster):
for a test that must assert on *every* observation, not on a poll that could fall between
two writes (a node republished for a second and taken out again).

:class:`IngressWatch` lists the Service, then watches it from the list's
``resourceVersion`` on a thread (``kubernetes`` client, ``field_selector
metadata.name=<name>``), as a client-go informer does: each ADDED/MODIFIED event is one
observation; a watch that ends (its ``timeoutSeconds``, a dropped connection) is resumed
from the last ``resourceVersion`` seen; one that is too old (410 Gone) starts over with a
list, whose result is an observation too.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from tests.cluster.cluster import Cluster

WATCH_SECONDS = 2
"""``timeoutSeconds`` of each watch request: how soon the thread sees that it should stop."""


@dataclass(frozen=True)
class Observation:
    """One status seen: ``at`` (``time.monotonic()`` when it arrived), the object's
    ``resourceVersion`` and its ``status.loadBalancer.ingress`` IPs in API order (``[]``:
    none, or the Service deleted)."""

    at: float
    resource_version: str
    ips: tuple[str, ...]


def ingress_ips_of(service: dict[str, Any]) -> tuple[str, ...]:
    """``status.loadBalancer.ingress[*].ip`` of a Service body (a dict), in API order."""
    entries = (service.get("status") or {}).get("loadBalancer", {}).get("ingress") or []
    return tuple(str(entry["ip"]) for entry in entries if entry.get("ip"))


class IngressWatch:
    """Watch Service ``namespace/name`` while the ``with`` block runs (module docstring);
    ``observations`` (a list of :class:`Observation`, in arrival order) holds every status
    seen, the first from the initial list (entering waits for it, up to 30 s: raises
    ``TimeoutError``), ``errors`` what interrupted a watch."""

    def __init__(self, cluster: Cluster, namespace: str, name: str) -> None:
        self.cluster, self.namespace, self.name = cluster, namespace, name
        self.observations: list[Observation] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._listed = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch {name}")

    def __enter__(self) -> IngressWatch:
        self._thread.start()
        if not self._listed.wait(30):
            self.__exit__()
            raise TimeoutError(f"no list of {self.namespace}/{self.name} in 30 s: {self.errors}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(WATCH_SECONDS + 10)

    def _observe(self, body: dict[str, Any]) -> str:
        version = str(body["metadata"]["resourceVersion"])
        self.observations.append(Observation(time.monotonic(), version, ingress_ips_of(body)))
        return version

    def _run(self) -> None:
        import kubernetes.client

        assert self.cluster.plane is not None
        selector = f"metadata.name={self.name}"
        with self.cluster.plane.api_client() as api:
            core = kubernetes.client.CoreV1Api(api)
            version = ""
            while not self._stop.is_set():
                try:
                    if not version:
                        listed = core.list_namespaced_service(
                            self.namespace, field_selector=selector, _preload_content=False
                        )
                        body = _json(listed)
                        version = str(body["metadata"]["resourceVersion"])
                        for item in body["items"]:
                            self._observe(item)
                        self._listed.set()
                    version = self._watch(core, selector, version)
                except Exception as err:  # a dropped connection, a 410 (an ERROR event): list again
                    self.errors.append(f"{type(err).__name__}: {err}"[:300])
                    version = ""
                    self._stop.wait(0.2)

    def _watch(self, core: Any, selector: str, version: str) -> str:
        """One watch request from ``version``; returns the last ``resourceVersion`` seen."""
        import kubernetes.watch

        stream = kubernetes.watch.Watch()
        for event in stream.stream(
            core.list_namespaced_service, self.namespace, field_selector=selector,
            resource_version=version, timeout_seconds=WATCH_SECONDS,
            _request_timeout=WATCH_SECONDS + 5, deserialize=False,
        ):  # fmt: skip
            kind, body = event["type"], event["object"]
            if kind in ("ADDED", "MODIFIED"):
                version = self._observe(body)
            elif kind == "DELETED":
                version = str(body["metadata"]["resourceVersion"])
                self.observations.append(Observation(time.monotonic(), version, ()))
            if self._stop.is_set():
                stream.stop()
        return version


def _json(response: Any) -> Any:
    """The decoded body of a ``_preload_content=False`` response (a urllib3 response)."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()
