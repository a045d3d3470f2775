"""Cilium's kube-proxy replacement read from ``kube-system/cilium-config`` and the agent
Pods' images, and the hazard of its wildcard service entries (docs/design.md §4.12)."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.ciliumkpr import (
    FIXED_IN,
    CiliumConfig,
    Version,
    agent_images,
    assess,
    image_version,
    parse_version,
    read_config,
)
from app.core.hazards import CILIUM_WILDCARD_ENTRIES, KUBE_PROXY_IPVS, Hazard, concerning

IMAGE = "quay.io/cilium/cilium:{}@sha256:41f1f74a0000de865"


def config_map(**data: Any) -> dict[str, Any]:
    """``kube-system/cilium-config`` with ``data`` (keys with ``_`` for ``-``), as Cilium's
    Helm chart writes it: every key it reads is set."""
    values = {
        "kube-proxy-replacement": "true",
        "enable-bpf-masquerade": "false",
        "default-lb-service-ipam": "lbipam",
        "bpf-lb-sock": "false",
    }
    values.update({k.replace("_", "-"): v for k, v in data.items()})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cilium-config", "namespace": "kube-system"},
        "data": {k: v for k, v in values.items() if v is not None},
    }


def agent(image: str, *, namespace: str = "kube-system", label: str = "cilium") -> dict[str, Any]:
    """An agent Pod of the chart's DaemonSet running ``image``."""
    return {
        "metadata": {
            "name": "cilium-x7k2p",
            "namespace": namespace,
            "labels": {"k8s-app": label, "app.kubernetes.io/name": "cilium-agent"},
        },
        "spec": {
            "hostNetwork": True,
            "initContainers": [{"name": "config", "image": IMAGE.format("v1.18.0")}],
            "containers": [{"name": "cilium-agent", "image": image}],
        },
    }


def run(
    cm: dict[str, Any] | None,
    version: str | None = "v1.19.3",
    *,
    cls: str = "io.cilium/node",
    ours: str = "nodeipam",
) -> Any:
    images = None if version is None else [IMAGE.format(version)]
    return assess(cm, images, load_balancer_class=cls, default_lb_service_ipam=ours)


# -- affected --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1.19.0", "v1.19.1", "v1.19.3", "v1.19.4", "v1.19.3-cee.1"])
def test_an_affected_release_with_kpr_concerns_our_class_less_services(version: str) -> None:
    result = run(config_map(), version)
    assert result.known
    hazard = result.hazard
    assert hazard is not None
    assert hazard.reason == CILIUM_WILDCARD_ENTRIES
    assert hazard.classes == frozenset({None}), "class-less only: io.cilium/node gets none"
    assert hazard.concerns(None) and not hazard.concerns("io.cilium/node")
    text = hazard.message
    assert version in text
    for said in ("SSH", "kubelet", "kube-proxy-replacement true", "#43206", "#45572"):
        assert said in text, said
    assert f"upgrade Cilium to {FIXED_IN} or later" in text
    assert "set default-lb-service-ipam to nodeipam or none" in text
    assert "spec.loadBalancerClass io.cilium/node" in text
    assert "docs/design.md §4.12" in text


def test_bpf_masquerade_alone_also_compiles_the_north_south_load_balancer_in() -> None:
    result = run(config_map(kube_proxy_replacement="false", enable_bpf_masquerade="true"))
    assert result.hazard is not None
    assert "enable-bpf-masquerade true" in result.hazard.message


def test_absent_keys_are_the_agents_defaults_lbipam_included() -> None:
    cm = {"data": {"kube-proxy-replacement": "true"}}
    result = run(cm)
    assert result.hazard is not None and result.hazard.classes == frozenset({None})
    assert read_config({"metadata": {}}) == CiliumConfig()


def test_our_class_being_one_cilium_allocates_for_concerns_every_service_of_ours() -> None:
    result = run(config_map(), cls="io.cilium/l2-announcer", ours="lbipam")
    assert result.hazard is not None
    assert result.hazard.classes == frozenset({"io.cilium/l2-announcer"})
    assert "set load-balancer-class to io.cilium/node" in result.hazard.message


