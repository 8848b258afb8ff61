"""End to end: no single point of failure (issue 14). The chart's default deployment — two
kube-scheduler replicas with leader election, each with its extender as a sidecar called on
loopback — as local processes (``localcluster.ha.SchedulerReplica``), against a real
kube-apiserver and kwok GPU nodes.

* The leader's pod dies (kill -9 of its extender and its kube-scheduler together) in the
  middle of a stream of 200 GPU pods: the standby takes the Lease over, its extender — current
  from its watch — binds the rest; every pod is bound within 30 s of the kill (the issue's
  requirement) and no GPU index on any node is held by two pods (from the bound pods'
  annotations).
* Only the leader's extender is killed -9 and restarted ~1 s later (the kubelet restarting the
  sidecar container): the scheduler keeps the Lease and retries the waiting pods.

Lease timing 6 s / 4 s / 1 s (``localcluster.ha.FAST_LEASE``); ``GPUTOPO_E2E_LEASE=15s,10s,2s``
measures other timings (kube-scheduler's defaults here). The measured times are printed
(``pytest -s``) and recorded in docs/high-availability.md; the only timing assertion is the
issue's 30 s.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s_client

from localcluster import Binaries, ControlPlane
from localcluster.controlplane import wait_until
from localcluster.gpucluster import GpuCluster, GpuPod, booking_problems, pod_node
from localcluster.ha import FAST_LEASE, SchedulerReplica

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3 * 3600)]

NODES = {f"dgx-{i:02d}": "dgx1-v100" for i in range(50)}  # 400 GPUs
SIZES = (1, 2, 1, 1, 4, 1, 2, 1)  # 200 pods ask for 325 GPUs
PODS = 200
KILL_AT = 100  # pods created when the leader dies
PACE_S = 0.05  # between pod creations (a stream, not one burst)
ISSUE_LIMIT_S = 30.0  # every pod bound within 30 s of the kill
WAIT_S = 120.0


def _lease() -> dict[str, str]:
    """:data:`FAST_LEASE`, or ``GPUTOPO_E2E_LEASE=<leaseDuration>,<renewDeadline>,<retry>``."""
    text = os.environ.get("GPUTOPO_E2E_LEASE", "")
    if not text:
        return dict(FAST_LEASE)
    duration, renew, retry = (p.strip() for p in text.split(","))
    return {"leaseDuration": duration, "renewDeadline": renew, "retryPeriod": retry}


@pytest.fixture(scope="module")
def cluster(binaries: Binaries) -> Iterator[GpuCluster]:
    with ControlPlane(binaries) as cp, GpuCluster(cp) as gc:
        gc.start(NODES.items(), extender=False, scheduler=False)
        yield gc


@pytest.fixture
def replicas(cluster: GpuCluster) -> Iterator[list[SchedulerReplica]]:
    """Replica a (leader, waited for), then replica b (standby); both stopped afterwards and
    every pod deleted."""
    a = SchedulerReplica(cluster.cp, "sched-a", lease=_lease()).start()
    wait_until(a.is_leader, WAIT_S, "replica a to acquire the Lease")
    b = SchedulerReplica(cluster.cp, "sched-b", lease=_lease()).start()
    try:
        yield [a, b]
    finally:
        a.stop()
        b.stop()
        cluster.delete_all_pods()


def _stream(prefix: str) -> list[GpuPod]:
    return [GpuPod(f"{prefix}-{i:03d}", gpus=SIZES[i % len(SIZES)]) for i in range(PODS)]


class BindClock:
    """Polls the pods (every 0.1 s) and records when each was first seen bound."""

    def __init__(self, gc: GpuCluster, names: list[str]) -> None:
        self.gc = gc
        self.names = set(names)
        self.bound_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set() and len(self.bound_at) < len(self.names):
            now = time.monotonic()
            for pod in self.gc.list_pods():
                name = pod["metadata"]["name"]
                if name in self.names and name not in self.bound_at and pod_node(pod):
                    self.bound_at[name] = now
            self._stop.wait(0.1)

    def __enter__(self) -> BindClock:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def _create_stream(gc: GpuCluster, pods: list[GpuPod], at: int,
                   event: Any) -> float:
    """Create ``pods`` at :data:`PACE_S` apart; call ``event()`` after the ``at``-th and
    return the monotonic time of that call."""
    t_event = 0.0
    for i, p in enumerate(pods):
        if i == at:
            event()
            t_event = time.monotonic()
        gc.create_pod(p)
        time.sleep(PACE_S)
    return t_event


def _metric(replica: SchedulerReplica, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"{replica.extender.url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name))


def _check(gc: GpuCluster, names: list[str]) -> None:
    pods = gc.pods_by_name(names)
    assert all(pod_node(p) for p in pods.values()), "some pods are not bound"
    problems = booking_problems(pods.values(), gc.nodes)
    assert not problems, "\n".join(problems)


def test_leader_pod_killed_mid_stream_standby_binds_the_rest(
    cluster: GpuCluster, replicas: list[SchedulerReplica]
) -> None:
    a, b = replicas
    pods = _stream("fo")
    names = [p.name for p in pods]
    wall_offset = time.time() - time.monotonic()  # the Lease's times are wall-clock
    with BindClock(cluster, names) as clock:
        t_kill = _create_stream(cluster, pods, KILL_AT, a.kill)
        bound_at_kill = sum(1 for t in clock.bound_at.values() if t <= t_kill)
        cluster.wait_bound(names, WAIT_S)
        wait_until(lambda: len(clock.bound_at) == len(names), 10, "the clock to see all")
    assert not a.is_leader() and b.is_leader()
    after = sorted(t - t_kill for t in clock.bound_at.values() if t > t_kill)
    last = after[-1]
    lease = k8s_client.CoordinationV1Api(cluster.cp.api_client()).read_namespaced_lease(
        "gputopo-scheduler", b.namespace)
    assert lease.spec is not None and lease.spec.acquire_time is not None
    acquired = lease.spec.acquire_time.timestamp() - wall_offset - t_kill
    print(f"\nfailover (pod killed, lease {_lease()}): {bound_at_kill} of {PODS} bound at the "
          f"kill; the standby acquired the Lease {acquired:.1f} s after it (its acquireTime), "
          f"all {PODS} bound {last:.1f} s after the kill")
    _check(cluster, names)
    by_b = _metric(b, "gputopo_extender_decisions_total")
    print(f"the standby's extender bound {by_b:.0f} pods")
    assert by_b > 0
    assert last <= ISSUE_LIMIT_S, f"all bound {last:.1f} s after the kill (issue: 30 s)"


def test_leader_extender_killed_and_restarted_scheduler_keeps_leading(
    cluster: GpuCluster, replicas: list[SchedulerReplica]
) -> None:
    a, b = replicas
    pods = _stream("rs")
    names = [p.name for p in pods]
    restarted: list[float] = []

    def crash_and_restart() -> None:
        a.extender.kill()
        time.sleep(1.0)  # the kubelet restarts the sidecar container
        a.extender.start()
        restarted.append(time.monotonic())

    def crash() -> None:
        threading.Thread(target=crash_and_restart, daemon=True).start()

    with BindClock(cluster, names) as clock:
        t_kill = _create_stream(cluster, pods, KILL_AT, crash)
        cluster.wait_bound(names, WAIT_S)
        wait_until(lambda: len(clock.bound_at) == len(names), 10, "the clock to see all")
    assert a.is_leader() and not b.is_leader()  # the Lease never moved
    after = sorted(t - t_kill for t in clock.bound_at.values() if t > t_kill)
    ready = restarted[0] - t_kill
    print(f"\nextender restart: ready again {ready:.1f} s after the kill; all {PODS} bound "
          f"{after[-1]:.1f} s after the kill")
    _check(cluster, names)
    assert _metric(b, "gputopo_extender_requests_total") == 0  # the standby got no call
    assert after[-1] <= ISSUE_LIMIT_S
