"""GPU nodes in DRA mode on a :class:`~localcluster.ControlPlane`: kwok nodes whose GPUs the
real ``gputopo dra-driver --no-kubelet`` publishes as ResourceSlices, the real
``gputopo dra-allocator``, kube-controller-manager's resourceclaim controller, and the chart's
DRA objects (DeviceClasses, the scheduling-gate policy). Shared by the DRA end-to-end test
(``tests/e2e/test_dra.py``), the DRA benchmarks and ``gputopo cluster up --mode dra``::

    with ControlPlane() as cp, DraCluster(cp) as cluster:
        cluster.start([("dgx-0", "dgx1-v100")])
        cluster.create_claim_template("ring4", gpus=4)
        cluster.create_pod(DraPod("ring", template="ring4", pattern="ring"))

Each component is a child process stopped by PID (:class:`GputopoProcess`).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from localcluster.chart import render_manifests
from localcluster.controlplane import ControlPlane, ControlPlaneError, free_port, wait_until
from localcluster.gpucluster import (
    DEFAULT_NAMESPACE,
    POD_IMAGE,
    GpuCluster,
    gputopo_command,
    resolve_machine,
)
from localcluster.process import ChildProcess, ManagedProcess
from topology import dra
from topology.contract import ANN_BW_SENSITIVE, ANN_PATTERN, ANN_POLICY
from topology.model import Topology

#: kube-controller-manager's controllers a DRA cluster needs: claims from templates, their
#: release when pods go (resourceclaim), dependents deleted with their owners (garbage
#: collector), Jobs, and the default ServiceAccount of new namespaces.
DRA_CONTROLLERS = ("resourceclaim-controller", "garbage-collector-controller", "job-controller",
                   "serviceaccount-controller")
#: kube-controller-manager's API client rate: the resourceclaim controller makes two writes per
#: pod (the claim, the pod's status), and the default 20 QPS would cap a DRA cluster at about
#: ten pods a second whatever the scheduler does (production clusters raise it too).
KCM_CLIENT_ARGS = ("--kube-api-qps=200", "--kube-api-burst=300")
#: Chart values of a DRA-mode release (what ``gputopo cluster up --mode dra`` renders).
DRA_VALUES: dict[str, Any] = {"mode": "dra"}


class GputopoProcess(ChildProcess):
    """A ``gputopo`` subcommand as a child process, ready when ``ready()`` says so.

    Args:
        name: process name (its log is ``<log_dir>/<name>.log``).
        args: the subcommand and its flags (after ``gputopo``).
        log_dir: where the log goes.
        ready: polled after start until true (exceptions count as "not yet").
        env_drop: environment variable prefix not passed on (settings by flags only).
    """

    def __init__(self, name: str, args: Sequence[str], log_dir: Path, *,
                 ready: Callable[[], bool] | None = None, env_drop: str = "GPUTOPO_") -> None:
        self.name = name
        self.args = list(args)
        self.log_path = log_dir / f"{name}.log"
        self._ready = ready
        self._env_drop = env_drop
        self.process: ManagedProcess | None = None
        self.starts = 0

    def start(self, timeout_s: float = 120.0) -> GputopoProcess:
        """Start it and wait until ready.

        Raises:
            ControlPlaneError: it exited, or was not ready within ``timeout_s``.
        """
        self.launch()
        return self.wait_ready(timeout_s)

    def launch(self) -> GputopoProcess:
        """Start the process without waiting (:meth:`wait_ready` waits)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(self._env_drop)}
        for k in ("GPUTOPO_K8S_BINDIR", "GPUTOPO_CACHE", "GPUTOPO_HELM"):
            if k in os.environ:
                env[k] = os.environ[k]
        proc = ManagedProcess(self.name, [*gputopo_command(), *self.args], self.log_path,
                              env=env)
        self.process = proc.start()
        self.starts += 1
        atexit.register(self.stop)
        return self

    def wait_ready(self, timeout_s: float = 120.0) -> GputopoProcess:
        """Wait until the started process is ready.

        Raises:
            ControlPlaneError: it exited, or was not ready within ``timeout_s``.
        """
        proc = self.process
        assert proc is not None, "launch() first"
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.exited():
                raise ControlPlaneError(f"{self.name} exited while starting; log "
                                        f"{self.log_path}:\n{proc.log_tail()}")
            try:
                if self._ready is None or self._ready():
                    return self
            except Exception:  # noqa: BLE001 - not up yet
                pass
            if time.monotonic() >= deadline:
                self.stop()
                raise ControlPlaneError(f"{self.name} not ready after {timeout_s:.0f} s; log "
                                        f"{self.log_path}:\n{proc.log_tail()}")
            time.sleep(0.1)

    def terminate(self) -> None:
        """Send SIGTERM to its process group, without waiting (:meth:`stop` waits)."""
        if self.process is not None and self.process.pid is not None and \
                not self.process.exited():
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass


def http_ok(url: str) -> bool:
    """GET ``url`` answers 200."""
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


# ------------------------------------------------------------------------------------- nodes
def add_dra_node(cp: ControlPlane, name: str, machine: str | Topology) -> Topology:
    """A kwok node for DRA: CPU and memory capacity, no extended GPU resources (its GPUs are
    the driver's ResourceSlices). Returns its topology.

    Raises:
        topology.catalog.UnknownMachine: unknown catalog name.
        kubernetes.client.exceptions.ApiException: the API server refused.
    """
    topo = resolve_machine(machine)
    cpus = {c for g in topo.gpus for c in g.cpu_affinity}
    cp.add_kwok_node(name, {"cpu": str(max(len(cpus), 8)), "memory": "1Ti"})
    return topo


def driver_process(kubeconfig: Path, node: str, machine: str, log_dir: Path, *,
                   extra_args: Sequence[str] = ()) -> GputopoProcess:
    """``gputopo dra-driver --no-kubelet`` publishing ``node``'s slices and annotations (ready
    when its pool is complete in the API)."""
    api = _resource_api(kubeconfig)

    def published() -> bool:
        resp: Any = api.list_resource_slice(field_selector=f"spec.nodeName={node}",
                                            _preload_content=False)
        items = json.loads(resp.data).get("items") or []
        mine = [s for s in items if s["spec"].get("driver") == dra.DRIVER]
        return bool(mine) and len(mine) >= int(mine[0]["spec"]["pool"]["resourceSliceCount"])

    return GputopoProcess(
        f"dra-driver-{node}",
        ["dra-driver", "--node-name", node, "--topology", machine, "--kubeconfig",
         str(kubeconfig), "--no-kubelet", *extra_args],
        log_dir, ready=published)


def allocator_process(kubeconfig: Path, log_dir: Path, *, policy: str = "gputopo",
                      port: int | None = None, extra_args: Sequence[str] = ()) -> GputopoProcess:
    """``gputopo dra-allocator`` (no leader election), ready when ``/readyz`` says synced."""
    port = port or free_port()
    proc = GputopoProcess(
        "gputopo-dra-allocator",
        ["dra-allocator", "--kubeconfig", str(kubeconfig), "--policy", policy,
         "--no-leader-elect", "--host", "127.0.0.1", "--port", str(port), *extra_args],
        log_dir, ready=lambda: http_ok(f"http://127.0.0.1:{port}/readyz"))
    proc.port = port  # type: ignore[attr-defined]
    return proc


def _resource_api(kubeconfig: Path) -> Any:
    from kubernetes import config as k8s_config

    return k8s_client.ResourceV1Api(k8s_config.new_client_from_config(
        config_file=str(kubeconfig)))


