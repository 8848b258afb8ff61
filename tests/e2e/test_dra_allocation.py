"""End to end, DRA mode: claims get the GPU set gputopo's policy chooses, through the real
kube-apiserver, kube-controller-manager (resourceclaim controller) and kube-scheduler 1.36.

The cluster is what ``gputopo cluster up --nodes dgx1-v100:8 --mode dra`` starts
(:mod:`localcluster.standing`): eight kwok DGX-1 V100 nodes whose ResourceSlices and topology
annotations come from ``gputopo dra-driver --no-kubelet``, the chart's DeviceClasses and
scheduling-gate policy, ``gputopo dra-allocator``, the extender and kube-scheduler with the
chart's configuration, under a supervisor that restarts a component that dies. It ends with
``gputopo cluster down``, which must stop every process it recorded.

The allocator runs with a 30 s postponement bound (``--postpone-max-s``; 1 800 s by default)
so that the bounded wait can be seen through.

Checks: a stream of pods with ResourceClaimTemplates asking 1–5 GPUs (ring / all-to-all,
sensitive or not) is placed one pod at a time, and each claim's set has the EffBW
``gputopo place`` gives on that node's free GPUs at that moment (read from the API's claims);
no GPU is allocated twice, also under a burst; claims are released when their pods go;
kube-scheduler binds each pod to its claim's node; a killed allocator or driver loses nothing.
Skipped only when the control-plane binaries or helm cannot be had.
"""

from __future__ import annotations

import os
import random
import signal
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client.parser import text_string_to_metric_families

from localcluster import Binaries, standing
from localcluster.controlplane import wait_until
from localcluster.dra import DraClient, DraPod, claim_gpus, pod_claims
from scheduler_extender.pending import CONDITION_POSTPONED, postponed_at
from topology import catalog, dra
from topology.patterns import parse_pattern
from topology.policies.base import NodeState, NoFit, Request
from topology.policies.common import MODEL_GPUTOPO, effective_bandwidth, mapped_edges
from topology.policies.evaluate import Evaluator

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

DGX1 = catalog.get("dgx1-v100")
NODES = [(f"dgx1-v100-{i}", "dgx1-v100") for i in range(8)]
POLICY = "gputopo"
WAIT_S = 60.0
#: The allocator's postponement bound in this cluster (s).
BOUND_S = 30.0
place = Evaluator().place


@dataclass
class Up:
    """The running cluster."""

    state: standing.ClusterState
    state_dir: Path
    client: DraClient

    def proc(self, name: str) -> standing.ProcessRecord:
        st = standing.ClusterState.load(self.state_dir)
        assert st is not None
        return next(p for p in st.processes if p.name == name)

    def allocator_url(self) -> str:
        cmd = self.proc("gputopo-dra-allocator").cmdline
        return f"http://127.0.0.1:{cmd[cmd.index('--port') + 1]}"

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"{self.allocator_url()}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        for family in text_string_to_metric_families(text):  # as Prometheus reads it
            for sample in family.samples:
                if sample.name == name and not sample.labels:
                    return float(sample.value)
        raise AssertionError(f"{name} not on the metrics page")