def test_a_1_19_0_pre_release_gave_every_load_balancer_service_an_entry() -> None:
    result = run(config_map(default_lb_service_ipam="nodeipam"), "v1.19.0-pre.3", ours="lbipam")
    assert result.hazard is not None
    assert result.hazard.classes == frozenset({"io.cilium/node"})
    assert "every LoadBalancer Service" in result.hazard.message
    assert "default-lb-service-ipam to nodeipam" not in result.hazard.message


def test_a_rollout_is_affected_while_any_agent_runs_an_affected_release() -> None:
    images = [IMAGE.format("v1.19.5"), IMAGE.format("v1.19.4"), "quay.io/cilium/cilium@sha256:ab"]
    result = assess(
        config_map(),
        images,
        load_balancer_class="io.cilium/node",
        default_lb_service_ipam="nodeipam",
    )
    assert result.hazard is not None
    assert "Cilium v1.19.4 " in result.hazard.message
    assert "v1.19.4, v1.19.5" in result.facts


# -- fixed, older, or a setting that avoids it -----------------------------------------------


@pytest.mark.parametrize(
    "version", ["v1.19.5", "v1.19.6", "v1.20.0", "v1.20.2", "v1.20.0-rc.0", "v1.18.6", "v1.17.0"]
)
def test_fixed_and_older_releases_are_no_hazard(version: str) -> None:
    result = run(config_map(), version)
    assert result.known and result.hazard is None
    assert "not affected" in result.facts and version in result.facts


def test_a_1_20_0_pre_release_cut_before_the_fix_is_affected() -> None:
    assert run(config_map(), "v1.20.0-pre.2").hazard is not None


@pytest.mark.parametrize(
    "data",
    [
        {"kube_proxy_replacement": "false"},
        {"kube_proxy_replacement": None},  # absent: the agent's default, false
        {"kube_proxy_replacement": "False", "enable_bpf_masquerade": "0"},
    ],
    ids=["kpr false", "kpr absent", "other spellings"],
)
def test_without_the_north_south_load_balancer_there_is_no_hazard(data: dict[str, Any]) -> None:
    result = run(config_map(**data))
    assert result.known and result.hazard is None
    assert "does not load-balance traffic entering the nodes" in result.facts


def test_without_the_north_south_load_balancer_the_release_is_not_needed() -> None:
    result = run(config_map(kube_proxy_replacement="false"), version=None)
    assert result.known and result.hazard is None


@pytest.mark.parametrize("cilium", ["nodeipam", "none"])
def test_the_agents_default_lb_service_ipam_other_than_lbipam_avoids_it(cilium: str) -> None:
    result = run(config_map(default_lb_service_ipam=cilium))
    assert result.known and result.hazard is None
    assert "not affected" in result.facts


def test_class_less_services_not_being_ours_avoids_it() -> None:
    """Our defaults (class io.cilium/node, class-less Services not ours): never a hazard."""
    result = run(config_map(), ours="lbipam")
    assert result.known and result.hazard is None
    assert "get none: not affected" in result.facts


def test_socket_lb_settings_neither_cause_nor_avoid_it() -> None:
    for data in (
        {"bpf_lb_sock": "true"},
        {"bpf_lb_sock": "true", "bpf_lb_sock_hostns_only": "true"},
    ):
        assert run(config_map(**data)).hazard is not None
    assert run(config_map(kube_proxy_replacement="false", bpf_lb_sock="true")).hazard is None


# -- unknown: never an error -----------------------------------------------------------------


def test_a_missing_config_map_is_unknown() -> None:
    result = run(None)
    assert not result.known and result.hazard is None
    assert "no ConfigMap kube-system/cilium-config" in result.facts


@pytest.mark.parametrize(
    ("cm", "why"),
    [
        (config_map(kube_proxy_replacement="strict"), "not a boolean the agent takes"),
        (config_map(kube_proxy_replacement="x" * 5000), "not a boolean"),
        (config_map(kube_proxy_replacement=True), "kube-proxy-replacement is not a string"),
        (config_map(default_lb_service_ipam=["lbipam"]), "default-lb-service-ipam is not a string"),
        ({"data": "kube-proxy-replacement=true"}, "data is not a map"),
        ("not a ConfigMap", "is not an object"),
    ],
    ids=["strict", "huge", "yaml bool", "list", "data string", "string"],
)
def test_garbage_in_the_config_map_is_unknown_never_an_error(cm: Any, why: str) -> None:
    result = run(cm)
    assert not result.known and result.hazard is None
    assert why in result.facts
    assert len(result.facts) < 300, "a read value is quoted shortened"


