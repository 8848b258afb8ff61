"""Device-plugin settings: flags > environment > config file > defaults.

Every setting has a flag (``gputopo device-plugin --<name-with-dashes>``), an environment
variable ``GPUTOPO_DP_<NAME>`` (``node_name`` also reads the Downward-API ``NODE_NAME``), and a
key in the YAML/JSON config file given by ``--config`` / ``GPUTOPO_DP_CONFIG`` (keys in
snake_case or with dashes). Settings are resolved once, by :func:`load_settings`, never at
import time.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from device_plugin.api import DEFAULT_DEVICE_PLUGIN_DIR, DEFAULT_POD_RESOURCES_SOCKET
from gpunode import settings as common
from topology.settings_file import (
    FileBackedSettings,
    SettingsError,
    read_settings_file,
)

__all__ = ["DevicePluginSettings", "SettingsError", "load_settings", "read_config_file"]

#: Default memory granularity of ``gputopo.io/vgpu-memory`` devices, MiB per device.
DEFAULT_VGPU_MEMORY_UNIT_MIB = 256
#: Default Prometheus port (0 disables the endpoint).
DEFAULT_METRICS_PORT = 9445
#: Default time a GPU marked unhealthy must answer NVML normally before it is healthy again,
#: seconds (an XID storm or a flapping GPU keeps resetting it; 0 = never recover).
DEFAULT_HEALTH_RECOVERY_S = 300.0
#: Default period of the health probe (one NVML query per GPU), seconds.
DEFAULT_HEALTH_PROBE_INTERVAL_S = 5.0


class DevicePluginSettings(FileBackedSettings):
    """Everything ``gputopo device-plugin`` can be told.

    Attributes:
        device_plugin_dir: the kubelet's device-plugin directory (``kubelet.sock`` lives there;
            the plugin creates one socket per resource in it).
        node_name: this node's Kubernetes name (required; Downward API ``NODE_NAME``).
        kubeconfig: kubeconfig file; unset = in-cluster service-account config.
        fake_topology: a catalog machine name or a topology file (topology JSON/YAML, saved
            ``nvidia-smi topo -m``): use the fake NVML fed by it instead of the driver (test
            and demo nodes). Unset = real NVML. The node then publishes exactly what
            ``gputopo topology show <it> --output json`` prints.
        gpu_memory_mib: framebuffer size, MiB, of GPUs whose memory the source does not give
            and the catalog does not know for their model (a ``nvidia-smi topo -m`` text
            names neither). Unset and unknown: ``gputopo.io/vgpu-memory`` is not advertised
            (said at start-up).
        gpu_model: the catalog GPU model (``Tesla V100-SXM2-16GB``) of GPUs the source names
            none for (a ``nvidia-smi topo -m`` text): they get its name and the catalog's
            memory for it. Where memory comes from is said at start-up.
        metrics_port: Prometheus ``/metrics`` port on all interfaces; 0 disables it.
        metrics_host: address the metrics endpoint binds.
        vgpu_memory_unit_mib: MiB per ``gputopo.io/vgpu-memory`` device (pods request memory
            in these units; published on the node as ``gputopo.io/vgpu-memory-unit-mib``).
        pod_resources_socket: the kubelet's pod-resources socket, used to tell which pod the
            kubelet is admitting; "" disables (identity falls back to creation order).
        omit_missing_device_nodes: leave out of Allocate's device specs the ``/dev/nvidia*``
            nodes that do not exist on the host (test clusters such as kind with a fake
            topology, where a missing host device would stop the container from starting).
        mps_pipe_dir: host directory of the CUDA MPS control daemon's pipes, mounted into
            fractional containers and co-location slots at the same path.
        mps_shm_dir: host directory the MPS control daemon uses as ``/dev/shm`` (the chart's
            MPS DaemonSet mounts it there), mounted at ``/dev/shm`` in co-location slots'
            containers; unset = not mounted.
        shared_slots: ``gputopo.io/gpu-shared`` devices (co-location slots) per GPU, published
            on the node as ``gputopo.io/gpu-shared-slots``; 0 = the resource is not advertised.
        dcgm_exporter_url: dcgm-exporter's ``/metrics`` URL on this node (e.g.
            ``http://localhost:9400/metrics``): measure co-location profiles of jobs running
            alone (:mod:`device_plugin.profiling`); "" = off.
        profile_sink: where measured profiles go: ``configmap:NAMESPACE/NAME`` (data key
            ``<node>.yaml``) or ``file:PATH``; required with ``dcgm_exporter_url``.
        profile_interval_s: seconds between dcgm-exporter scrapes.
        profile_window: consecutive scrapes of a job alone that make one measurement.
        publish_interval_s: seconds between re-publications of the node's topology
            annotation and labels (also re-published at once on a health change).
        watch_interval_s: seconds between checks of ``kubelet.sock`` / our sockets.
        allocate_wait_s: how long Allocate re-lists pods when no pending pod is found yet,
            seconds.
        api_timeout_s: timeout of each Kubernetes API call, seconds.
        pod_source: ``kubernetes`` (default), or, for tests only, ``file:PATH`` (pods from a
            JSON file; annotation patches kept in ``PATH.patches.json``).
        node_sink: ``kubernetes`` (default), or, for tests only, ``file:PATH`` (the node's
            published annotations and labels are written there as JSON).
        health_recovery_s: a GPU marked unhealthy (critical XID, failed NVML query) is
            healthy again once NVML has answered normally for it for this long, seconds; 0 =
            never (until the plugin restarts).
        health_probe_interval_s: how often every GPU is queried through NVML (a failed query
            marks it unhealthy; normal answers count towards recovery), seconds.
        fake_xid_file: tests only, with ``fake_topology``: a file the plugin polls; each new
            line ``<gpu-index> <xid>`` is injected into the fake NVML as a critical XID, and
            ``<gpu-index> lost`` / ``<gpu-index> ok`` make NVML queries on that GPU fail
            (GPU is lost) / answer normally again.
        log_level: ``DEBUG`` | ``INFO`` | ``WARNING`` | ``ERROR``.
        kubelet_config_file: the kubelet's ``KubeletConfiguration`` file (read-only; usually
            ``/var/lib/kubelet/config.yaml``): its ``topologyManagerPolicy``,
            ``topologyManagerScope``, ``topologyManagerPolicyOptions`` and
            ``cpuManagerPolicy`` are published on the Node (:mod:`device_plugin.kubelet_config`).
            Unset: only the three settings below, else the kubelet's defaults.
        kubelet_topology_manager_policy: this node's kubelet ``topologyManagerPolicy``
            (``none`` | ``best-effort`` | ``restricted`` | ``single-numa-node``); wins over the
            file. The extender chooses GPUs on the NUMA node(s) that policy will pick.
        kubelet_topology_manager_scope: ``container`` | ``pod``; wins over the file.
        kubelet_cpu_manager_policy: ``none`` | ``static``; wins over the file.
    """

    model_config = SettingsConfigDict(
        env_prefix="GPUTOPO_DP_",
        extra="forbid",
        populate_by_name=True,
        validate_default=True,
    )

    device_plugin_dir: Path = Path(DEFAULT_DEVICE_PLUGIN_DIR)
    node_name: Annotated[
        str,
        Field(validation_alias=AliasChoices("GPUTOPO_DP_NODE_NAME", "NODE_NAME")),
    ] = ""
    kubeconfig: Path | None = None
    fake_topology: str | None = None
    gpu_memory_mib: Annotated[int, Field(ge=1, le=1 << 24)] | None = None
    gpu_model: str | None = None
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = DEFAULT_METRICS_PORT
    metrics_host: str = "0.0.0.0"
    vgpu_memory_unit_mib: Annotated[int, Field(ge=1, le=1 << 20)] = DEFAULT_VGPU_MEMORY_UNIT_MIB
    pod_resources_socket: str = DEFAULT_POD_RESOURCES_SOCKET
    mps_pipe_dir: Path = Path("/run/nvidia/mps")
    mps_shm_dir: Path | None = None
    shared_slots: Annotated[int, Field(ge=0, le=48)] = 3
    dcgm_exporter_url: str = ""
    profile_sink: str = ""
    profile_interval_s: Annotated[float, Field(gt=0, le=3600)] = 10.0
    profile_window: Annotated[int, Field(ge=1, le=1000)] = 6
    omit_missing_device_nodes: bool = False
    publish_interval_s: Annotated[float, Field(gt=0)] = 60.0
    watch_interval_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    allocate_wait_s: Annotated[float, Field(ge=0, le=60)] = 2.0
    api_timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0
    pod_source: str = "kubernetes"
    node_sink: str = "kubernetes"
    health_recovery_s: Annotated[float, Field(ge=0)] = DEFAULT_HEALTH_RECOVERY_S
    health_probe_interval_s: Annotated[float, Field(gt=0, le=3600)] = (
        DEFAULT_HEALTH_PROBE_INTERVAL_S
    )
    fake_xid_file: Path | None = None
    log_level: str = "INFO"
    kubelet_config_file: Path | None = None
    kubelet_topology_manager_policy: str | None = None
    kubelet_topology_manager_scope: str | None = None
    kubelet_cpu_manager_policy: str | None = None

    @field_validator("node_name")
    @classmethod
    def _node_name(cls, v: str) -> str:
        return common.node_name(v)

    @field_validator("pod_source", "node_sink")
    @classmethod
    def _source(cls, v: str) -> str:
        return common.kubernetes_or_file(v)

    @field_validator("kubelet_topology_manager_policy")
    @classmethod
    def _tm_policy(cls, v: str | None) -> str | None:
        from topology.numa_alignment import TOPOLOGY_MANAGER_POLICIES

        return _one_of(v, TOPOLOGY_MANAGER_POLICIES)

    @field_validator("kubelet_topology_manager_scope")
    @classmethod
    def _tm_scope(cls, v: str | None) -> str | None:
        from topology.numa_alignment import TOPOLOGY_MANAGER_SCOPES

        return _one_of(v, TOPOLOGY_MANAGER_SCOPES)

    @field_validator("kubelet_cpu_manager_policy")
    @classmethod
    def _cpu_policy(cls, v: str | None) -> str | None:
        from topology.numa_alignment import CPU_MANAGER_POLICIES

        return _one_of(v, CPU_MANAGER_POLICIES)

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        return common.log_level(v)

    @model_validator(mode="after")
    def _consistent(self) -> DevicePluginSettings:
        if not self.node_name:
            raise ValueError("node name is required (--node-name or the NODE_NAME variable)")
        if self.fake_xid_file is not None and not self.fake_topology:
            raise ValueError("fake_xid_file needs fake_topology (it feeds the fake NVML)")
        if self.dcgm_exporter_url:
            if not self.dcgm_exporter_url.startswith(("http://", "https://")):
                raise ValueError("dcgm_exporter_url must be an http(s) URL")
            sink = self.profile_sink
            ok = (sink.startswith("file:") and len(sink) > 5) or (
                sink.startswith("configmap:") and sink.count("/") == 1
                and all(sink.removeprefix("configmap:").split("/")))
            if not ok:
                raise ValueError("dcgm_exporter_url needs profile_sink "
                                 "configmap:NAMESPACE/NAME or file:PATH")
        return self

    @property
    def kubelet_socket(self) -> Path:
        """``<device_plugin_dir>/kubelet.sock``."""
        return self.device_plugin_dir / "kubelet.sock"


def _one_of(v: str | None, allowed: tuple[str, ...]) -> str | None:
    """``v`` stripped when it is one of ``allowed`` (None and "" = unset)."""
    if v is None or not v.strip():
        return None
    if v.strip() not in allowed:
        raise ValueError(f"must be one of {', '.join(allowed)}, got {v!r}")
    return v.strip()


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON config file into field names (:func:`read_settings_file`: dashes
    become underscores, a flag's leading dashes are dropped).

    Raises:
        SettingsError: unreadable, not a mapping, or an unknown key (named).
    """
    return read_settings_file(path, DevicePluginSettings.model_fields)


def load_settings(
    flags: Mapping[str, Any] | None = None, config_file: Path | None = None
) -> DevicePluginSettings:
    """Resolve settings: ``flags`` (values that are None are unset) > ``GPUTOPO_DP_*`` /
    ``NODE_NAME`` > ``config_file`` (or ``GPUTOPO_DP_CONFIG``) > defaults.

    Raises:
        SettingsError: a value is invalid or missing (one line naming the setting).
    """
    return common.load(DevicePluginSettings, flags, config_file, "GPUTOPO_DP_CONFIG")
