"""Each NodeAddressPool's ``Accepted`` condition (docs/design.md §4.13), through the running
Controller on the in-memory API, which applies the status subresource's JSON merge patch
and a custom resource's ``metadata.generation`` as kube-apiserver does: written by the
Lease holder alone, once per change, ``lastTransitionTime`` moving only on a flip,
retried after a failure, and rewritten by a new holder or after someone else's edit.
"""

from __future__ import annotations

import time
from typing import Any

from app.controller.cache import ClusterCache
from app.controller.poolstatus import INVALID_SPEC, VALID
from app.core.pools import ACCEPTED, pool_from_object
from tests.controller.memory_api import MemoryAPI
from tests.controller.support import Start, wait_until
from tests.support.objects import node_address_pool as pool

PATCH = "patch nodeaddresspools/status"


BAD_SELECTOR = {"matchLabels": {"role": "edge!"}}
"""A label value the schema cannot check (a pattern would not fit the CEL budget) and
:func:`~app.core.pools.pool_from_object` refuses."""


def writes(api: MemoryAPI) -> int:
    return api.calls[PATCH]


def condition(api: MemoryAPI, name: str) -> dict[str, Any]:
    found = wait_until(lambda: api.pool_condition(name), what=f"the condition of {name}")
    assert isinstance(found, dict)
    return found


def settled(api: MemoryAPI, seconds: float = 0.4) -> int:
    """The write count once ``seconds`` passed without a write (the echoes handled)."""
    while True:
        before = writes(api)
        time.sleep(seconds)
        if writes(api) == before:
            return before


def test_a_valid_pool_is_accepted_once_and_not_written_again(
    memory_api: MemoryAPI, start: Start
) -> None:
    memory_api.apply("nodeaddresspools", pool("edge", serviceAllocation={"namespaces": ["a"]}))
    start(leader_elect=False, wall_clock=lambda: 1_800_000_000.0)
    found = condition(memory_api, "edge")
    assert found == {
        "type": ACCEPTED,
        "status": "True",
        "reason": VALID,
        "message": found["message"],
        "observedGeneration": 1,
        "lastTransitionTime": "2027-01-15T08:00:00Z",
    }
    assert settled(memory_api) == 1
    # A change of metadata alone (no new generation) and the echo write nothing.
    labelled = pool("edge", serviceAllocation={"namespaces": ["a"]})
    labelled["metadata"]["labels"] = {"owner": "platform"}
    memory_api.apply("nodeaddresspools", labelled)
    assert settled(memory_api) == 1


def test_an_invalid_pool_is_refused_naming_the_field_and_flips_when_fixed(
    memory_api: MemoryAPI, start: Start
) -> None:
    now = [1_800_000_000.0]
    memory_api.apply("nodeaddresspools", pool("edge", nodeSelector=BAD_SELECTOR))
    start(leader_elect=False, wall_clock=lambda: now[0])
    refused = condition(memory_api, "edge")
    assert (refused["status"], refused["reason"]) == ("False", INVALID_SPEC)
    assert refused["message"].startswith(
        'spec.nodeSelector.matchLabels[role]: Invalid value: "edge!"'
    ), refused
    assert "applies to no Service" in refused["message"]
    assert settled(memory_api) == 1
    now[0] += 60
    memory_api.apply("nodeaddresspools", pool("edge", nodeSelector={"matchLabels": {"a": "b"}}))
    wait_until(lambda: condition(memory_api, "edge")["status"] == "True", what="the flip")
    fixed = condition(memory_api, "edge")
    assert fixed["reason"] == VALID and fixed["observedGeneration"] == 2
    assert refused["lastTransitionTime"] == "2027-01-15T08:00:00Z"
    assert fixed["lastTransitionTime"] == "2027-01-15T08:01:00Z"
    assert settled(memory_api) == 2


def test_a_new_generation_that_decides_the_same_still_moves_observed_generation(
    memory_api: MemoryAPI, start: Start
) -> None:
    """Reordering ``namespaces`` is a new generation but the same pool for the decision
    (no Service is requeued for it): the condition follows the generation anyway, with
    its ``lastTransitionTime`` kept (no flip)."""
    memory_api.apply("nodeaddresspools", pool("p", serviceAllocation={"namespaces": ["a", "b"]}))
    now = [1_800_000_000.0]
    start(leader_elect=False, wall_clock=lambda: now[0])
    first = condition(memory_api, "p")
    now[0] += 60
    memory_api.apply("nodeaddresspools", pool("p", serviceAllocation={"namespaces": ["b", "a"]}))
    wait_until(lambda: condition(memory_api, "p")["observedGeneration"] == 2, what="generation 2")
    assert condition(memory_api, "p")["lastTransitionTime"] == first["lastTransitionTime"]
    assert settled(memory_api) == 2