@pytest.fixture(scope="module")
def cluster(binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    state_dir = tmp_path_factory.mktemp("dra-cluster")
    st = standing.up(NODES, "dra", state_dir, policy=POLICY, timeout_s=900,
                    device_taint_rules=True,
                    allocator_args=["--postpone-max-s", f"{BOUND_S:.0f}"])
    client = DraClient.from_kubeconfig(st.kubeconfig, scheduler_name="gputopo-scheduler")
    for k in range(1, 6):
        client.create_claim_template(f"gpus-{k}", gpus=k)
    up = Up(st, state_dir, client)
    try:
        yield up
    finally:
        recorded = (standing.ClusterState.load(state_dir) or st).processes
        standing.down(state_dir)
    # `gputopo cluster down` stops exactly what it started
    assert not [p for p in recorded if standing.alive(p)]


# ---------------------------------------------------------------------------------- helpers
def allocated(client: DraClient) -> dict[str, tuple[str, tuple[int, ...]]]:
    """claim name → (node, GPUs in results order), for every allocated gputopo claim."""
    out = {}
    for c in client.list_claims():
        got = claim_gpus(c)
        if got is not None:
            out[c["metadata"]["name"]] = got
    return out


def free_states(client: DraClient) -> dict[str, NodeState]:
    held: dict[str, set[int]] = {n: set() for n, _ in NODES}
    for node, gpus in allocated(client).values():
        assert not held[node] & set(gpus), f"GPUs {gpus} of {node} allocated twice"
        held[node] |= set(gpus)
    return {n: NodeState.whole(g) for n, g in held.items()}


def claim_of(client: DraClient, pod: str) -> dict[str, Any] | None:
    pods = {p["metadata"]["name"]: p for p in client.list_pods()}
    if pod not in pods:
        return None
    mine = pod_claims(pods[pod], client.list_claims())
    return mine[0] if mine else None


def wait_claim(client: DraClient, pod: str) -> tuple[str, tuple[int, ...]]:
    """(node, GPUs) of ``pod``'s first claim once it is allocated."""
    found: list[tuple[str, tuple[int, ...]]] = []

    def ready() -> bool:
        c = claim_of(client, pod)
        got = claim_gpus(c) if c is not None else None
        if got is not None:
            found.append(got)
        return got is not None

    wait_until(ready, WAIT_S, f"pod {pod}'s claim to be allocated", interval_s=0.05)
    return found[-1]


def wait_bound(client: DraClient, names: list[str]) -> dict[str, dict[str, Any]]:
    """The pods of ``names`` once each has a node."""
    found: list[dict[str, dict[str, Any]]] = []

    def bound() -> bool:
        pods = {p["metadata"]["name"]: p for p in client.list_pods()}
        found.append(pods)
        return all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in names)

    wait_until(bound, WAIT_S, "pods bound", interval_s=0.1)
    return found[-1]


def settle(up: Up) -> None:
    """Wait until the allocator holds exactly the API's allocated claims (its watch caught
    up with every release)."""
    wait_until(lambda: up.metric("gputopo_dra_allocator_held_claims")
               == len(allocated(up.client)), WAIT_S, "the allocator's view to catch up",
               interval_s=0.1)


def release(up: Up, pods: list[str]) -> None:
    up.client.delete_pods(pods)
    wait_until(lambda: not {p["metadata"]["name"] for p in up.client.list_pods()} & set(pods),
               WAIT_S, "pods deleted", interval_s=0.1)
    owned = set(pods)
    wait_until(lambda: not [c for c in up.client.list_claims()
                            if any(r.get("name") in owned for r in
                                   c["metadata"].get("ownerReferences") or [])],
               WAIT_S, "their claims released", interval_s=0.1)
    settle(up)


def request_of(k: int, pattern: str, sensitive: bool) -> Request:
    return Request(count=k, pattern=parse_pattern(pattern, k), bandwidth_sensitive=sensitive)


def effbw(gpus: tuple[int, ...], request: Request) -> float:
    """EffBW of ``gpus`` as allocated (results order = pattern vertex order)."""
    return effective_bandwidth(DGX1, mapped_edges(request.effective_pattern(), gpus),
                               MODEL_GPUTOPO)


