"""A throwaway control plane on loopback: etcd, kube-apiserver, kube-scheduler, kwok, and on
demand kube-controller-manager (:meth:`ControlPlane.start_controller_manager`, the Job
controller only).

There is no kubelet, and by default no controller-manager. Consequences handled here (see
``shared/docs/CONTROL-PLANE-NOTES.md``):

* nobody creates the ``default`` ServiceAccount: :meth:`ControlPlane.create_default_serviceaccount`;
* new Nodes get the ``node.kubernetes.io/not-ready`` taint from admission and nobody removes it:
  :meth:`ControlPlane.add_kwok_node` creates the node Ready and clears that taint;
* pods bound to fake nodes are driven to Running (and deleted pods are finalised) by kwok,
  :meth:`ControlPlane.start_kwok`.

Every process binds 127.0.0.1 on a free port, runs in its own process group, logs to a file in
:attr:`ControlPlane.workdir` and is stopped by PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, cast

import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from localcluster.binaries import Binaries, find_binaries
from localcluster.pki import Pki, generate_pki
from localcluster.process import ManagedProcess

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
"""Annotation (value ``fake``) that marks a node as kwok-managed."""

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

DEFAULT_SCHEDULER_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
"""
"""A minimal KubeSchedulerConfiguration: the default profile, no extender, no leader election."""

