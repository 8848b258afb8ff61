"""Pod → Request: resource arithmetic, annotations and the errors they produce."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_extender.podspec import (
    PodSpecError,
    bound_node_of,
    parse_pod,
    pod_resources,
    request_from_pod,
)
from topology.patterns import ring


def pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
        annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    return {"metadata": {"name": "p", "annotations": annotations or {}}, "spec": spec}


def c(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None,
      **extra: Any) -> dict[str, Any]:
    return {"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}},
            **extra}


GPU = "nvidia.com/gpu"
CORE = "gputopo.io/vgpu-core"
MEM = "gputopo.io/vgpu-memory"


def test_containers_sum_and_limits_win() -> None:
    p = pod([c({GPU: "2"}, {GPU: "1"}), c(None, {GPU: "3"}), c({GPU: 1})])
    assert pod_resources(p)[GPU] == 6


def test_init_containers_take_the_max_and_sidecars_add() -> None:
    p = pod([c({GPU: "2"})], init=[c({GPU: "4"}), c({GPU: "1"})])
    assert pod_resources(p)[GPU] == 4
    sidecar = c({GPU: "1"}, restartPolicy="Always")
    p = pod([c({GPU: "2"})], init=[sidecar, c({GPU: "2"})])
    assert pod_resources(p)[GPU] == 3  # max(2 + 1 sidecar, 1 + 2 init)


def test_whole_request_with_annotations() -> None:
    p = pod([c({GPU: "4"})], annotations={
        "gputopo.io/pattern": "ring", "gputopo.io/bandwidth-sensitive": "FALSE",
        "gputopo.io/policy": "baseline"})
    parsed = parse_pod(p)
    assert parsed is not None
    assert parsed.request.count == 4 and parsed.request.pattern == ring(4)
    assert parsed.request.bandwidth_sensitive is False and parsed.policy == "baseline"


def test_defaults() -> None:
    r = request_from_pod(pod([c({GPU: "3"})]))
    assert r is not None and r.pattern is None and r.bandwidth_sensitive is None
    assert r.sensitive  # multi-GPU default
    assert parse_pod(pod([c({GPU: "3"})])).policy is None  # type: ignore[union-attr]


def test_fractional() -> None:
    # vgpu-memory counts 256 MiB units (the device plugin's device size): 16 = 4 GiB
    r = request_from_pod(pod([c({CORE: "30", MEM: "16"})]))
    assert r is not None and r.fractional and r.core_percent == 30 and r.memory_mib == 4096
    r = request_from_pod(pod([c({MEM: "8"})]))
    assert r is not None and r.fractional and r.core_percent == 0 and r.memory_mib == 2048
    r = request_from_pod(pod([c({MEM: "2048"})]), memory_unit_mib=1)
    assert r is not None and r.memory_mib == 2048


def test_canonical_quantities_from_the_api_server() -> None:
    """The API server canonicalises quantities: 8000 arrives as "8k", 1024 may be "1Ki"."""
    r = request_from_pod(pod([c({CORE: "50", MEM: "8k"})]), memory_unit_mib=1)
    assert r is not None and r.memory_mib == 8000
    r = request_from_pod(pod([c({MEM: "1Ki"})]), memory_unit_mib=1)
    assert r is not None and r.memory_mib == 1024
    r = request_from_pod(pod([c({GPU: "2e0"})]))
    assert r is not None and r.count == 2
    # the decimal-exponent form is kept as written ("12e3" stays "12e3"): powers of ten
    r = request_from_pod(pod([c({CORE: "50", MEM: "12e3"})]), memory_unit_mib=1)
    assert r is not None and r.memory_mib == 12000



@pytest.mark.parametrize("text", [
    "2", "2.0", "2000m", "2000000u", "2000000000n", "0.002k", "0.000002M", "2e0", "20e-1",
    "0.2e+1", ".2e1",
])
def test_every_quantity_form_of_two_gpus_is_two(text: str) -> None:
    """Every suffix and exponent Kubernetes allows reads as its exact value: a pod asking
    ``nvidia.com/gpu`` as 2000m, 2000000u or 2000000000n asks for 2 GPUs, not for a fraction
    of one (refused) and not for an error."""
    r = request_from_pod(pod([c({GPU: text})]))
    assert r is not None and r.count == 2


@pytest.mark.parametrize("text", ["1500m", "1500000u", "1500000000n", "15e-1", "1.5"])
def test_a_quantity_of_one_and_a_half_gpus_is_a_fraction(text: str) -> None:
    with pytest.raises(PodSpecError, match="not a whole number"):
        parse_pod(pod([c({GPU: text})]))

def test_pass_through() -> None:
    assert request_from_pod(pod([c({"cpu": "2"}, {"memory": "1Gi"})])) is None
    assert request_from_pod(pod([c({GPU: "0"})])) is None
    assert parse_pod(pod([])) is None


@pytest.mark.parametrize(("p", "needle"), [
    (pod([c({GPU: "500m"})]), "not a whole number"),
    (pod([c({GPU: "0.5"})]), "not a whole number"),
    (pod([c({GPU: "two"})]), "not a quantity"),
    (pod([c({GPU: True})]), "not an integer"),
    (pod([c({GPU: -1})]), "negative"),
    (pod([c({MEM: "0.5"})]), "not a whole number"),
    (pod([c({GPU: "2", CORE: "50"})]), "ask for one kind"),
    (pod([c({GPU: "2"}), c({MEM: "100"})]), "ask for one kind"),
    (pod([c({CORE: "101"})]), "more than one GPU"),
    (pod([c({GPU: "2"})], annotations={"gputopo.io/pattern": "star"}), "bad pattern"),
    (pod([c({GPU: "2"})], annotations={"gputopo.io/pattern": "0-1,1-2"}), "names GPU 2"),
    (pod([c({CORE: "50"})], annotations={"gputopo.io/pattern": "0-1"}), "names GPU 1"),
    (pod([c({GPU: "2"})], annotations={"gputopo.io/bandwidth-sensitive": "1"}), "\"true\""),
    (pod([c({GPU: "2"})], annotations={"gputopo.io/policy": "nope"}), "unknown policy"),
    (pod([c({GPU: "2"})], annotations={"gputopo.io/min-utility": "high"}), "not a number"),
    (pod([c({GPU: "2"})], annotations={"gputopo.io/min-utility": "1.5"}), "not in [0, 1]"),
    ({"metadata": {"name": "p"}}, "no spec"),
    ({"metadata": {"name": "p"}, "spec": {"containers": "x"}}, "not a list"),
    (pod([{"name": "c", "resources": {"limits": ["x"]}}]), "not an object"),
])
def test_errors(p: dict[str, Any], needle: str) -> None:
    with pytest.raises(PodSpecError, match=None) as info:
        parse_pod(p)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_min_utility_annotation_reaches_the_request() -> None:
    r = request_from_pod(pod([c({GPU: "2"})], annotations={"gputopo.io/min-utility": "0.6"}))
    assert r is not None and r.min_utility == 0.6
    # a share's too, with its bandwidth-sensitivity
    share = request_from_pod(pod([c({CORE: "30"})], annotations={
        "gputopo.io/min-utility": "0.4", "gputopo.io/bandwidth-sensitive": "false"}))
    assert share is not None and share.fractional and share.min_utility == 0.4
    assert share.bandwidth_sensitive is False


def test_pod_qos_follows_the_kubelets_rules() -> None:
    """``ComputePodQOS`` (k8s.io/kubernetes@v1.36.3 pkg/apis/core/v1/helper/qos): Guaranteed
    when every container has CPU and memory limits equal to its requests (the API server has
    defaulted missing requests to the limits by then), BestEffort with
    neither anywhere, Burstable otherwise; ``status.qosClass`` wins; pod-level
    ``spec.resources`` decide instead when set (and never raise when only one side is)."""
    from scheduler_extender.podspec import pod_qos

    full = {"cpu": "2", "memory": "1Gi"}
    assert pod_qos(pod([c(full, dict(full))])) == "Guaranteed"
    assert pod_qos(pod([c(full, {"cpu": "1", "memory": "1Gi"})])) == "Burstable"
    assert pod_qos(pod([c({"cpu": "2"}, {"cpu": "2"})])) == "Burstable"  # no memory limit
    assert pod_qos(pod([c(full), c()])) == "Burstable"  # one container without limits
    assert pod_qos(pod([c(full)], init=[c({GPU: "1"})])) == "Burstable"
    assert pod_qos(pod([c({GPU: "1"})])) == "BestEffort"
    p = pod([c({GPU: "1"})])
    p["status"] = {"qosClass": "Guaranteed"}
    assert pod_qos(p) == "Guaranteed"
    # pod-level resources
    for resources, want in (
        ({"limits": dict(full), "requests": dict(full)}, "Guaranteed"),
        ({"requests": dict(full)}, "Burstable"),
        ({"limits": {"cpu": "2"}, "requests": {"cpu": "2"}}, "Burstable"),
    ):
        p = pod([c()])
        p["spec"]["resources"] = resources
        assert pod_qos(p) == want, resources


def test_a_bad_quantity_names_the_resource_and_the_container() -> None:
    """The Error tells which container and resource to fix (unnamed: by its index)."""
    for p, want in (
        (pod([c(), {"name": "trainer", "resources": {"limits": {GPU: "0.5"}}}]),
         f"container 'trainer': {GPU} quantity '0.5' is not a whole number"),
        (pod([c()], init=[{"resources": {"requests": {MEM: "-1"}}}]),
         f"init container '#0': {MEM} quantity '-1' is negative"),
        (pod([{"name": "x", "resources": {"limits": ["x"]}}]),
         "container 'x': resources.limits is not an object"),
    ):
        with pytest.raises(PodSpecError) as info:
            parse_pod(p)
        assert str(info.value).startswith(want), str(info.value)


@pytest.mark.parametrize(("obj", "node"), [
    ({"spec": {"nodeName": "n1"}}, "n1"),
    ({"spec": {"nodeName": ""}}, None),
    ({"spec": {"nodeName": 7}}, None),
    ({"spec": {}}, None),
    ({"spec": None}, None),
    ({"spec": ["nodeName"]}, None),
    ({}, None),
])
def test_bound_node_of_reads_only_a_node_name(obj: dict[str, Any], node: str | None) -> None:
    assert bound_node_of(obj) == node