# ------------------------------------------------------------------------------------ tests
def test_claims_get_what_gputopo_place_gives_on_the_live_free_gpus(cluster: Up) -> None:
    client = cluster.client
    rng = random.Random(21)
    live: list[tuple[str, int]] = []  # (pod, gpus) in creation order
    checked = exceptions = 0
    notes: list[str] = []
    for i in range(110):
        k = rng.randint(1, 5)
        pattern = rng.choice(["ring", "all-to-all"])
        sensitive = rng.random() < 0.6
        # departures: keep about 60 % of the 64 GPUs busy, oldest pods leave first
        if sum(g for _, g in live) + k > 40:
            leaving = []
            while live and sum(g for _, g in live) + k > 24:
                leaving.append(live.pop(0)[0])
            release(cluster, leaving)
        before = free_states(client)
        name = f"s{i}"
        client.create_pod(DraPod(name, template=f"gpus-{k}", pattern=pattern,
                                 sensitive=sensitive))
        node, gpus = wait_claim(client, name)
        live.append((name, k))
        request = request_of(k, pattern, sensitive)
        assert len(gpus) == k and not set(gpus) & set(
            g for g in range(8) if not before[node].used(g).idle), "allocated a busy GPU"
        try:
            want = place(POLICY, DGX1, before[node], request)
        except NoFit as exc:  # pragma: no cover - the allocator found room there
            pytest.fail(f"{name}: gputopo place finds no room on {node}: {exc}")
        checked += 1
        got = effbw(gpus, request)
        if abs(got - want.effective_bandwidth_gbps) > 0.05:
            exceptions += 1
            notes.append(f"{name} on {node}: {got:.1f} vs {want.effective_bandwidth_gbps:.1f}"
                         f" GB/s (free {before[node].free_gpus(DGX1)})")
    print(f"\n{checked} claims, {exceptions} with another EffBW than gputopo place: {notes}")
    assert checked >= 100
    assert exceptions <= 0.05 * checked, notes
    # kube-scheduler bound every live pod to its claim's node
    pods = wait_bound(client, [n for n, _ in live])
    claims = client.list_claims()
    for n, _ in live:
        c = pod_claims(pods[n], claims)[0]
        on = claim_gpus(c)
        assert on is not None and pods[n]["spec"]["nodeName"] == on[0]
        assert [r["uid"] for r in c["status"]["reservedFor"]] == [pods[n]["metadata"]["uid"]]
    release(cluster, [n for n, _ in live])
    assert allocated(client) == {}


def test_a_burst_never_hands_out_a_gpu_twice(cluster: Up) -> None:
    client = cluster.client
    rng = random.Random(5)
    names = [f"b{i}" for i in range(40)]
    for name in names:  # 40 pods asking ~100 GPUs of 64: some must wait
        client.create_pod(DraPod(name, template=f"gpus-{rng.randint(1, 4)}",
                                 pattern=rng.choice(["ring", "all-to-all"])))
    wait_until(lambda: len(allocated(client)) >= 20, WAIT_S, "claims allocated")
    time.sleep(2.0)
    free_states(client)  # asserts nothing is allocated twice
    claims = client.list_claims()
    pods = {p["metadata"]["name"]: p for p in client.list_pods()}
    gated = [n for n, p in pods.items() if p["spec"].get("schedulingGates")]
    for name, pod in pods.items():
        mine = pod_claims(pod, claims)
        got = claim_gpus(mine[0]) if mine else None
        assert (got is None) == (name in gated), name  # gated exactly while unallocated
    release(cluster, names)  # the waiting ones get GPUs as others leave, then go too
    assert allocated(client) == {}


def test_killed_allocator_and_driver_lose_nothing(cluster: Up) -> None:
    client = cluster.client
    for i, k in enumerate((4, 3, 2)):
        client.create_pod(DraPod(f"r{i}", template=f"gpus-{k}", pattern="ring"))
    wait_until(lambda: len(allocated(client)) == 3, WAIT_S, "three claims allocated")
    held = allocated(client)
    alloc = cluster.proc("gputopo-dra-allocator")
    driver = cluster.proc("dra-driver-dgx1-v100-0")
    for p in (alloc, driver):
        os.kill(p.pid, signal.SIGKILL)
    wait_until(lambda: cluster.proc("gputopo-dra-allocator").pid != alloc.pid
               and cluster.proc("dra-driver-dgx1-v100-0").pid != driver.pid, WAIT_S,
               "the supervisor to restart the allocator and the driver")
    wait_until(lambda: cluster.metric("gputopo_dra_allocator_ready") == 1.0, WAIT_S,
               "the restarted allocator to sync")
    settle(cluster)
    assert allocated(client) == held  # nothing lost, nothing moved
    before = free_states(client)
    client.create_pod(DraPod("r3", template="gpus-4", pattern="ring", sensitive=True))
    node, gpus = wait_claim(client, "r3")
    request = request_of(4, "ring", True)
    assert effbw(gpus, request) == pytest.approx(
        place(POLICY, DGX1, before[node], request).effective_bandwidth_gbps, abs=0.05)
    free_states(client)
    release(cluster, ["r0", "r1", "r2", "r3"])


