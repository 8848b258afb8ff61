"""A local cluster that stays up: ``gputopo cluster up`` / ``gputopo cluster down``.

kind without Docker: etcd, kube-apiserver, kube-controller-manager, kube-scheduler (the
chart's configuration), kwok GPU nodes with catalog (fake-NVML) topologies and every gputopo
component the mode needs, all on 127.0.0.1, until ``down``.

* ``up`` (:func:`up`) starts a **supervisor** — ``python -m localcluster.standing serve DIR``
  in its own session, so it outlives the command — and waits until it reports the cluster
  ready (or failed). The supervisor starts everything, writes ``DIR/state.json`` (its own PID,
  every child's name, PID and command line, the kubeconfig path) and then watches its
  children: a gputopo component that exits is started again (as its Deployment or DaemonSet
  would restart it), its new PID recorded.
* ``down`` (:func:`down`) sends the supervisor SIGTERM; it stops every child by PID (newest
  first) and exits. If the supervisor is gone, ``down`` stops the recorded children itself,
  each only if its PID still runs the recorded command line. Nothing is stopped by name.

Modes: ``device-plugin`` (nodes carry what the device plugin publishes — topology annotation,
``nvidia.com/gpu`` and the vGPU resources —, the extender decides and binds) and ``dra``
(``gputopo dra-driver --no-kubelet`` per node publishes ResourceSlices and the topology
annotation, ``gputopo dra-allocator`` allocates gputopo's claims, the chart's DeviceClasses and
scheduling-gate policy are installed, kube-controller-manager runs the resourceclaim
controller).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MODES = ("device-plugin", "dra")
STATE_FILE = "state.json"
READY_FILE = "ready"
FAILED_FILE = "failed"
SUPERVISOR_LOG = "supervisor.log"


class ClusterUpError(RuntimeError):
    """The cluster could not be started or stopped; the message says why (one line, plus
    the log to read)."""


def default_state_dir() -> Path:
    """``$GPUTOPO_CACHE/cluster`` (default ``~/.cache/gputopo/cluster``)."""
    from localcluster.binaries import cache_root

    return cache_root() / "cluster"


@dataclass
class ProcessRecord:
    """One process the cluster started."""

    name: str
    pid: int
    cmdline: list[str]


@dataclass
class ClusterState:
    """``state.json``: what ``up`` started and where to find it."""

    supervisor_pid: int
    mode: str
    nodes: list[tuple[str, str]]
    kubeconfig: str
    workdir: str
    server: str = ""
    processes: list[ProcessRecord] = field(default_factory=list)
    started: float = 0.0

    def save(self, state_dir: Path) -> None:
        tmp = state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(state_dir / STATE_FILE)

    @classmethod
    def load(cls, state_dir: Path) -> ClusterState | None:
        path = state_dir / STATE_FILE
        if not path.is_file():
            return None
        doc = json.loads(path.read_text())
        doc["processes"] = [ProcessRecord(**p) for p in doc.get("processes") or []]
        doc["nodes"] = [tuple(n) for n in doc.get("nodes") or []]
        return cls(**doc)


def _cmdline(pid: int) -> list[str] | None:
    """The command line of a running PID (None when it does not run or is a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return None
    return [p.decode(errors="replace") for p in raw.split(b"\0") if p]


def alive(record: ProcessRecord) -> bool:
    """The recorded process still runs the recorded command (not a reused PID)."""
    cmd = _cmdline(record.pid)
    return cmd is not None and cmd == record.cmdline


# ------------------------------------------------------------------------------ the CLI side
def running(state_dir: Path) -> ClusterState | None:
    """The cluster of ``state_dir`` if its supervisor runs, else None."""
    st = ClusterState.load(state_dir)
    if st is None:
        return None
    cmd = _cmdline(st.supervisor_pid)
    if cmd is None or "localcluster.standing" not in " ".join(cmd):
        return None
    return st


def up(nodes: Sequence[tuple[str, str]], mode: str, state_dir: Path, *, policy: str = "gputopo",
       timeout_s: float = 600.0, echo: Callable[[str], None] = print,
       device_taint_rules: bool = False,
       allocator_args: Sequence[str] = ()) -> ClusterState:
    """Start the cluster detached and wait until it is ready.

    Args:
        nodes: ``(node name, catalog machine)``.
        mode: ``device-plugin`` or ``dra``.
        state_dir: where state, kubeconfig and logs go (one cluster per directory).
        policy: the default placement policy.
        timeout_s: how long to wait for it.
        echo: progress lines.
        device_taint_rules: turn on DeviceTaintRules (the beta gate ``DRADeviceTaintRules`` in
            kube-apiserver, kube-scheduler and kube-controller-manager, and the
            ``resource.k8s.io/v1beta2`` API serving them; both off by default in 1.36).
        allocator_args: more ``gputopo dra-allocator`` flags (``dra`` mode; kept across the
            supervisor's restarts of it).

    Raises:
        ClusterUpError: a cluster already runs there, or it did not come up (it is then
            stopped).
    """
    if mode not in MODES:
        raise ClusterUpError(f"unknown mode {mode!r}; use {' or '.join(MODES)}")
    if running(state_dir) is not None:
        raise ClusterUpError(f"a cluster already runs from {state_dir}; run `gputopo cluster "
                             "down` first (or pick another --state-dir)")
    state_dir.mkdir(parents=True, exist_ok=True)
    for name in (STATE_FILE, READY_FILE, FAILED_FILE):
        (state_dir / name).unlink(missing_ok=True)
    spec = {"nodes": [list(n) for n in nodes], "mode": mode, "policy": policy,
            "device_taint_rules": device_taint_rules, "allocator_args": list(allocator_args)}
    (state_dir / "spec.json").write_text(json.dumps(spec))
    log = open(state_dir / SUPERVISOR_LOG, "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "localcluster.standing", "serve", str(state_dir)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, cwd=str(Path(__file__).resolve().parents[1]))
    log.close()
    echo(f"supervisor pid {proc.pid}; log {state_dir / SUPERVISOR_LOG}")
    deadline = time.monotonic() + timeout_s
    while True:
        if (state_dir / READY_FILE).exists():
            st = ClusterState.load(state_dir)
            assert st is not None
            return st
        if (state_dir / FAILED_FILE).exists() or proc.poll() is not None:
            why = (state_dir / FAILED_FILE).read_text().strip() if (
                state_dir / FAILED_FILE).exists() else f"supervisor exited ({proc.poll()})"
            _reap(proc)
            first = why.splitlines()[0] if why else ""
            raise ClusterUpError(f"the cluster did not come up: {first} "
                                 f"(log {state_dir / SUPERVISOR_LOG})")
        if time.monotonic() > deadline:
            proc.send_signal(signal.SIGTERM)
            _reap(proc)
            raise ClusterUpError(f"the cluster was not ready after {timeout_s:.0f} s; stopped "
                                 f"(log {state_dir / SUPERVISOR_LOG})")
        time.sleep(0.5)


def _reap(proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def down(state_dir: Path, *, timeout_s: float = 60.0) -> list[ProcessRecord]:
    """Stop the cluster of ``state_dir``: SIGTERM to its supervisor (which stops every child
    by PID); what is left after ``timeout_s``, and every child if the supervisor is gone, is
    stopped here, each only if its PID still runs the recorded command.

    Returns:
        The processes that were running and are stopped now.

    Raises:
        ClusterUpError: no cluster was started from ``state_dir``.
    """
    st = ClusterState.load(state_dir)
    if st is None:
        raise ClusterUpError(f"no cluster state in {state_dir} (nothing to stop)")
    records = [r for r in st.processes if alive(r)]
    sup = ProcessRecord("supervisor", st.supervisor_pid,
                        _cmdline(st.supervisor_pid) or [])
    if sup.cmdline and "localcluster.standing" in " ".join(sup.cmdline):
        os.kill(sup.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _cmdline(sup.pid) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        records.append(sup)
    for r in reversed(st.processes):  # whatever the supervisor did not stop
        if alive(r):
            _stop_group(r.pid)
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    (state_dir / READY_FILE).unlink(missing_ok=True)
    return records


def _stop_group(pid: int, grace_s: float = 10.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + grace_s
        while _cmdline(pid) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if _cmdline(pid) is None:
            return


# ---------------------------------------------------------------------------- the supervisor
def serve(state_dir: Path) -> int:
    """The supervisor: start the cluster of ``state_dir/spec.json``, record it, keep its
    gputopo components running, stop everything on SIGTERM/SIGINT. Returns the exit code."""
    from localcluster import DEFAULT_SCHEDULER_CONFIG, ControlPlane, find_binaries
    from localcluster.chart import render_manifests
    from localcluster.dra import DraCluster, apply_objects
    from localcluster.gpucluster import GpuCluster

    spec = json.loads((state_dir / "spec.json").read_text())
    nodes = [(str(n), str(m)) for n, m in spec["nodes"]]
    mode, policy = spec["mode"], spec.get("policy", "gputopo")
    stop = {"now": False}

    def on_signal(_sig: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    gates = {"DRADeviceTaintRules": True} if spec.get("device_taint_rules") else {}
    cp = ControlPlane(find_binaries(allow_build=False), workdir=state_dir / "cluster",
                      keep_workdir=True, feature_gates=gates)
    cluster: GpuCluster | None = None
    try:
        cp.start()
        if mode == "dra":
            cluster = DraCluster(cp, policy=policy, allocator_args=[
                str(a) for a in spec.get("allocator_args", [])])
            cluster.start(nodes)
        else:
            cluster = GpuCluster(cp, policy=policy)
            cp.start_controller_manager(("job-controller", "garbage-collector-controller",
                                         "serviceaccount-controller"))
            # the chart's admission policies: GPU pods naming no scheduler go to gputopo's
            apply_objects(cp, [o for o in render_manifests()
                               if o["kind"].startswith("MutatingAdmissionPolicy")])
            cluster.start(nodes)
        # pods that name no scheduler (a claim-template pod from the README, say) are
        # scheduled as in any cluster: by a default-scheduler beside gputopo-scheduler
        cp.start_scheduler(DEFAULT_SCHEDULER_CONFIG, name="default-scheduler")
        st = ClusterState(os.getpid(), mode, nodes, str(cp.kubeconfig_path),
                          str(cp.workdir), cp.server_url, _records(cp, cluster), time.time())
        st.save(state_dir)
        (state_dir / READY_FILE).write_text("ok\n")
        print(f"cluster ready: {cp.server_url}, kubeconfig {cp.kubeconfig_path}", flush=True)
        while not stop["now"]:
            time.sleep(1.0)
            if _restart_exited(cluster):
                st.processes = _records(cp, cluster)
                st.save(state_dir)
        return 0
    except BaseException as exc:  # noqa: BLE001 - report any failure to `up`
        if not stop["now"]:
            (state_dir / FAILED_FILE).write_text(f"{type(exc).__name__}: {exc}\n")
            print(f"failed: {exc}", flush=True)
        return 1
    finally:
        if cluster is not None:
            cluster.stop()
        cp.stop()
        print("stopped", flush=True)


def _records(cp: Any, cluster: Any) -> list[ProcessRecord]:
    """Every running child with its command line as ``/proc`` shows it (what :func:`alive`
    compares: a console script runs as its interpreter)."""
    procs = list(cp.processes) + [c.process for c in _components(cluster)
                                  if c.process is not None]
    out = []
    for p in procs:
        cmd = _cmdline(p.pid) if p.pid else None
        if cmd is not None:
            out.append(ProcessRecord(p.name, p.pid, cmd))
    return out


def _components(cluster: Any) -> list[Any]:
    comps = [cluster.extender]
    comps += list(getattr(cluster, "drivers", {}).values())
    if getattr(cluster, "allocator", None) is not None:
        comps.append(cluster.allocator)
    return comps


def _restart_exited(cluster: Any) -> bool:
    """Start again any gputopo component that exited; True when one was."""
    restarted = False
    for comp in _components(cluster):
        proc = comp.process
        if proc is not None and proc.exited():
            print(f"{proc.name} (pid {proc.pid}) exited; starting it again", flush=True)
            proc.stop(grace_s=0)
            try:
                comp.start()
                restarted = True
            except Exception as exc:  # noqa: BLE001 - keep supervising the rest
                print(f"restarting {proc.name} failed: {exc}", flush=True)
    return restarted


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.standing")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the supervisor of a state directory")
    s.add_argument("state_dir", type=Path)
    args = parser.parse_args(argv)
    return serve(args.state_dir)


if __name__ == "__main__":
    sys.exit(main())