_NOT_READY_TAINT_KEYS = frozenset(
    {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
)

T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """A control-plane process failed to start, died, or did not become ready in time.

    The message carries the tail of the relevant log file.
    """


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, then close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(
    predicate: Callable[[], T | None],
    timeout_s: float,
    what: str,
    interval_s: float = 0.1,
) -> T:
    """Call ``predicate`` until it returns a truthy value, and return that value.

    Exceptions raised by ``predicate`` count as "not yet"; the last one is chained.

    Args:
        predicate: polled every ``interval_s`` seconds.
        timeout_s: give up after this many seconds.
        what: a description for the error message.

    Raises:
        TimeoutError: ``predicate`` stayed falsy for ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    last_exc: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
            last_exc = exc
        if time.monotonic() >= deadline:
            msg = f"timed out after {timeout_s:.0f} s waiting for {what}"
            raise TimeoutError(msg) from last_exc
        time.sleep(interval_s)


class ControlPlane:
    """etcd + kube-apiserver (started on enter), plus kube-scheduler and kwok on demand.

    Use as a context manager; :meth:`stop` (called by ``__exit__``) always tears everything down
    and removes the work directory unless ``keep_workdir`` (or ``GPUTOPO_KEEP_CLUSTER_DIR=1``).

    Args:
        binaries: the executables; default :func:`localcluster.binaries.find_binaries` (which may
            build them).
        workdir: where certs, configs, logs and etcd data go; default a new temp directory.
        keep_workdir: leave the work directory in place on stop (for debugging).
        ready_timeout_s: seconds each component may take to become ready.
        apiserver_args: extra kube-apiserver flags, appended last (so they override).
        feature_gates: Kubernetes feature gates (name → on), given as ``--feature-gates`` to
            kube-apiserver and to every kube-scheduler and kube-controller-manager started
            here. ``DRADeviceTaintRules`` on also makes kube-apiserver serve
            ``resource.k8s.io/v1beta2`` DeviceTaintRules (that beta API is off by default).
        etcd_on_tmpfs: put etcd's data directory under /dev/shm when it exists (no disk fsync
            latency; the data is throwaway anyway, and removed on stop even with
            ``keep_workdir``).
        verbosity: klog ``-v`` for the Kubernetes components.
    """

    def __init__(
        self,
        binaries: Binaries | None = None,
        *,
        workdir: Path | str | None = None,
        keep_workdir: bool = False,
        ready_timeout_s: float = 120.0,
        apiserver_args: Sequence[str] = (),
        feature_gates: Mapping[str, bool] | None = None,
        etcd_on_tmpfs: bool = True,
        verbosity: int = 0,
    ) -> None:
        self._binaries = binaries
        self._workdir_arg = Path(workdir) if workdir is not None else None
        self._keep_workdir = keep_workdir or os.environ.get("GPUTOPO_KEEP_CLUSTER_DIR") == "1"
        self.ready_timeout_s = ready_timeout_s
        self.feature_gates = dict(feature_gates or {})
        self._apiserver_extra = [*self._gate_args(),
                                 *(["--runtime-config=resource.k8s.io/v1beta2/devicetaintrules=true"]
                                   if self.feature_gates.get("DRADeviceTaintRules") else []),
                                 *apiserver_args]
        self._etcd_on_tmpfs = etcd_on_tmpfs
        self._verbosity = verbosity

        self._workdir: Path | None = None
        self._owns_workdir = False
        self._etcd_data: Path | None = None
        self._pki: Pki | None = None
        self._processes: list[ManagedProcess] = []
        self._api_client: k8s_client.ApiClient | None = None
        self.apiserver_port: int | None = None
        self.etcd_port: int | None = None
        self.start_seconds: float | None = None
        """Seconds from :meth:`start` to a ready API server with a kubeconfig written."""

    def _gate_args(self) -> list[str]:
        """``--feature-gates`` for the Kubernetes components (none when no gate is set)."""
        if not self.feature_gates:
            return []
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(self.feature_gates.items()))
        return [f"--feature-gates={gates}"]

    # ------------------------------------------------------------------ properties

    @property
    def binaries(self) -> Binaries:
        """The executables in use (found or built on first access).

        Raises:
            BinariesUnavailable: they cannot be found or built.
        """
        if self._binaries is None:
            self._binaries = find_binaries()
        return self._binaries

    @property
    def workdir(self) -> Path:
        """The directory holding certs, configs and logs.

        Raises:
            ControlPlaneError: not started.
        """
        if self._workdir is None:
            raise ControlPlaneError("control plane not started")
        return self._workdir

    @property
    def server_url(self) -> str:
        """``https://127.0.0.1:<port>`` of the API server."""
        if self.apiserver_port is None:
            raise ControlPlaneError("control plane not started")
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig_path(self) -> Path:
        """Admin kubeconfig (client cert in group ``system:masters``)."""
        return self.workdir / "admin.kubeconfig"

    @property
    def ca_path(self) -> Path:
        """PEM CA bundle that signed the API server's serving cert and the client certs."""
        return self.workdir / "pki" / "ca.crt"

    @property
    def processes(self) -> list[ManagedProcess]:
        """The processes started so far, in start order."""
        return list(self._processes)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Generate certs, start etcd and kube-apiserver, wait for ``/readyz``, write kubeconfig.

        On any failure everything started so far is stopped before the error propagates.

        Raises:
            BinariesUnavailable: the binaries cannot be found or built.
            ControlPlaneError: a process died or was not ready within ``ready_timeout_s``.
        """
        if self._workdir is not None:
            raise ControlPlaneError("control plane already started")
        binaries = self.binaries
        t0 = time.monotonic()
        if self._workdir_arg is not None:
            self._workdir = self._workdir_arg
            self._workdir.mkdir(parents=True, exist_ok=True)
        else:
            self._workdir = Path(tempfile.mkdtemp(prefix="gputopo-cp-"))
            self._owns_workdir = True
        atexit.register(self.stop)
        try:
            self._pki = generate_pki(self._workdir / "pki", service_ip="10.96.0.1")
            self._start_etcd(binaries)
            self._start_apiserver(binaries)
            self._write_kubeconfig()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0

    def stop(self) -> None:
        """Stop every process (newest first) and remove the work directory. Idempotent."""
        atexit.unregister(self.stop)
        if self._api_client is not None:
            try:
                self._api_client.close()
            except Exception:  # noqa: BLE001 - best effort at teardown
                pass
            self._api_client = None
        for proc in reversed(self._processes):
            proc.stop()
        if self._etcd_data is not None:  # tmpfs is RAM: never left behind, even when keeping
            shutil.rmtree(self._etcd_data, ignore_errors=True)
        if self._workdir is not None and self._owns_workdir and not self._keep_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)

    # ------------------------------------------------------------------ components

    def _spawn(self, name: str, args: Sequence[str | Path]) -> ManagedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}
        proc = ManagedProcess(
            name, [str(a) for a in args], self.workdir / "logs" / f"{name}.log", env=env
        )
        proc.start()
        self._processes.append(proc)
        return proc

    def _wait_ready(self, proc: ManagedProcess, check: Callable[[], bool], what: str) -> None:
        def probe() -> bool:
            if proc.exited():
                raise ControlPlaneError(
                    f"{proc.name} exited while starting; log {proc.log_path}:\n{proc.log_tail()}"
                )
            return check()

        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            try:
                if probe():
                    return
            except ControlPlaneError:
                raise
            except Exception:  # noqa: BLE001 - connection refused etc.: not up yet
                pass
            if time.monotonic() >= deadline:
                raise ControlPlaneError(
                    f"{what} not ready after {self.ready_timeout_s:.0f} s; log {proc.log_path}:\n"
                    f"{proc.log_tail()}"
                )
            time.sleep(0.1)

    def _start_etcd(self, binaries: Binaries) -> None:
        client_port, peer_port = free_port(), free_port()
        shm = Path("/dev/shm")
        if self._etcd_on_tmpfs and shm.is_dir() and os.access(shm, os.W_OK):
            self._etcd_data = Path(tempfile.mkdtemp(prefix="gputopo-etcd-", dir=shm))
            data_dir = self._etcd_data
        else:
            data_dir = self.workdir / "etcd-data"
        client_url = f"http://127.0.0.1:{client_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        proc = self._spawn(
            "etcd",
            [
                binaries.etcd,
                "--name=gputopo",
                f"--data-dir={data_dir}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=gputopo={peer_url}",
                "--initial-cluster-state=new",
                "--logger=zap",
                "--log-outputs=stderr",
                "--quota-backend-bytes=2147483648",
            ],
        )
        self.etcd_port = client_port

        def healthy() -> bool:
            with urllib.request.urlopen(f"{client_url}/health", timeout=2) as resp:
                return b'"health":"true"' in resp.read()

        self._wait_ready(proc, healthy, "etcd")

    def _ssl_context(self) -> ssl.SSLContext:
        assert self._pki is not None
        ctx = ssl.create_default_context(cafile=str(self._pki.ca_cert))
        ctx.load_cert_chain(str(self._pki.admin_cert), str(self._pki.admin_key))
        return ctx

    def _start_apiserver(self, binaries: Binaries) -> None:
        assert self._pki is not None and self.etcd_port is not None
        pki = self._pki
        self.apiserver_port = free_port()
        args: list[str | Path] = [
            binaries.kube_apiserver,
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            f"--requestheader-client-ca-file={pki.front_proxy_ca_cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki.front_proxy_client_cert}",
            f"--proxy-client-key-file={pki.front_proxy_client_key}",
            "--allow-privileged=true",
            "--profiling=false",
            f"--v={self._verbosity}",
            *self._apiserver_extra,
        ]
        proc = self._spawn("kube-apiserver", args)
        ctx = self._ssl_context()

        def ready() -> bool:
            url = f"{self.server_url}/readyz"
            with urllib.request.urlopen(url, timeout=5, context=ctx) as resp:
                return bool(resp.status == 200 and resp.read().strip() == b"ok")

        self._wait_ready(proc, ready, "kube-apiserver /readyz")

    def _write_kubeconfig(self) -> None:
        assert self._pki is not None
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gputopo",
                    "cluster": {
                        "server": self.server_url,
                        "certificate-authority": str(self._pki.ca_cert),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(self._pki.admin_cert),
                        "client-key": str(self._pki.admin_key),
                    },
                }
            ],
            "contexts": [{"name": "admin", "context": {"cluster": "gputopo", "user": "admin"}}],
            "current-context": "admin",
        }
        self.kubeconfig_path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        self.kubeconfig_path.chmod(0o600)

    def start_scheduler(
        self,
        config_yaml: str | None = None,
        extra_args: Sequence[str] = (),
        name: str = "kube-scheduler",
    ) -> ManagedProcess:
        """Start kube-scheduler with a KubeSchedulerConfiguration and wait for its ``/healthz``.

        ``clientConnection.kubeconfig`` is set to the admin kubeconfig unless the YAML sets it
        (``--kubeconfig`` is ignored when ``--config`` is given), and leader election is turned
        off unless the YAML says otherwise.

        Args:
            config_yaml: KubeSchedulerConfiguration text; default :data:`DEFAULT_SCHEDULER_CONFIG`.
            extra_args: extra kube-scheduler flags.
            name: process name (log file ``logs/<name>.log``); use distinct names for a
                second scheduler.

        Raises:
            ControlPlaneError: not started, bad YAML, or the scheduler died / was not healthy
                within ``ready_timeout_s``.
        """
        try:
            cfg: dict[str, Any] = yaml.safe_load(config_yaml or DEFAULT_SCHEDULER_CONFIG) or {}
        except yaml.YAMLError as exc:
            raise ControlPlaneError(f"invalid KubeSchedulerConfiguration YAML: {exc}") from exc
        if not isinstance(cfg, dict):
            raise ControlPlaneError("KubeSchedulerConfiguration YAML must be a mapping")
        conn = cfg.setdefault("clientConnection", {})
        conn.setdefault("kubeconfig", str(self.kubeconfig_path))
        cfg.setdefault("leaderElection", {}).setdefault("leaderElect", False)
        cfg_path = self.workdir / f"{name}-config.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        port = free_port()
        proc = self._spawn(
            name,
            [
                self.binaries.kube_scheduler,
                f"--config={cfg_path}",
                f"--authentication-kubeconfig={self.kubeconfig_path}",
                f"--authorization-kubeconfig={self.kubeconfig_path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / (name + '-certs')}",
                f"--v={self._verbosity}",
                *self._gate_args(),
                *extra_args,
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        def healthy() -> bool:
            url = f"https://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(url, timeout=2, context=insecure) as resp:
                return bool(resp.status == 200)

        self._wait_ready(proc, healthy, f"{name} /healthz")
        return proc

    def start_controller_manager(
        self, controllers: Sequence[str] = ("job",), extra_args: Sequence[str] = ()
    ) -> ManagedProcess:
        """Start kube-controller-manager running only ``controllers`` (default: the Job
        controller, which creates a resumed Job's pods and deletes a suspended Job's) and wait
        for its ``/healthz``. Leader election is off.

        Raises:
            ControlPlaneError: not started, no kube-controller-manager binary, or it died / was
                not healthy in time.
        """
        if self.binaries.kube_controller_manager is None:
            raise ControlPlaneError(
                "kube-controller-manager not found among the control-plane binaries; run "
                "scripts/build-k8s-tools.sh"
            )
        port = free_port()
        proc = self._spawn(
            "kube-controller-manager",
            [
                self.binaries.kube_controller_manager,
                f"--kubeconfig={self.kubeconfig_path}",
                f"--authentication-kubeconfig={self.kubeconfig_path}",
                f"--authorization-kubeconfig={self.kubeconfig_path}",
                f"--controllers={','.join(controllers)}",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / 'kube-controller-manager-certs'}",
                f"--v={self._verbosity}",
                *self._gate_args(),
                *extra_args,
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        def healthy() -> bool:
            url = f"https://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(url, timeout=2, context=insecure) as resp:
                return bool(resp.status == 200)

        self._wait_ready(proc, healthy, "kube-controller-manager /healthz")
        return proc

    def start_kwok(
        self,
        extra_args: Sequence[str] = (),
        pod_cidr: str = "10.244.0.1/16",
        stages: Path | None = None,
    ) -> ManagedProcess:
        """Start kwok managing every node annotated ``kwok.x-k8s.io/node=fake``.

        kwok keeps those nodes Ready (heartbeats), moves pods bound to them to Running (with a
        pod IP from ``pod_cidr``) and finalises deleted pods. Uses ``stages``, else the default
        stages written by the build script (``kwok-stages.yaml`` beside the kwok binary;
        :meth:`default_kwok_stages`).

        Raises:
            ControlPlaneError: no stages file, or kwok died / was not healthy in time.
        """
        stages = stages or self._kwok_stages()
        port = free_port()
        proc = self._spawn(
            "kwok",
            [
                self.binaries.kwok,
                f"--kubeconfig={self.kubeconfig_path}",
                f"--config={stages}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--server-address=127.0.0.1:{port}",
                f"--cidr={pod_cidr}",
                "--node-ip=10.0.0.1",
                *extra_args,
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
                return bool(resp.status == 200)

        self._wait_ready(proc, healthy, "kwok /healthz")
        return proc

    def default_kwok_stages(self) -> Path:
        """The build script's kwok stages file (kwokctl's default stages)."""
        return self._kwok_stages()

    def _kwok_stages(self) -> Path:
        candidates = [self.binaries.kwok.parent / "kwok-stages.yaml"]
        env_dir = os.environ.get("GPUTOPO_K8S_BINDIR")
        if env_dir:
            candidates.insert(0, Path(env_dir) / "kwok-stages.yaml")
        for path in candidates:
            if path.is_file():
                return path
        raise ControlPlaneError(
            "kwok-stages.yaml not found (looked in "
            + ", ".join(str(c) for c in candidates)
            + "); run scripts/build-k8s-tools.sh"
        )

    # ------------------------------------------------------------------ API helpers

    def api_client(self) -> k8s_client.ApiClient:
        """A Kubernetes API client with admin credentials (shared; closed on :meth:`stop`)."""
        if self._api_client is None:
            self._api_client = k8s_config.new_client_from_config(
                config_file=str(self.kubeconfig_path)
            )
        return self._api_client

    def core_v1(self) -> k8s_client.CoreV1Api:
        """``CoreV1Api`` on :meth:`api_client`."""
        return k8s_client.CoreV1Api(self.api_client())

    def create_default_serviceaccount(self, namespace: str = "default") -> None:
        """Create the namespace (if missing) and its ``default`` ServiceAccount (if missing).

        Without a controller-manager nobody else does, and pod creation is rejected until it
        exists.

        Raises:
            kubernetes.client.exceptions.ApiException: the API server refused.
        """
        core = self.core_v1()
        try:
            core.create_namespace(
                k8s_client.V1Namespace(metadata=k8s_client.V1ObjectMeta(name=namespace))
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
        try:
            core.create_namespaced_service_account(
                namespace,
                k8s_client.V1ServiceAccount(metadata=k8s_client.V1ObjectMeta(name="default")),
            )
        except ApiException as exc:
            if exc.status != 409:
                raise

    def add_kwok_node(
        self,
        name: str,
        capacity: Mapping[str, str | int],
        annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> k8s_client.V1Node:
        """Create a kwok-managed fake node that is Ready and carries no taints.

        ``capacity`` is also used as allocatable; ``pods`` defaults to 110 when absent.
        Quantities may be ints (``{"cpu": 32, "nvidia.com/gpu": 8, "memory": "256Gi"}``).
        The node gets ``kwok.x-k8s.io/node: fake`` plus ``annotations``, and the usual
        ``kubernetes.io/hostname|os|arch`` and ``type: kwok`` labels plus ``labels``.
        Start kwok (:meth:`start_kwok`) to keep it Ready and run its pods.

        Raises:
            kubernetes.client.exceptions.ApiException: the API server refused (e.g. 409 exists).
        """
        quantities = {k: str(v) for k, v in capacity.items()}
        quantities.setdefault("pods", "110")
        all_annotations = {
            KWOK_NODE_ANNOTATION: "fake",
            "node.alpha.kubernetes.io/ttl": "0",
            **(annotations or {}),
        }
        all_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            **(labels or {}),
        }
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": all_annotations, "labels": all_labels},
            "spec": {},
            "status": {
                "phase": "Running",
                "capacity": quantities,
                "allocatable": dict(quantities),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kwok fake node is ready",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.1"},
                    {"type": "Hostname", "address": name},
                ],
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": "fake",
                    "kubeProxyVersion": "fake",
                    "containerRuntimeVersion": "fake",
                    "kernelVersion": "",
                    "osImage": "",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                },
            },
        }
        core = self.core_v1()
        # The client serialises plain dicts as they are.
        node: k8s_client.V1Node = core.create_node(cast(Any, body))
        # Node creation keeps status, but admission (TaintNodesByCondition) adds the not-ready
        # taint, and without a node-lifecycle controller nothing would ever remove it.
        taints = list(node.spec.taints or []) if node.spec else []
        keep = [t for t in taints if t.key not in _NOT_READY_TAINT_KEYS]
        if len(keep) != len(taints):
            value = [core.api_client.sanitize_for_serialization(t) for t in keep]
            patch = [{"op": "replace", "path": "/spec/taints", "value": value}]
            node = core.patch_node(name, patch)
        if not _node_ready(node):
            node = core.patch_node_status(name, {"status": body["status"]})
        return node


def _node_ready(node: k8s_client.V1Node) -> bool:
    conditions = (node.status.conditions or []) if node.status else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)