def test_someone_elses_edit_of_the_condition_is_rewritten(
    memory_api: MemoryAPI, start: Start
) -> None:
    memory_api.apply("nodeaddresspools", pool("edge", nodeSelector=BAD_SELECTOR))
    start(leader_elect=False)
    condition(memory_api, "edge")
    ours = settled(memory_api)
    memory_api.patch_pool_status(name="edge", patch={"status": {"conditions": []}})
    wait_until(lambda: memory_api.pool_condition("edge"), what="rewritten")
    assert condition(memory_api, "edge")["reason"] == INVALID_SPEC
    assert settled(memory_api) == ours + 2  # the edit and one rewrite


def test_a_failed_write_is_retried_with_backoff(memory_api: MemoryAPI, start: Start) -> None:
    controller = start(leader_elect=False)
    wait_until(controller.ready, what="synced")
    memory_api.fail(PATCH, 500, 0)
    memory_api.apply("nodeaddresspools", pool("edge"))
    assert condition(memory_api, "edge")["status"] == "True"
    assert settled(memory_api) == 3
    first, second, third = memory_api.call_times[PATCH]
    assert second - first > 0.4 and third - second > 0.8, "0.5 s, then 1 s"


def lease_held_by(api: MemoryAPI, holder: str, seconds: int) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    api.create_lease(
        namespace="kube-system",
        body={
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "node-ipam-lb", "namespace": "kube-system"},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": seconds,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        },
    )


def test_a_follower_writes_nothing_and_writes_once_it_holds_the_lease(
    memory_api: MemoryAPI, start: Start
) -> None:
    lease_held_by(memory_api, "pod-z", seconds=60)
    memory_api.apply("nodeaddresspools", pool("good"))
    memory_api.apply("nodeaddresspools", pool("bad", nodeSelector=BAD_SELECTOR))
    follower = start("pod-b")
    wait_until(follower.ready, what="synced")
    memory_api.apply("nodeaddresspools", pool("good", ports=[{"port": 80}]))  # a change
    time.sleep(0.5)
    assert not follower.is_leader()
    assert writes(memory_api) == 0 and memory_api.pool_condition("good") is None
    # pod-z hands the Lease back (released: no holder): pod-b's term writes both.
    lease = memory_api.leases["kube-system/node-ipam-lb"]
    memory_api.replace_lease(
        namespace="kube-system",
        name="node-ipam-lb",
        body={**lease, "spec": {**lease["spec"], "holderIdentity": ""}},
    )
    wait_until(follower.is_leader, what="pod-b leads")
    assert condition(memory_api, "good")["observedGeneration"] == 2
    assert condition(memory_api, "bad")["reason"] == INVALID_SPEC
    assert settled(memory_api) == 2


def test_a_change_of_status_alone_keeps_the_pool_set() -> None:
    """A pool's status (its stored condition) is no input of a decision: the cache keeps
    its PoolSet, so the decisions' memo (keyed by its identity) stays."""
    cache = ClusterCache()
    obj = pool("edge", ports=[{"port": 80}])
    obj["metadata"]["generation"] = 1
    cache.put("nodeaddresspools", "edge", pool_from_object(obj))
    pools = cache.pools()
    obj["status"] = {
        "conditions": [
            {
                "type": ACCEPTED,
                "status": "True",
                "reason": VALID,
                "message": "",
                "lastTransitionTime": "2027-01-15T08:00:00Z",
            }
        ]
    }
    seen = pool_from_object(obj)
    assert seen.accepted is not None and seen.accepted.reason == VALID
    cache.put("nodeaddresspools", "edge", seen)
    assert cache.pools() is pools
    assert cache.pool_views()[0].accepted == seen.accepted, "the newest status is kept"
    obj["spec"]["ports"] = [{"port": 443}]
    cache.put("nodeaddresspools", "edge", pool_from_object(obj))
    assert cache.pools() is not pools