def test_several_claims_of_a_pod_and_a_shared_claim(cluster: Up) -> None:
    client = cluster.client
    client.create_claim("shared", gpus=2)
    body = DraPod("two", template="gpus-2", pattern="ring").manifest(
        client.namespace, client.scheduler_name)
    body["spec"]["resourceClaims"].append({"name": "more", "resourceClaimTemplateName":
                                           "gpus-2"})
    body["spec"]["containers"][0]["resources"]["claims"].append({"name": "more"})
    client.core.create_namespaced_pod(client.namespace, cast(Any, body))
    client.create_pod(DraPod("s-a", claim="shared"))
    client.create_pod(DraPod("s-b", claim="shared"))
    pods = wait_bound(client, ["two", "s-a", "s-b"])
    claims = client.list_claims()
    two = [g for c in pod_claims(pods["two"], claims) if (g := claim_gpus(c)) is not None]
    assert len(two) == 2 and two[0][0] == two[1][0] == pods["two"]["spec"]["nodeName"]
    gpus = tuple(g for _n, gs in two for g in gs)
    ring = request_of(4, "ring", True)
    assert effbw(gpus, ring) == pytest.approx(
        place(POLICY, DGX1, NodeState(), ring).effective_bandwidth_gbps, abs=0.05)
    shared = claim_gpus(next(c for c in claims if c["metadata"]["name"] == "shared"))
    assert shared is not None
    node = shared[0]
    assert pods["s-a"]["spec"]["nodeName"] == pods["s-b"]["spec"]["nodeName"] == node
    client.delete_pods(["two", "s-a", "s-b"])
    # the claim no pod owns is deallocated once both consumers are gone (its finalizer)
    wait_until(lambda: "shared" not in allocated(client) and len(allocated(client)) == 0,
               WAIT_S, "the shared claim deallocated")
    client.resource.delete_namespaced_resource_claim("shared", client.namespace)
    settle(cluster)