@pytest.mark.parametrize(
    ("images", "why"),
    [
        (None, "not read"),
        ([], "no cilium-agent container"),
        (["quay.io/cilium/cilium@sha256:abc"], "has no version tag"),
        (["localhost:5000/cilium/cilium"], "has no version tag"),
        (["quay.io/cilium/cilium:latest"], "has no version tag"),
    ],
)
def test_an_unknown_release_is_unknown(images: list[str] | None, why: str) -> None:
    result = assess(
        config_map(),
        images,
        load_balancer_class="io.cilium/node",
        default_lb_service_ipam="nodeipam",
    )
    assert not result.known and result.hazard is None
    assert why in result.facts


def test_a_failed_pod_list_says_why() -> None:
    result = assess(
        config_map(),
        None,
        load_balancer_class="io.cilium/node",
        default_lb_service_ipam="nodeipam",
        images_error="no permission to list the Pods of kube-system (RBAC: Forbidden)",
    )
    assert not result.known and "no permission to list" in result.facts


# -- images and versions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("quay.io/cilium/cilium:v1.19.3@sha256:41f1", Version(1, 19, 3)),
        ("quay.io/cilium/cilium:v1.19.3", Version(1, 19, 3)),
        ("registry.local:5000/cilium/cilium:1.19.4", Version(1, 19, 4)),
        ("quay.io/isovalent/cilium:v1.19.3-cee.1", Version(1, 19, 3, "cee.1")),
        ("quay.io/cilium/cilium:v1.19.0-rc.1", Version(1, 19, 0, "rc.1")),
        ("quay.io/cilium/cilium@sha256:41f1", None),
        ("registry.local:5000/cilium/cilium", None),
        ("quay.io/cilium/cilium:latest", None),
        ("", None),
    ],
)
def test_the_release_of_an_image(image: str, expected: Version | None) -> None:
    assert image_version(image) == expected


def test_versions_order_and_print_as_tags() -> None:
    assert parse_version("v1.19.10") > parse_version("v1.19.9")  # type: ignore[operator]
    assert str(parse_version("1.19.0-pre.3")) == "v1.19.0-pre.3"
    assert parse_version("v1.19.0-rc.1").prerelease  # type: ignore[union-attr]
    assert not parse_version("v1.19.3-cee.1").prerelease  # type: ignore[union-attr]
    assert parse_version(None) is None  # type: ignore[arg-type]


def test_agent_images_reads_only_the_agent_container_of_agent_pods() -> None:
    pods: list[Any] = [
        agent(IMAGE.format("v1.19.3")),
        agent(IMAGE.format("v1.19.3")),
        agent(IMAGE.format("v1.19.5")),
        agent(IMAGE.format("v1.19.1"), namespace="default"),
        agent(IMAGE.format("v1.19.1"), label="cilium-operator"),
        {"metadata": None},
        {"metadata": {"namespace": "kube-system", "labels": {"k8s-app": "cilium"}}, "spec": 3},
        "garbage",
    ]
    assert agent_images(pods) == [IMAGE.format("v1.19.3"), IMAGE.format("v1.19.5")]


# -- one Event per Service -------------------------------------------------------------------


def test_concerning_folds_the_hazards_of_a_service_into_one() -> None:
    ipvs = Hazard(KUBE_PROXY_IPVS, "ipvs text")
    cilium = Hazard(CILIUM_WILDCARD_ENTRIES, "cilium text", frozenset({None}))
    assert concerning([], None) is None
    assert concerning([ipvs, cilium], "io.cilium/node") == ipvs
    assert concerning([cilium], "io.cilium/node") is None
    assert concerning([cilium], None) == cilium
    both = concerning([ipvs, cilium], None)
    assert both == Hazard(KUBE_PROXY_IPVS, "ipvs text; also: cilium text")
