"""The chart's highly available scheduler, as local processes: each replica is the pair a
``gputopo-scheduler`` pod holds (``extender.mode: sidecar``) — ``gputopo extender --auth
loopback`` on its own loopback port and kube-scheduler, running the chart's
KubeSchedulerConfiguration with leader election on, calling that extender. Only the replica
holding the Lease schedules (so only its extender binds); :meth:`SchedulerReplica.kill` kills
both processes at once, as a pod dies.

Typical use (see ``tests/e2e/test_failover.py``)::

    a = SchedulerReplica(cp, "sched-a", lease=FAST_LEASE).start()
    wait_until(a.is_leader, 60, "replica a leading")
    b = SchedulerReplica(cp, "sched-b", lease=FAST_LEASE).start()
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from localcluster.chart import DEFAULT_NAMESPACE, render_scheduler_config
from localcluster.controlplane import ControlPlane
from localcluster.gpucluster import ExtenderProcess
from localcluster.process import ManagedProcess

#: Lease timing of the failover tests: a dead leader is replaced after at most
#: leaseDuration + retryPeriod = 7 s (kube-scheduler's defaults 15 s / 10 s / 2 s: 17 s).
FAST_LEASE = {"leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}

#: What kube-scheduler (client-go leaderelection) logs when it becomes the leader (compared
#: case-insensitively: "Successfully acquired lease" in v1.36's structured logs).
ACQUIRED = "successfully acquired lease"


def ensure_namespace(cp: ControlPlane, name: str) -> None:
    """Create namespace ``name`` (the Lease lives there) unless it exists.

    Raises:
        kubernetes.client.exceptions.ApiException: any refusal but "already exists".
    """
    body = k8s_client.V1Namespace(metadata=k8s_client.V1ObjectMeta(name=name))
    try:
        cp.core_v1().create_namespace(body)
    except ApiException as exc:
        if exc.status != 409:
            raise


class SchedulerReplica:
    """One scheduler pod of the sidecar mode: its extender and its kube-scheduler.

    Args:
        cp: a started control plane.
        name: process name prefix (logs ``logs/<name>.log``, ``logs/<name>-extender.log``).
        lease: ``scheduler.leaderElection`` timing values (e.g. :data:`FAST_LEASE`).
        namespace: the release namespace (holds the Lease; created on :meth:`start`).
        policy: the extender's default policy.
        values: more chart values for the scheduler configuration.
    """

    def __init__(
        self, cp: ControlPlane, name: str, *, lease: Mapping[str, str] | None = None,
        namespace: str = DEFAULT_NAMESPACE, policy: str = "gputopo",
        values: Mapping[str, Any] | None = None,
    ) -> None:
        self.cp = cp
        self.name = name
        self.namespace = namespace
        self.lease = dict(lease or {})
        self.values = dict(values or {})
        self.extender = ExtenderProcess(
            cp.kubeconfig_path, cp.workdir / "logs" / f"{name}-extender.log", policy=policy,
            extra_args=["--auth", "loopback"],
        )
        self.scheduler: ManagedProcess | None = None
        self._log_offset = 0

    def start(self) -> SchedulerReplica:
        """Start the extender (wait for ``/readyz``, as the chart's startupProbe does), then
        kube-scheduler calling it (wait for ``/healthz``; it may be leader or standby).

        Raises:
            ControlPlaneError: a process did not start.
            localcluster.chart.ChartError: helm refused the values.
        """
        ensure_namespace(self.cp, self.namespace)
        self.extender.start()
        values = dict(self.values)
        scheduler = dict(values.pop("scheduler", None) or {})
        scheduler["leaderElection"] = {"enabled": True, **self.lease}
        config = render_scheduler_config(self.extender.url, namespace=self.namespace,
                                         scheduler=scheduler, **values)
        log = self.cp.workdir / "logs" / f"{self.name}.log"
        self._log_offset = log.stat().st_size if log.exists() else 0
        self.scheduler = self.cp.start_scheduler(config, name=self.name)
        return self

    def is_leader(self) -> bool:
        """This run of kube-scheduler has logged that it acquired the Lease."""
        if self.scheduler is None or self.scheduler.exited():
            return False
        try:
            with open(self.scheduler.log_path, "rb") as f:
                f.seek(self._log_offset)
                return ACQUIRED.encode() in f.read().lower()
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the extender and kube-scheduler together (the pod dies: no lease release,
        no goodbye), then reap both."""
        pids = [p.pid for p in (self.extender.process, self.scheduler)
                if p is not None and p.pid is not None and not p.exited()]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.extender.kill()
        if self.scheduler is not None:
            self.scheduler.stop(grace_s=0)

    def stop(self) -> None:
        """Stop both by PID (SIGTERM, then SIGKILL). Idempotent."""
        if self.scheduler is not None:
            self.scheduler.stop()
        self.extender.stop()
