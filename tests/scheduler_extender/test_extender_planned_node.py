"""A pod the gputopo planner pinned (``gputopo.io/planned-node``) goes to that node only: the
extender decides its GPUs there with the topology policy, fails every other node unresolvably,
and bind refuses other nodes."""

from __future__ import annotations

from scheduler_extender.state import MemoryState
from tests.scheduler_extender.helpers import gpu_pod, make_client
from topology import catalog
from topology.contract import ANN_PLANNED_NODE

NODES = ("gpu-a", "gpu-b", "gpu-c")


def state() -> MemoryState:
    return MemoryState({n: catalog.get("dgx1-v100") for n in NODES})


def test_filter_keeps_only_the_planned_node() -> None:
    client = make_client(state())
    pod = gpu_pod("p", 2, annotations={ANN_PLANNED_NODE: "gpu-b"})
    reply = client.post("/filter", json={"Pod": pod, "NodeNames": list(NODES)}).json()
    assert reply["Error"] == ""
    assert reply["NodeNames"] == ["gpu-b"]
    assert set(reply["FailedAndUnresolvableNodes"]) == {"gpu-a", "gpu-c"}
    assert "planned-node" in reply["FailedAndUnresolvableNodes"]["gpu-a"]
    scores = client.post("/prioritize", json={"Pod": pod, "NodeNames": list(NODES)}).json()
    assert {s["Host"]: s["Score"] for s in scores}["gpu-a"] == 0
    assert {s["Host"]: s["Score"] for s in scores}["gpu-b"] > 0


def test_the_planned_node_is_still_decided_by_the_policy() -> None:
    """Pinning picks the node, not the GPUs: a full planned node fails with the policy's
    reason, and the binding carries the policy's GPU choice."""
    st = state()
    client = make_client(st)
    big = gpu_pod("big", 8, annotations={ANN_PLANNED_NODE: "gpu-a"})
    assert client.post("/filter", json={"Pod": big, "NodeNames": ["gpu-a"]}).json()[
        "NodeNames"] == ["gpu-a"]
    assert client.post("/bind", json={"PodName": "big", "PodNamespace": "default",
                                      "PodUID": "uid-big", "Node": "gpu-a"}).json() == {
        "Error": ""}
    other = gpu_pod("p2", 2, annotations={ANN_PLANNED_NODE: "gpu-a"})
    reply = client.post("/filter", json={"Pod": other, "NodeNames": list(NODES)}).json()
    assert reply["NodeNames"] == []
    assert "gpu-a" in reply["FailedNodes"]  # full: resolvable (preemption could free it)
    ring = gpu_pod("ring", 4, annotations={ANN_PLANNED_NODE: "gpu-c", "gputopo.io/pattern":
                                           "ring"})
    client.post("/filter", json={"Pod": ring, "NodeNames": list(NODES)})
    assert client.post("/bind", json={"PodName": "ring", "PodNamespace": "default",
                                      "PodUID": "uid-ring", "Node": "gpu-c"}).json() == {
        "Error": ""}
    alloc = st.allocation("uid-ring")
    assert alloc is not None and alloc.node == "gpu-c" and len(alloc.gpus) == 4
    # the policy's choice: a ring on a DGX-1 takes an NVLink-connected quad
    topo = catalog.get("dgx1-v100")
    g = sorted(alloc.gpus)
    assert sum(topo.nvlinks(a, b) > 0 for a in g for b in g if a < b) >= 4


def test_bind_refuses_another_node() -> None:
    client = make_client(state())
    pod = gpu_pod("p", 1, annotations={ANN_PLANNED_NODE: "gpu-b"})
    client.post("/filter", json={"Pod": pod, "NodeNames": list(NODES)})
    reply = client.post("/bind", json={"PodName": "p", "PodNamespace": "default",
                                       "PodUID": "uid-p", "Node": "gpu-a"}).json()
    assert "placed this pod on node gpu-b" in reply["Error"]


def test_a_bad_planned_node_is_the_pods_error() -> None:
    client = make_client(state())
    pod = gpu_pod("p", 1, annotations={ANN_PLANNED_NODE: "Not A Node"})
    reply = client.post("/filter", json={"Pod": pod, "NodeNames": list(NODES)}).json()
    assert "gputopo.io/planned-node" in reply["Error"]


def test_a_planned_node_longer_than_a_node_name_can_be_is_the_pods_error() -> None:
    """Node names are DNS-1123 subdomains of at most 253 characters: a longer value, even of
    valid characters, names no node — the pod's Error, not a pin every node fails; 253
    characters are a pin."""
    client = make_client(state())
    too_long = ".".join(["a" * 63] * 4)  # 255 characters, every label valid
    assert len(too_long) > 253
    pod = gpu_pod("p", 1, annotations={ANN_PLANNED_NODE: too_long})
    reply = client.post("/filter", json={"Pod": pod, "NodeNames": list(NODES)}).json()
    assert "gputopo.io/planned-node" in reply["Error"] and "not a node name" in reply["Error"]
    assert not reply.get("NodeNames")
    # 253 characters is still a node name: the pod is pinned to it (no node here has it)
    longest = ".".join(["a" * 63] * 4)[:253]
    pinned = gpu_pod("q", 1, annotations={ANN_PLANNED_NODE: longest})
    reply = client.post("/filter", json={"Pod": pinned, "NodeNames": list(NODES)}).json()
    assert reply["Error"] == "" and set(reply["FailedAndUnresolvableNodes"]) == set(NODES)


def test_a_gang_pod_goes_to_the_node_of_its_completion_index() -> None:
    """Gangs (Indexed Jobs): the planner writes one node per completion index in
    ``gputopo.io/planned-nodes``; the Job controller gives each pod its index."""
    from topology.contract import ANN_COMPLETION_INDEX, ANN_PLANNED_NODES, format_planned_nodes

    client = make_client(state())
    nodes = format_planned_nodes(["gpu-a", "gpu-c", "gpu-c"])
    assert nodes == "0=gpu-a,1=gpu-c,2=gpu-c"
    for index, want in (("0", "gpu-a"), ("2", "gpu-c")):
        pod = gpu_pod(f"g-{index}", 4, annotations={ANN_PLANNED_NODES: nodes,
                                                    ANN_COMPLETION_INDEX: index})
        reply = client.post("/filter", json={"Pod": pod, "NodeNames": list(NODES)}).json()
        assert reply["NodeNames"] == [want], reply
        assert "planned-node" in next(iter(reply["FailedAndUnresolvableNodes"].values()))
    for ann, message in (({ANN_PLANNED_NODES: nodes}, ANN_COMPLETION_INDEX),
                         ({ANN_PLANNED_NODES: nodes, ANN_COMPLETION_INDEX: "7"},
                          "no node for completion index 7"),
                         ({ANN_PLANNED_NODES: "0=gpu-a,0=gpu-b", ANN_COMPLETION_INDEX: "0"},
                          "not index=node")):
        pod = gpu_pod("bad", 1, annotations=ann)
        reply = client.post("/filter", json={"Pod": pod, "NodeNames": list(NODES)}).json()
        assert message in reply["Error"], reply
