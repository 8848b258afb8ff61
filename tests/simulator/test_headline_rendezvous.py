"""The headline replay's rendezvous timeout (benchmarks/bench_headline.py): a gang given up is
never started by a pod of its old Job, and its replacement starts when whole."""

from __future__ import annotations

from typing import Any

from benchmarks.bench_headline import (
    JOB_LABEL,
    KNAME_LABEL,
    RACKS,
    Replay,
    ideal_bottlenecks,
    job_name,
    workload,
)


class _Core:
    def __init__(self) -> None:
        self.patched: list[str] = []

    def patch_namespaced_pod(self, name: str, namespace: str, body: Any) -> None:
        self.patched.append(name)


class _Cluster:
    def __init__(self) -> None:
        self.core = _Core()


def _pod(name: str, job: str, kname: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {JOB_LABEL: job, KNAME_LABEL: kname}},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


def test_a_gang_given_up_at_its_deadline_is_not_started_by_its_old_pods() -> None:
    """The last pod of a gang bound just after its rendezvous timed out belongs to a Job being
    deleted: it must not start the gang (the replacement Job would then never be started and
    the replay would wait for it forever — seen in a run)."""
    wl = workload(1, 60, 0.6)
    job = next(j for j in wl.jobs if j.pods >= 2)
    cluster = _Cluster()
    replay = Replay(cluster, wl, "default", "run", 30.0, ideal_bottlenecks(wl))  # type: ignore[arg-type]
    name = job_name(job)
    st = replay.jobs[name]
    st.kname = name
    nodes = list(RACKS)
    for i in range(job.pods - 1):
        replay.on_pod(_pod(f"{name}-{i}", name, name, nodes[i]), False)
    assert st.partial_since is not None and len(st.bound) == job.pods - 1
    with replay.lock:
        old = replay._give_up(st)
    assert old == name and st.kname == f"{name}-r1" and st.timeouts == 1
    assert not st.bound and st.partial_since is None and not any(replay.used.values())
    last = job.pods - 1
    replay.on_pod(_pod(f"{name}-{last}", name, name, nodes[last]), False)
    assert st.started is None and cluster.core.patched == []
    for i in range(job.pods):
        replay.on_pod(_pod(f"{name}-r1-{i}", name, f"{name}-r1", nodes[i]), False)
    assert st.started is not None
    assert sorted(cluster.core.patched) == sorted(f"{name}-r1-{i}" for i in range(job.pods))