def dra_objects(values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's DRA-mode objects the local cluster needs besides the processes: the
    DeviceClasses and the admission policies (rendered with ``helm template``)."""
    rendered = render_manifests({**DRA_VALUES, **(values or {})})
    kinds = ("DeviceClass", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
    out = [o for o in rendered if o.get("kind") in kinds]
    if not any(o["kind"] == "DeviceClass" for o in out):  # a chart without them: the contract's
        out = dra.device_classes() + out
    return out


def apply_objects(cp: ControlPlane, objects: Iterable[Mapping[str, Any]]) -> None:
    """Create ``objects`` (cluster-scoped or in their namespace), keeping existing ones."""
    dyn = DynamicClient(cp.api_client())
    for obj in objects:
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        try:
            res.create(body=dict(obj), namespace=(obj.get("metadata") or {}).get("namespace"))
        except ApiException as exc:
            if exc.status != 409:
                raise


# --------------------------------------------------------------------------------------- pods
@dataclass(frozen=True)
class DraPod:
    """A pod whose GPUs come from a ResourceClaimTemplate (or an existing claim).

    Attributes:
        name: pod name.
        template: the ResourceClaimTemplate its claim is made from (or None).
        claim: an existing ResourceClaim it uses (or None).
        pattern, sensitive, policy: the gputopo.io/ annotations (None: not set).
        node_selector: ``spec.nodeSelector``.
        labels, annotations: more metadata.
    """

    name: str
    template: str | None = None
    claim: str | None = None
    pattern: str | None = None
    sensitive: bool | None = None
    policy: str | None = None
    node_selector: Mapping[str, str] | None = None
    labels: Mapping[str, str] | None = None
    annotations: Mapping[str, str] | None = None

    def manifest(self, namespace: str = DEFAULT_NAMESPACE,
                 scheduler_name: str = "default-scheduler") -> dict[str, Any]:
        """The pod as the API takes it."""
        ann = dict(self.annotations or {})
        if self.pattern is not None:
            ann[ANN_PATTERN] = self.pattern
        if self.sensitive is not None:
            ann[ANN_BW_SENSITIVE] = "true" if self.sensitive else "false"
        if self.policy is not None:
            ann[ANN_POLICY] = self.policy
        ref: dict[str, str] = {"name": "gpus"}
        if self.template:
            ref["resourceClaimTemplateName"] = self.template
        elif self.claim:
            ref["resourceClaimName"] = self.claim
        spec: dict[str, Any] = {
            "schedulerName": scheduler_name,
            "containers": [{"name": "main", "image": POD_IMAGE,
                            "resources": {"claims": [{"name": "gpus"}]}}],
            "resourceClaims": [ref],
            "terminationGracePeriodSeconds": 0,
        }
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.name, "namespace": namespace,
                             "labels": {"app": "gputopo-e2e", **(self.labels or {})},
                             "annotations": ann},
                "spec": spec}


def claim_spec(*, gpus: int = 0, compute: int = 0, memory_mib: int = 0, slot: bool = False,
               device_class: str | None = None) -> dict[str, Any]:
    """A claim spec asking ``gpus`` whole GPUs, a share (``compute`` percent and/or
    ``memory_mib``), or a co-location slot (``slot``, with ``memory_mib``)."""
    if slot:
        exactly: dict[str, Any] = {"deviceClassName": dra.CLASS_SLOT, "count": 1}
        if memory_mib:
            exactly["capacity"] = {"requests": {"memory": f"{memory_mib}Mi"}}
    elif gpus:
        exactly = {"deviceClassName": device_class or dra.CLASS_GPU, "count": gpus}
    else:
        reqs: dict[str, str] = {}
        if compute:
            reqs["compute"] = str(compute)
        if memory_mib:
            reqs["memory"] = f"{memory_mib}Mi"
        exactly = {"deviceClassName": dra.CLASS_SHARE, "count": 1,
                   "capacity": {"requests": reqs}}
    return {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}


class DraClient:
    """The API calls the DRA tests and benchmarks make: claim templates, claims, pods, and
    reading back claims and slices (JSON dicts).

    Args:
        api_client: an authenticated API client.
        namespace: where claims and pods go.
        scheduler_name: the pods' ``schedulerName``.
    """

    def __init__(self, api_client: Any, namespace: str = DEFAULT_NAMESPACE,
                 scheduler_name: str = "default-scheduler") -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.scheduler_name = scheduler_name
        self.core = k8s_client.CoreV1Api(api_client)
        self.resource = k8s_client.ResourceV1Api(api_client)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | Path, namespace: str = DEFAULT_NAMESPACE,
                        scheduler_name: str = "default-scheduler") -> DraClient:
        """A client from a kubeconfig file."""
        from kubernetes import config as k8s_config

        return cls(k8s_config.new_client_from_config(config_file=str(kubeconfig)), namespace,
                   scheduler_name)

    # ------------------------------------------------------------------ objects
    def create_claim_template(self, name: str, **spec: Any) -> None:
        """A ResourceClaimTemplate ``name`` asking :func:`claim_spec` ``(**spec)``."""
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"spec": claim_spec(**spec)}}
        self.resource.create_namespaced_resource_claim_template(self.namespace,
                                                                cast(Any, body))

    def create_claim(self, name: str, **spec: Any) -> None:
        """A ResourceClaim ``name`` asking :func:`claim_spec` ``(**spec)``."""
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": claim_spec(**spec)}
        self.resource.create_namespaced_resource_claim(self.namespace, cast(Any, body))

    def create_pod(self, pod: DraPod) -> None:
        """Create ``pod`` (for :attr:`scheduler_name`)."""
        self.core.create_namespaced_pod(self.namespace, cast(
            Any, pod.manifest(self.namespace, self.scheduler_name)))

    def list_claims(self) -> list[dict[str, Any]]:
        """ResourceClaims of :attr:`namespace` as JSON dicts."""
        resp: Any = self.resource.list_namespaced_resource_claim(self.namespace,
                                                                 _preload_content=False)
        return list(json.loads(resp.data).get("items") or [])

    def list_slices(self) -> list[dict[str, Any]]:
        """Every ResourceSlice as JSON dicts."""
        resp: Any = self.resource.list_resource_slice(_preload_content=False)
        return list(json.loads(resp.data).get("items") or [])



    def list_pods(self) -> list[dict[str, Any]]:
        """Pods of :attr:`namespace` as JSON dicts."""
        resp: Any = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        return list(json.loads(resp.data).get("items") or [])

    def delete_pods(self, names: Iterable[str]) -> None:
        """Delete pods (grace 0); a pod already gone is fine."""
        for name in names:
            try:
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise


# ---------------------------------------------------------------------------------- the stack
class DraCluster(GpuCluster):
    """kwok, kube-controller-manager, DRA GPU nodes with their drivers, the allocator, the
    extender and kube-scheduler (the chart's configuration) on ``cp``.

    Args:
        cp: a started control plane.
        policy: the allocator's (and extender's) default policy.
        namespace: where pods and claims go.
        allocator_args: more ``gputopo dra-allocator`` flags, kept across its restarts (e.g.
            ``--postpone-max-s``).
    """

    def __init__(self, cp: ControlPlane, *, policy: str = "gputopo",
                 namespace: str = DEFAULT_NAMESPACE,
                 allocator_args: Sequence[str] = ()) -> None:
        super().__init__(cp, policy=policy, namespace=namespace)
        self.policy = policy
        self.allocator_args = tuple(allocator_args)
        self.log_dir = cp.workdir / "logs"
        self.drivers: dict[str, GputopoProcess] = {}
        self.allocator: GputopoProcess | None = None
        self.machines: dict[str, str] = {}

    def __enter__(self) -> DraCluster:
        return self

    @property
    def client(self) -> DraClient:
        """The admin :class:`DraClient` for :attr:`namespace`."""
        return DraClient(self.cp.api_client(), self.namespace, self.scheduler_name)

    def start(  # type: ignore[override]
        self, nodes: Iterable[tuple[str, str]], *, allocator: bool = True,
        scheduler: bool = True, extender: bool = True, gate: bool = True,
        driver_args: Sequence[str] = (), values: Mapping[str, Any] | None = None,
        kwok_stages: Path | None = None,
    ) -> None:
        """Start kwok and kube-controller-manager, apply the chart's DRA objects, create the
        nodes and their drivers, then the allocator, the extender and kube-scheduler.

        Args:
            nodes: ``(node name, catalog machine)``.
            allocator: start ``gputopo dra-allocator``.
            scheduler, extender: start them.
            gate: install the chart's scheduling-gate policy (``draAllocator.gate``).
            driver_args: more ``gputopo dra-driver`` flags (e.g. leaving the allocator taint
                off, so that kube-scheduler allocates gputopo's devices itself).
            values: more chart values.
            kwok_stages: kwok's stages (default: its default stages).

        Raises:
            ControlPlaneError: a process did not start.
            kubernetes.client.exceptions.ApiException: the API server refused an object.
        """
        cp = self.cp
        cp.start_kwok(stages=kwok_stages)
        cp.start_controller_manager(DRA_CONTROLLERS, extra_args=KCM_CLIENT_ARGS)
        cp.create_default_serviceaccount(self.namespace)
        vals = {"draAllocator": {"gate": {"enabled": gate}}, **(values or {})}
        apply_objects(cp, dra_objects(vals))
        for name, machine in nodes:
            self.nodes[name] = add_dra_node(cp, name, machine)
            self.machines[name] = machine
        for name, machine in self.machines.items():
            self.drivers[name] = driver_process(cp.kubeconfig_path, name, machine,
                                                self.log_dir, extra_args=driver_args)
            self.drivers[name].launch()
        if allocator:  # started together with the drivers, waited for after them
            self.allocator = allocator_process(self.cp.kubeconfig_path, self.log_dir,
                                               policy=self.policy,
                                               extra_args=self.allocator_args).launch()
        if extender:
            self.extender.start()
        for d in self.drivers.values():
            d.wait_ready()
        if self.allocator is not None:
            self.allocator.wait_ready()
        if scheduler:
            from localcluster.gpucluster import scheduler_config

            self.start_scheduler(scheduler_config(self.extender.url))
        if gate:
            self._wait_gate()

    def start_allocator(self, extra_args: Sequence[str] = ()) -> GputopoProcess:
        """(Re)start ``gputopo dra-allocator`` with the cluster's ``allocator_args`` and
        ``extra_args``, and wait until it is synced."""
        if self.allocator is not None:
            self.allocator.stop()
        self.allocator = allocator_process(self.cp.kubeconfig_path, self.log_dir,
                                           policy=self.policy,
                                           extra_args=[*self.allocator_args, *extra_args])
        return self.allocator.start()

    def _wait_gate(self) -> None:
        probe = DraPod("gate-probe", template="gate-probe").manifest(self.namespace)

        def gated() -> bool:
            pod = self.core.create_namespaced_pod(self.namespace, cast(Any, probe),
                                                  dry_run="All")
            gates = (pod.spec.scheduling_gates if pod.spec is not None else None) or []
            return any(g.name == "gputopo.io/dra-allocation" for g in gates)

        wait_until(gated, 60, "the chart's scheduling-gate policy to act", interval_s=0.5)

    def stop(self) -> None:
        """Stop the scheduler, the extender, the allocator and the drivers by PID."""
        super().stop()
        procs = [p for p in [self.allocator, *self.drivers.values()] if p is not None]
        for p in procs:  # SIGTERM to all first: each takes a moment to shut down
            p.terminate()
        for p in procs:
            p.stop()

def claim_gpus(claim: Mapping[str, Any]) -> tuple[str, tuple[int, ...]] | None:
    """``(node, GPU indices in results order)`` of a claim's gputopo allocation (None:
    unallocated or none of gputopo's devices)."""
    alloc = (claim.get("status") or {}).get("allocation")
    if not alloc:
        return None
    got = dra.claim_allocation(((alloc.get("devices") or {}).get("results")) or [])
    if not got.grants:
        return None
    return got.pool, got.gpus


def pod_claims(pod: Mapping[str, Any], claims: Iterable[Mapping[str, Any]]) -> list[
        dict[str, Any]]:
    """The claims ``pod`` owns or is reserved for."""
    uid = (pod.get("metadata") or {}).get("uid")
    out = []
    for c in claims:
        owners = [r.get("uid") for r in (c.get("metadata") or {}).get("ownerReferences") or []]
        reserved = [r.get("uid") for r in (c.get("status") or {}).get("reservedFor") or []]
        if uid in owners or uid in reserved:
            out.append(dict(c))
    return out