def test_extended_resource_pods_get_no_gputopo_placement(cluster: Up) -> None:
    """KEP-5004 in 1.36.3: a DeviceClass with ``extendedResourceName: nvidia.com/gpu`` over
    gputopo's devices does not give ``nvidia.com/gpu`` pods gputopo's placement (docs/dra.md):
    a claim allocated for the pod beforehand (what gputopo would have to write) is deleted by
    kube-scheduler as stale, and the claim it builds itself gets its first fit (or, with the
    driver's allocator taint on the devices, nothing)."""
    client = cluster.client
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
           "metadata": {"name": "ext.gpu.gputopo.io"},
           "spec": {"selectors": [{"cel": {"expression": (
               'device.driver == "gpu.gputopo.io" && '
               'device.attributes["gpu.gputopo.io"].type == "gpu"')}}],
                    "extendedResourceName": "nvidia.com/gpu"}}
    client.resource.create_device_class(cast(Any, cls))
    # on an idle DGX-1, first fit gives a 2-GPU claim GPUs 0 and 1 (one NVLink); gputopo's
    # ring takes a double-NVLink pair
    node = "dgx1-v100-7"
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "legacy", "namespace": client.namespace,
                        "annotations": {"gputopo.io/pattern": "ring"}},
           "spec": {"schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "schedulingGates": [{"name": "example.com/hold"}],
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    created = client.core.create_namespaced_pod(client.namespace, cast(Any, pod))
    assert created.metadata is not None
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "legacy-pre", "namespace": client.namespace,
                          "annotations": {"resource.kubernetes.io/extended-resource-claim":
                                          "true"},
                          "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                               "name": "legacy", "uid": created.metadata.uid,
                                               "controller": True}]},
             "spec": {"devices": {"requests": [{"name": "container-0-request-0", "exactly": {
                 "deviceClassName": "ext.gpu.gputopo.io", "count": 2}}]}}}
    made = client.resource.create_namespaced_resource_claim(client.namespace, cast(Any, claim))
    assert made.metadata is not None
    best = place(POLICY, DGX1, free_states(client)[node], request_of(2, "ring", True))
    status = {"allocation": {
        "devices": {"results": [{"request": "container-0-request-0", "driver": "gpu.gputopo.io",
                                 "pool": node, "device": f"gpu-{i}"} for i in best.gpus]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{
            "key": "metadata.name", "operator": "In", "values": [node]}]}]},
        "allocationTimestamp": "2026-01-01T00:00:00Z"}}
    client.resource.patch_namespaced_resource_claim_status(
        "legacy-pre", client.namespace, {"metadata": {
            "resourceVersion": made.metadata.resource_version}, "status": status})
    client.core.patch_namespaced_pod("legacy", client.namespace,
                                     {"spec": {"schedulingGates": None}})
    # kube-scheduler throws the pre-allocation away (Filter: "cannot schedule extended
    # resource claim"; PostFilter: deleteClaim) ...
    wait_until(lambda: "legacy-pre" not in {c["metadata"]["name"] for c in client.list_claims()},
               WAIT_S, "kube-scheduler to delete the pre-allocated extended-resource claim")
    tainted = any(d.get("taints") for s in client.list_slices()
                  for d in s["spec"].get("devices") or [])
    if tainted:  # ... and, with the allocator taint, can allocate nothing itself
        time.sleep(3)
        legacy = client.core.read_namespaced_pod("legacy", client.namespace)
        assert legacy.spec is not None and not legacy.spec.node_name
    else:  # ... and allocates its own claim by first fit: the lowest free GPUs
        # (a claim's deletion is no event the DynamicResources plugin requeues pods on; a node
        # label change is, so the pod need not wait for the 5-minute unschedulable flush)
        client.core.patch_node(node, {"metadata": {"labels": {"gputopo.io/e2e-nudge": "1"}}})
        pods = wait_bound(client, ["legacy"])
        mine = pod_claims(pods["legacy"], client.list_claims())
        got = claim_gpus(mine[0]) if mine else None
        assert got is not None and got == (node, (0, 1))
        assert set(got[1]) != set(best.gpus)  # not gputopo's ring
    client.delete_pods(["legacy"])
    client.resource.delete_device_class("ext.gpu.gputopo.io")
    wait_until(lambda: not allocated(client), WAIT_S, "claims released")
    settle(cluster)


def test_a_pod_the_gate_missed_still_gets_gputopos_set(cluster: Up) -> None:
    """docs/dra.md step 5: a pod that reaches kube-scheduler before the allocator decided (a
    namespace the gate policy does not select, the gate off, a pod older than the policy) —
    here: the allocator stopped, the pod's gate lifted by hand — is not first-fitted by
    kube-scheduler's own allocator: the driver's allocator taint on every device makes it
    refuse the pod; once the allocator runs again the pod gets gputopo's set and binds."""
    client = cluster.client
    node = "dgx1-v100-6"
    held = {g for n, gs in allocated(client).values() if n == node for g in gs}
    request = request_of(2, "ring", True)
    best = place(POLICY, DGX1, free_states(client)[node], request)
    first_fit = tuple(sorted(set(range(8)) - held)[:2])
    assert effbw(first_fit, request) < best.effective_bandwidth_gbps - 1  # it would matter
    alloc = cluster.proc("gputopo-dra-allocator")
    os.kill(alloc.pid, signal.SIGSTOP)
    try:
        client.create_pod(DraPod("missed", template="gpus-2", pattern="ring", sensitive=True,
                                 node_selector={"kubernetes.io/hostname": node}))
        wait_until(lambda: claim_of(client, "missed") is not None, WAIT_S,
                   "the resourceclaim controller to create the pod's claim", interval_s=0.1)
        client.core.patch_namespaced_pod("missed", client.namespace,
                                         {"spec": {"schedulingGates": None}})

        def tried() -> str:
            p = client.core.read_namespaced_pod("missed", client.namespace)
            if p.spec is not None and p.spec.node_name:
                return "bound"
            conditions = (p.status.conditions if p.status is not None else None) or []
            return next((c.message or "" for c in conditions
                         if c.type == "PodScheduled" and c.status == "False"
                         and "cannot allocate all claims" in (c.message or "")), "")

        outcome = wait_until(tried, WAIT_S, "kube-scheduler to try the ungated pod",
                             interval_s=0.1)
        assert outcome != "bound", f"kube-scheduler's first fit: {claim_of(client, 'missed')}"
        assert claim_gpus(claim_of(client, "missed") or {}) is None
    finally:
        os.kill(alloc.pid, signal.SIGCONT)
    got_node, gpus = wait_claim(client, "missed")
    assert got_node == node
    assert effbw(gpus, request) == pytest.approx(best.effective_bandwidth_gbps, abs=0.05)
    assert wait_bound(client, ["missed"])["missed"]["spec"]["nodeName"] == node
    release(cluster, ["missed"])


