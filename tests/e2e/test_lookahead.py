"""End to end: the extender's lookahead through the real kube-scheduler (issue 24).

One kwok DGX-1 V100 node, the chart's scheduler configuration and the real extender. A
sensitive 5-GPU ring with a sensitive 3-GPU ring waiting: the extender sees the 3-GPU pod
pending in its pod watch, gives the 5-GPU ring {0,1,2,3,4} and keeps the NVLink triangle
{5,6,7} for a 3-GPU ring, which then gets it. (With nothing pending the 5-GPU ring
gets {0,2,3,4,7} and a 3-GPU ring after it {1,5,6}, half the bottleneck bandwidth:
tests/scheduler_extender/test_extender_lookahead.py.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localcluster import Binaries, ControlPlane
from localcluster.gpucluster import GpuCluster, GpuPod, booking_problems, placement_of

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

WAIT_S = 90.0


@pytest.fixture(scope="module")
def cluster(binaries: Binaries) -> Iterator[GpuCluster]:
    with ControlPlane(binaries) as cp, GpuCluster(cp) as gc:
        gc.start([("dgx-0", "dgx1-v100")])
        yield gc


def test_the_pending_ring_keeps_its_triangle(cluster: GpuCluster) -> None:
    # The 3-GPU ring waits where no node can take it (a node selector none matches): the
    # extender still weighs it (a waiting pod's home is sought whatever its selector), and
    # kube-scheduler cannot bind it before the 5-GPU ring. Two pods both schedulable would race:
    # kube-scheduler binds asynchronously and the extender decides GPUs at bind, in the order
    # the binds arrive, not the order the pods were scheduled in.
    wait = GpuPod("ring-3-waiting", gpus=3, pattern="ring", sensitive=True,
                  node_selector={"gputopo.io/test-nowhere": "true"})
    config = cluster.scheduler_config
    cluster.stop_scheduler()  # the extender's pod watch sees both before any is scheduled
    cluster.create_pod(wait)
    cluster.create_pod(GpuPod("ring-5", gpus=5, pattern="ring", sensitive=True))
    cluster.start_scheduler(config)
    five = cluster.wait_bound(["ring-5"], WAIT_S)
    cluster.delete_pods([wait.name])
    cluster.create_pod(GpuPod("ring-3", gpus=3, pattern="ring", sensitive=True))
    pods = {**five, **cluster.wait_bound(["ring-3"], WAIT_S)}
    assert not booking_problems(list(pods.values()), cluster.nodes)
    got = {}
    for name, pod in pods.items():
        pl = placement_of(pod)
        assert pl is not None
        got[name] = tuple(sorted(pl.assignment.gpu_indices))
    assert got == {"ring-5": (0, 1, 2, 3, 4), "ring-3": (5, 6, 7)}
