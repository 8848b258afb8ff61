"""``gputopo dra-driver --no-kubelet`` against the real kube-apiserver and kube-scheduler
v1.36: the ResourceSlices and DeviceClasses of the contract pass the API's validation, the
real allocator allocates claims from them under the contract's rules (a share puts its GPU in
share mode: no whole-GPU claim can take it) — but only claims tolerating the driver's
allocator taint: it allocates nothing to one that does not —, the Node gets the topology
annotation, and an unhealthy GPU leaves the slices at the next pool generation.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from localcluster import Binaries, ControlPlane
from tests.dra_driver.test_dra_driver_process import gputopo_command, wait_for
from topology import dra, serialization
from topology.contract import ANN_TOPOLOGY, ANN_UNHEALTHY_GPUS
from topology.dra import DRIVER, DeviceKind

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NODE = "dgx-0"
NS = "default"


@pytest.fixture(scope="module")
def cp(binaries: Binaries) -> Iterator[ControlPlane]:
    with ControlPlane(binaries) as plane:
        plane.start_scheduler()
        plane.create_default_serviceaccount(NS)
        plane.add_kwok_node(NODE, {"cpu": 80, "memory": "512Gi"})
        api = k8s.ResourceV1Api(plane.api_client())
        for dc in dra.device_classes():
            api.create_device_class(dc)
        yield plane


def _slices(cp: ControlPlane) -> list[dict[str, Any]]:
    resp: Any = k8s.ResourceV1Api(cp.api_client()).list_resource_slice(
        field_selector=f"spec.nodeName={NODE},spec.driver={DRIVER}", _preload_content=False)
    items: list[dict[str, Any]] = json.loads(resp.data)["items"]
    return items


def _devices(cp: ControlPlane) -> list[str]:
    return [d["name"] for s in _slices(cp) for d in s["spec"].get("devices", [])]


def _claim(cp: ControlPlane, name: str, klass: str, count: int = 1,
           capacity: dict[str, str] | None = None, tolerate: bool = True) -> None:
    exactly: dict[str, Any] = {"deviceClassName": klass, "count": count}
    if tolerate:  # the driver's allocator taint: kube-scheduler may allocate this claim
        exactly["tolerations"] = [{"key": dra.ALLOCATOR_TAINT["key"], "operator": "Exists",
                                   "effect": "NoSchedule"}]
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}}
    k8s.ResourceV1Api(cp.api_client()).create_namespaced_resource_claim(NS, body)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
           "spec": {"containers": [{"name": "main", "image": "busybox",
                                    "resources": {"claims": [{"name": "gpus"}]}}],
                    "resourceClaims": [{"name": "gpus", "resourceClaimName": name}]}}
    cp.core_v1().create_namespaced_pod(NS, pod)


def _allocation(cp: ControlPlane, name: str) -> dra.ClaimAllocation | None:
    resp: Any = k8s.ResourceV1Api(cp.api_client()).read_namespaced_resource_claim(
        name, NS, _preload_content=False)
    alloc = (json.loads(resp.data).get("status") or {}).get("allocation")
    if not alloc:
        return None
    return dra.claim_allocation(alloc["devices"]["results"], pool=NODE)


def test_slices_are_accepted_and_the_scheduler_allocates_by_the_contract(
    cp: ControlPlane, tmp_path: Path
) -> None:
    xid = tmp_path / "xid"
    xid.write_text("")
    log = open(tmp_path / "driver.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*gputopo_command(), "dra-driver", "--node-name", NODE, "--topology", "dgx1-v100",
         "--kubeconfig", str(cp.kubeconfig_path), "--no-kubelet", "--fake-xid-file", str(xid),
         "--health-recovery", "0", "--publish-interval", "30"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: len(_devices(cp)) == 24, 60, "the driver's slices")
        slices = _slices(cp)
        assert [s["metadata"]["name"] for s in slices] == [
            f"{NODE}-gpu.gputopo.io-0", f"{NODE}-gpu.gputopo.io-1"]
        assert {s["spec"]["pool"]["generation"] for s in slices} == {1}
        # the API kept every attribute and capacity as published
        mine = dra.resource_slices(dra_topology(), NODE)
        assert [d["attributes"] for d in slices[1]["spec"]["devices"]] == [
            d["attributes"] for d in mine[1]["spec"]["devices"]]
        # ... and the allocator taint on every device (the API adds timeAdded)
        assert [{k: v for k, v in t.items() if k != "timeAdded"}
                for d in slices[1]["spec"]["devices"] for t in d["taints"]] == [
            dra.ALLOCATOR_TAINT] * 24
        node = cp.core_v1().read_node(NODE)
        assert serialization.loads(node.metadata.annotations[ANN_TOPOLOGY]) == dra_topology()

        # a claim not tolerating the taint: kube-scheduler's allocator allocates it nothing
        _claim(cp, "untolerated", dra.CLASS_GPU, tolerate=False)
        wait_for(lambda: _unschedulable(cp, "untolerated"), 60, "the untolerated pod refused")
        assert _allocation(cp, "untolerated") is None
        cp.core_v1().delete_namespaced_pod("untolerated", NS, grace_period_seconds=0)
        # a 30 % / 4 GiB share: the allocator's first fit is GPU 0's share device
        _claim(cp, "share", dra.CLASS_SHARE, capacity={"compute": "30", "memory": "4Gi"})
        share = wait_for(lambda: _allocation(cp, "share"), 60, "the share's allocation")
        (g,) = share.grants
        assert (g.index, g.kind, g.core_percent, g.memory_mib) == (0, DeviceKind.SHARE, 30, 4096)
        assert g.share_id
        # seven whole GPUs fit, and GPU 0 is not one of them (its counter is taken)
        _claim(cp, "seven", dra.CLASS_GPU, count=7)
        seven = wait_for(lambda: _allocation(cp, "seven"), 60, "seven GPUs")
        assert sorted(seven.gpus) == [1, 2, 3, 4, 5, 6, 7]
        # an eighth whole GPU does not exist while GPU 0 is shared
        _claim(cp, "eighth", dra.CLASS_GPU)
        wait_for(lambda: _unschedulable(cp, "eighth"), 60, "the eighth GPU pod to be refused")
        assert _allocation(cp, "eighth") is None
        # a second share joins GPU 0 within its remaining compute
        _claim(cp, "share2", dra.CLASS_SHARE, capacity={"compute": "70"})
        share2 = wait_for(lambda: _allocation(cp, "share2"), 60, "the second share")
        assert share2.gpus == (0,) and share2.core_percent == 70

        # GPU 3 turns unhealthy: it leaves the slices, at the next generation
        with open(xid, "a") as f:
            f.write("3 79\n")  # GPU has fallen off the bus
        wait_for(lambda: len(_devices(cp)) == 21, 30, "GPU 3 to leave the slices")
        assert not any(n.startswith("gpu-3") for n in _devices(cp))
        assert {s["spec"]["pool"]["generation"] for s in _slices(cp)} == {2}
        wait_for(lambda: cp.core_v1().read_node(NODE).metadata.annotations.get(
            ANN_UNHEALTHY_GPUS) == "3", 30, "the Node's unhealthy annotation")
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
    assert proc.returncode == 0, (tmp_path / "driver.log").read_text()[-2000:]


def dra_topology() -> Any:
    from topology import catalog

    return catalog.get("dgx1-v100")


def _unschedulable(cp: ControlPlane, pod: str) -> bool:
    try:
        p = cp.core_v1().read_namespaced_pod(pod, NS)
    except ApiException:
        return False
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in (p.status.conditions or []))


def test_slices_of_another_driver_version_are_replaced_not_duplicated(cp: ControlPlane) -> None:
    """A pool left by an earlier run (other content, other generation) is taken over: one
    generation up, stale slices deleted."""
    api = k8s.ResourceV1Api(cp.api_client())
    stale = dra.resource_slices(dra_topology(), "dgx-9", generation=7, shares=False, slots=0)
    for s in stale:
        api.create_resource_slice(s)
    extra = json.loads(json.dumps(stale[1]))
    extra["metadata"]["name"] = "dgx-9-gpu.gputopo.io-5"
    api.create_resource_slice(extra)
    from dra_driver.slices import KubeSliceStore, SlicePublisher

    pub = SlicePublisher(KubeSliceStore(cp.api_client()), dra_topology(), "dgx-9")
    assert pub.sync(frozenset()) is True and pub.generation == 8
    got = KubeSliceStore(cp.api_client()).list("dgx-9")
    assert sorted(s["metadata"]["name"] for s in got) == [
        "dgx-9-gpu.gputopo.io-0", "dgx-9-gpu.gputopo.io-1"]
    assert {s["spec"]["pool"]["generation"] for s in got} == {8}
    assert pub.sync(frozenset()) is False