def test_node_prepare_writes_a_cdi_spec_with_exactly_the_allocated_uuids(cluster: Up) -> None:
    """NodePrepareResources through the kubelet stand-in (tests/dra_driver/kubelet_stub.py)
    on a claim the allocator allocated: the driver, reading the claim from the API, writes a
    CDI spec listing exactly its GPUs' UUIDs, in the allocation's (the ring's) order."""
    from dra_driver.cdi import read_spec, spec_path
    from localcluster.dra import GputopoProcess
    from tests.device_plugin.kubelet_stub import remove_tree, short_tmpdir
    from tests.dra_driver.kubelet_stub import Claim, DRAKubeletStub

    client = cluster.client
    node = "dgx1-v100-0"
    client.create_pod(DraPod("cdi", template="gpus-3", pattern="ring",
                             node_selector={"kubernetes.io/hostname": node}))
    got_node, gpus = wait_claim(client, "cdi")
    assert got_node == node
    claim = next(c for c in client.list_claims()
                 if (c["metadata"].get("ownerReferences") or [{}])[0].get("name") == "cdi")
    root = short_tmpdir()
    for d in ("reg", "plugin", "cdi"):
        (root / d).mkdir()
    # the node's kubelet plugin; its slices and Node go to files (the --no-kubelet driver of
    # `cluster up` publishes that node's), its claims come from the API server
    driver = GputopoProcess("dra-driver-kubelet", [
        "dra-driver", "--node-name", node, "--topology", "dgx1-v100", "--kubeconfig",
        cluster.state.kubeconfig, "--registry-dir", str(root / "reg"), "--plugin-dir",
        str(root / "plugin"), "--cdi-dir", str(root / "cdi"), "--slice-sink",
        f"file:{root / 'slices.json'}", "--node-sink", f"file:{root / 'node.json'}"],
        Path(cluster.state.workdir) / "logs")
    stub = DRAKubeletStub(root / "reg")
    try:
        driver.launch()
        stub.register(timeout_s=60)
        meta = claim["metadata"]
        resp = stub.prepare(Claim(meta["namespace"], meta["name"], meta["uid"]))
        assert not resp.claims[meta["uid"]].error, resp.claims[meta["uid"]].error
        env = dict(e.split("=", 1) for e in read_spec(
            spec_path(root / "cdi", meta["uid"])).containerEdits.env)
        want = ",".join(DGX1.gpus[g].uuid for g in gpus)
        assert env["CUDA_VISIBLE_DEVICES"] == env["NVIDIA_VISIBLE_DEVICES"] == want
        stub.unprepare(Claim(meta["namespace"], meta["name"], meta["uid"]))
    finally:
        stub.close()
        driver.stop()
        remove_tree(root)
    release(cluster, ["cdi"])


