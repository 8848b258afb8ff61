"""NICs, GPUDirect RDMA rails, and what a job's GPUs move off a node."""

from __future__ import annotations

import pytest

from topology import catalog
from topology.model import PCIeLevel
from topology.network import (
    LABEL_NIC_COUNT,
    LABEL_NIC_GBITS,
    NIC,
    NetworkError,
    NodeNetwork,
    dumps,
    from_labels,
    loads,
    rail_per_gpu,
    rail_per_group,
)

P, X, H, S = PCIeLevel.PIX, PCIeLevel.PXB, PCIeLevel.PHB, PCIeLevel.SYS


def test_dgx1_rails_are_one_nic_per_gpu_pair() -> None:
    """DGX-1: four 100 Gb/s EDR NICs, one on each GPU pair's PCIe switch."""
    topo, net = catalog.get("dgx1-v100"), catalog.network("dgx1-v100")
    assert net is not None and len(net.nics) == 4
    assert net.rails == (0, 0, 1, 1, 2, 2, 3, 3)
    assert all(net.gdr(g) for g in range(8))
    assert net.job_gbps([0, 1], topo.bandwidths) == 12.5  # a pair shares one NIC
    assert net.job_gbps([0, 2], topo.bandwidths) == 25.0  # two switches, two NICs
    assert net.job_gbps(range(8), topo.bandwidths) == 50.0


def test_hgx_h100_has_a_400g_nic_per_gpu() -> None:
    topo, net = catalog.get("hgx-h100"), catalog.network("hgx-h100")
    assert net is not None and net.rails == tuple(range(8))
    assert net.job_gbps(range(8), topo.bandwidths) == 400.0
    assert net.job_gbps([3], topo.bandwidths) == 50.0


def test_equally_near_nics_are_shared_out() -> None:
    """DGX A100: two NICs per GPU pair's switch complex; each GPU of the pair gets its own."""
    net = catalog.network("dgx-a100")
    assert net is not None and net.rails == tuple(range(8))


def test_without_gpudirect_a_gpu_is_capped_at_its_pcie_path() -> None:
    """NCCL uses GPUDirect RDMA only up to PXB (NCCL_NET_GDR_LEVEL's default); farther, the
    data is staged in host memory: the PCIe path's bandwidth caps it."""
    net = NodeNetwork.build([NIC("mlx5_0", 50.0)], [[P], [H]])
    topo = catalog.get("v100-pcie-2")
    assert net.gdr(0) and not net.gdr(1)
    assert net.reach_gbps(1, topo.bandwidths) == topo.bandwidths.pcie(H) == 12.0
    assert net.job_gbps([0, 1], topo.bandwidths) == 50.0  # one NIC, counted once
    assert net.job_gbps([1], topo.bandwidths) == 12.0


def test_layout_helpers_and_validation() -> None:
    n = rail_per_group(4, 2, 25.0, X, numa=[0, 0, 1, 1])
    assert [row for row in n.paths] == [(X, S), (X, S), (S, X), (S, X)]
    m = rail_per_gpu(2, 50.0, numa=[0, 0])
    assert m.paths == ((P, PCIeLevel.NODE), (PCIeLevel.NODE, P))
    with pytest.raises(NetworkError, match="groups of 3"):
        rail_per_group(4, 3, 25.0)
    with pytest.raises(NetworkError, match="positive"):
        NodeNetwork.build([NIC("x", 0.0)], [[P]])
    with pytest.raises(NetworkError, match="2 NIC paths for 1"):
        NodeNetwork.build([NIC("x", 1.0)], [[P, P]])
    with pytest.raises(NetworkError, match="not on this node"):
        n.job_gbps([7], catalog.get("dgx1-v100").bandwidths)


@pytest.mark.parametrize("name", [n for n in catalog.names() if catalog.network(n)])
def test_networks_round_trip_and_match_their_machine(name: str) -> None:
    net = catalog.network(name)
    assert net is not None
    net.check(catalog.get(name))
    assert loads(dumps(net)) == net


@pytest.mark.parametrize(("text", "message"), [
    ("nope", "not valid JSON"),
    ('{"schemaVersion": "gputopo.io/v2", "nics": []}', "unsupported network schemaVersion"),
    ('{"schemaVersion": "gputopo.io/v1", "nics": []}', "at nics"),
    ('{"schemaVersion": "gputopo.io/v1", "nics": [{"name": "a", "gbps": 1, "gpus": ["PIX"]},'
     ' {"name": "b", "gbps": 1, "gpus": ["PIX", "SYS"]}]}', "different GPU counts"),
])
def test_bad_annotations_are_refused(text: str, message: str) -> None:
    with pytest.raises(NetworkError, match=message):
        loads(text)


def test_labels_give_a_network_when_none_is_published() -> None:
    topo = catalog.get("dgx1-v100")
    assert from_labels({}, topo) is None
    net = from_labels({LABEL_NIC_COUNT: "4", LABEL_NIC_GBITS: "200"}, topo)
    assert net is not None and net.rails == (0, 0, 1, 1, 2, 2, 3, 3)
    assert net.nics[0].gbps == 25.0
    eight = from_labels({LABEL_NIC_COUNT: "8", LABEL_NIC_GBITS: "400"}, topo)
    assert eight is not None and eight.rails == tuple(range(8))
    for bad in ({LABEL_NIC_COUNT: "4"}, {LABEL_NIC_COUNT: "x", LABEL_NIC_GBITS: "1"},
                {LABEL_NIC_COUNT: "0", LABEL_NIC_GBITS: "100"}):
        with pytest.raises(NetworkError):
            from_labels(bad, topo)