def test_shares_and_co_location_slots_through_the_allocator(cluster: Up) -> None:
    """A 30 % share and co-location slots are allocated by gputopo's allocator with the
    device-plugin path's rules: shares and slots never on one GPU, nor beside a whole-GPU
    claim; the consumed capacity is what was asked."""
    client = cluster.client
    node = "dgx1-v100-1"
    sel = {"kubernetes.io/hostname": node}
    client.create_claim_template("share-30", compute=30, memory_mib=4096)
    client.create_claim_template("slot-4g", slot=True, memory_mib=4096)
    client.create_pod(DraPod("sh1", template="share-30", node_selector=sel))
    client.create_pod(DraPod("sh2", template="share-30", node_selector=sel))
    for i in range(2):
        client.create_pod(DraPod(f"sl{i}", template="slot-4g", node_selector=sel,
                                 annotations={"gputopo.io/profile": "resnet18:64"}))
    client.create_pod(DraPod("whole", template="gpus-5", node_selector=sel))
    pods = wait_bound(client, ["sh1", "sh2", "sl0", "sl1", "whole"])
    claims = client.list_claims()
    views: dict[int, set[str]] = {}
    for name, pod in pods.items():
        if name not in ("sh1", "sh2", "sl0", "sl1", "whole"):
            continue
        c = pod_claims(pod, claims)[0]
        for r in c["status"]["allocation"]["devices"]["results"]:
            ref = dra.parse_device_name(r["device"])
            views.setdefault(ref.index, set()).add(ref.kind.value)
            used = {k: int(dra.parse_quantity(v)) for k, v in
                    (r.get("consumedCapacity") or {}).items()}  # the API writes 4096Mi as 4Gi
            if ref.kind.value == "share":
                assert used == {"memory": 4096 << 20, "compute": 30}
            if ref.kind.value == "slot":
                assert used == {"memory": 4096 << 20, "slots": 1}
    assert all(len(v) == 1 for v in views.values()), views  # one view per GPU
    shared = [g for g, v in views.items() if v == {"share"}]
    assert len(shared) == 1  # both shares packed on one GPU (Gaia Fragment)
    assert len([g for g, v in views.items() if v == {"gpu"}]) == 5
    release(cluster, ["sh1", "sh2", "sl0", "sl1", "whole"])


def test_device_taint_rules_keep_the_allocator_off_the_devices_they_select(cluster: Up) -> None:
    """The cluster runs with DeviceTaintRules on (``cluster up --device-taint-rules``): rules
    tainting six GPUs of a node leave a pod on that node the other two, as kube-scheduler's
    ResourceSlice tracker would, and a third pod waits; the rules gone, it gets one of the
    GPUs they tainted."""
    from kubernetes import client as k8s

    client = cluster.client
    node = "dgx1-v100-3"
    settle(cluster)
    held = {g for n, gs in allocated(client).values() if n == node for g in gs}
    free = sorted(set(range(8)) - held)
    assert len(free) >= 4, f"{node} has only GPUs {free} free"
    keep = free[-2:]
    tainted = [i for i in range(8) if i not in keep]
    rules = k8s.ResourceV1beta2Api(client.core.api_client)
    taint = {"key": "example.com/drain", "value": "e2e", "effect": "NoSchedule"}
    names = [f"e2e-drain-{i}" for i in tainted]
    for i, name in zip(tainted, names, strict=True):
        rules.create_device_taint_rule({
            "apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule",
            "metadata": {"name": name},
            "spec": {"deviceSelector": {"driver": dra.DRIVER, "pool": node,
                                        "device": dra.device_name(i, dra.DeviceKind.GPU)},
                     "taint": taint}})
    try:
        wait_until(lambda: cluster.metric("gputopo_dra_allocator_device_taint_rules")
                   == len(names), WAIT_S, "the allocator to see the rules", interval_s=0.1)
        client.create_pod(DraPod("drained", template="gpus-2",
                                 node_selector={"kubernetes.io/hostname": node}))
        got_node, got = wait_claim(client, "drained")
        assert (got_node, sorted(got)) == (node, keep)
        assert wait_bound(client, ["drained"])["drained"]["spec"]["nodeName"] == node
        client.create_pod(DraPod("waits", template="gpus-1",
                                 node_selector={"kubernetes.io/hostname": node}))
        time.sleep(1.0)
        assert claim_gpus(claim_of(client, "waits") or {}) is None
    finally:
        for name in names:
            rules.delete_device_taint_rule(name)
    _n, gpus = wait_claim(client, "waits")
    assert gpus[0] in tainted
    release(cluster, ["drained", "waits"])


def test_a_postponement_keeps_its_bound_across_an_allocator_restart(cluster: Up) -> None:
    """Issue 24's 3-GPU ring on {1,5,6} (Eq. 2: 52 % of its ideal), DRA mode: the allocator
    postpones its claim and writes when into the pod (the extender's condition); killed in the
    middle of the wait, the allocator the supervisor starts again continues that clock, so the
    claim gets {1,5,6} once the bound has passed since the first postponement, not a bound
    after the restart, and the pod is bound on that node."""
    client = cluster.client
    node = "dgx1-v100-0"
    pin = {"kubernetes.io/hostname": node}
    settle(cluster)
    assert not [n for n, _ in allocated(client).values() if n == node]
    client.create_pod(DraPod("alone-5", template="gpus-5", pattern="ring", sensitive=True,
                             node_selector=pin))
    got, five = wait_claim(client, "alone-5")
    assert (got, tuple(sorted(five))) == (node, (0, 2, 3, 4, 7))  # nothing pending
    client.create_pod(DraPod("later-3", template="gpus-3", pattern="ring", sensitive=True,
                             node_selector=pin))

    def postponed() -> dict[str, Any] | None:
        pod = {p["metadata"]["name"]: p for p in client.list_pods()}.get("later-3")
        return pod if pod is not None and postponed_at(pod) is not None else None

    pod = wait_until(postponed, WAIT_S, "the postponement's condition", interval_s=0.2)
    at = postponed_at(pod)
    assert at is not None
    cond = next(c for c in pod["status"]["conditions"] if c["type"] == CONDITION_POSTPONED)
    assert cond["reason"] == "WaitingForBetterGPUs"
    assert f"at most {BOUND_S:.0f} s" in cond["message"]
    assert {g["name"] for g in pod["spec"].get("schedulingGates") or []} == {
        "gputopo.io/dra-allocation"}  # gated while its claim waits
    assert claim_gpus(claim_of(client, "later-3") or {}) is None
    time.sleep(max(0.0, at + BOUND_S / 2 - time.time()))
    alloc = cluster.proc("gputopo-dra-allocator")
    os.kill(alloc.pid, signal.SIGKILL)
    wait_until(lambda: cluster.proc("gputopo-dra-allocator").pid != alloc.pid, WAIT_S,
               "the supervisor to restart the allocator")
    got, three = wait_claim(client, "later-3")
    allocated_at = time.time()
    assert (got, tuple(sorted(three))) == (node, (1, 5, 6))
    # the bound since the first postponement (the condition keeps whole seconds, rounded up,
    # and the allocator checks once a second); a clock restarted with the allocator would
    # hold the claim until at + BOUND_S / 2 + BOUND_S or later
    assert at + BOUND_S - 1.0 <= allocated_at <= at + BOUND_S + 10.0, allocated_at - at
    pod = wait_bound(client, ["later-3"])["later-3"]
    assert pod["spec"]["nodeName"] == node

    def placed() -> dict[str, Any] | None:
        # written right after the gate is removed, so possibly after kube-scheduler binds
        live = {p["metadata"]["name"]: p for p in client.list_pods()}.get("later-3") or {}
        conds = (live.get("status") or {}).get("conditions") or []
        return next((c for c in conds if c.get("type") == CONDITION_POSTPONED
                     and c.get("status") == "False"), None)

    cond = wait_until(placed, WAIT_S, "the postponement's condition to turn False",
                      interval_s=0.2)
    assert cond["reason"] == "Placed"  # it waits no more
    pod = {p["metadata"]["name"]: p for p in client.list_pods()}["later-3"]
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))  # the clock carried over
    assert f"from {start} for " in cond["message"] and cond["message"].endswith(node)
    assert postponed_at(pod) is None
    release(cluster, ["alone-5", "later-3"])
