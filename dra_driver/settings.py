"""DRA-driver settings: flags > environment > config file > defaults.

Every setting has a flag (``gputopo dra-driver --<name-with-dashes>``), an environment
variable ``GPUTOPO_DRA_<NAME>`` (``node_name`` also reads the Downward-API ``NODE_NAME``), and a
key in the YAML/JSON file given by ``--config`` / ``GPUTOPO_DRA_CONFIG``. Resolved once by
:func:`load_settings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from dra_driver.api import DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRY_DIR
from dra_driver.cdi import DEFAULT_CDI_DIR
from gpunode import settings as common
from topology.colocation.model import DEFAULT_SLOTS
from topology.dra import DRIVER
from topology.settings_file import (
    FileBackedSettings,
    SettingsError,
)

__all__ = ["DRADriverSettings", "SettingsError", "load_settings"]


class DRADriverSettings(FileBackedSettings):
    """Everything ``gputopo dra-driver`` can be told.

    Attributes:
        node_name: this node's Kubernetes name (required; Downward API ``NODE_NAME``); the
            pool's name and every slice's ``spec.nodeName``.
        kubeconfig: kubeconfig file; unset = in-cluster service account.
        topology: a catalog machine or a topology file (JSON/YAML, saved ``nvidia-smi topo
            -m``): the GPUs come from a fake NVML fed by it (test nodes, kwok nodes). Unset =
            the real NVML. The node then publishes what ``gputopo topology show <it>`` prints.
        gpu_memory_mib: MiB of GPUs whose memory the source does not give and the catalog
            does not know (a ``nvidia-smi topo -m`` text); unset: no ``memory`` capacity.
        gpu_model: the GPU model of a source that names none (a ``nvidia-smi topo -m``
            text), a model of the catalog (``gputopo topology list --models``): its product
            name and memory are used.
        no_kubelet: publish slices and the Node's topology only, with no kubelet plugin
            (nodes without a kubelet, e.g. kwok nodes of the local cluster).
        shared_slots: co-location slots per GPU (``gpu-<i>-slot`` devices' ``slots``); 0 =
            no slot devices.
        shares: publish ``gpu-<i>-share`` devices (vGPU shares).
        allocator_taint: taint every device ``gpu.gputopo.io/allocator=gputopo:NoSchedule``
            (:data:`topology.dra.ALLOCATOR_TAINT`) so that only gputopo's allocator allocates
            them; off for clusters where kube-scheduler allocates (no ``gputopo
            dra-allocator``).
        registry_dir: the kubelet's plugin-registration directory.
        plugin_dir: this plugin's directory (its DRA socket and checkpoint).
        cdi_dir: where CDI specs are written (the runtime reads them there).
        mps_pipe_dir: host CUDA MPS pipe directory (shares and slots).
        mps_shm_dir: host directory the MPS daemon uses as ``/dev/shm`` (slots); unset: none.
        omit_missing_device_nodes: leave ``/dev/nvidia*`` nodes missing on the host out of
            the CDI specs (fake-topology nodes with a real runtime, e.g. kind).
        publish_interval_s: seconds between resyncs of the slices and the Node's metadata
            (also at once on a health change).
        health_recovery_s: seconds an unhealthy GPU must answer NVML normally before it is
            healthy again (0 = never).
        health_probe_interval_s: seconds between NVML health probes.
        watch_interval_s: seconds between checks that the sockets still exist.
        api_timeout_s: timeout of each API call, seconds.
        publish_node_metadata: also publish the Node's ``gputopo.io/topology`` annotation and
            labels, as the device plugin does (the allocator reads the topology there).
        claim_source: ``kubernetes``, or for tests ``file:PATH`` (claims from a JSON file).
        slice_sink: ``kubernetes``, or for tests ``file:PATH`` (slices written to a file).
        node_sink: ``kubernetes``, or for tests ``file:PATH`` (Node metadata to a file).
        fake_xid_file: tests, with ``topology``: lines ``<gpu> <xid>|lost|ok`` injected into
            the fake NVML.
        log_level: ``DEBUG`` | ``INFO`` | ``WARNING`` | ``ERROR``.
    """

    model_config = SettingsConfigDict(env_prefix="GPUTOPO_DRA_", extra="forbid",
                                      populate_by_name=True, validate_default=True)

    node_name: Annotated[
        str, Field(validation_alias=AliasChoices("GPUTOPO_DRA_NODE_NAME", "NODE_NAME")),
    ] = ""
    kubeconfig: Path | None = None
    topology: str | None = None
    gpu_memory_mib: Annotated[int, Field(ge=1, le=1 << 24)] | None = None
    gpu_model: str | None = None
    no_kubelet: bool = False
    shared_slots: Annotated[int, Field(ge=0, le=48)] = DEFAULT_SLOTS
    shares: bool = True
    allocator_taint: bool = True
    registry_dir: Path = Path(DEFAULT_REGISTRY_DIR)
    plugin_dir: Path = Path(DEFAULT_PLUGINS_DIR) / DRIVER
    cdi_dir: Path = Path(DEFAULT_CDI_DIR)
    mps_pipe_dir: Path = Path("/run/nvidia/mps")
    mps_shm_dir: Path | None = None
    omit_missing_device_nodes: bool = False
    publish_interval_s: Annotated[float, Field(gt=0)] = 60.0
    health_recovery_s: Annotated[float, Field(ge=0)] = 300.0
    health_probe_interval_s: Annotated[float, Field(gt=0, le=3600)] = 5.0
    watch_interval_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    api_timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0
    publish_node_metadata: bool = True
    claim_source: str = "kubernetes"
    slice_sink: str = "kubernetes"
    node_sink: str = "kubernetes"
    fake_xid_file: Path | None = None
    log_level: str = "INFO"

    @field_validator("node_name")
    @classmethod
    def _node_name(cls, v: str) -> str:
        return common.node_name(v)

    @field_validator("claim_source", "slice_sink", "node_sink")
    @classmethod
    def _source(cls, v: str) -> str:
        return common.kubernetes_or_file(v)

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        return common.log_level(v)

    @model_validator(mode="after")
    def _consistent(self) -> DRADriverSettings:
        if not self.node_name:
            raise ValueError("node name is required (--node-name or the NODE_NAME variable)")
        if self.fake_xid_file is not None and not self.topology:
            raise ValueError("fake_xid_file needs topology (it feeds the fake NVML)")
        if self.no_kubelet and not self.topology:
            raise ValueError("--no-kubelet needs --topology: a node without a kubelet has no "
                             "GPUs of its own to discover")
        return self

    @property
    def registration_socket(self) -> Path:
        """``<registry dir>/gpu.gputopo.io-reg.sock``."""
        return self.registry_dir / f"{DRIVER}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        """``<plugin dir>/dra.sock``: the endpoint the kubelet dials."""
        return self.plugin_dir / "dra.sock"

    @property
    def checkpoint_file(self) -> Path:
        """``<plugin dir>/checkpoint.json``."""
        return self.plugin_dir / "checkpoint.json"


def load_settings(flags: Mapping[str, Any] | None = None,
                  config_file: Path | None = None) -> DRADriverSettings:
    """Resolve settings: ``flags`` (None values are unset) > ``GPUTOPO_DRA_*`` / ``NODE_NAME``
    > ``config_file`` (or ``GPUTOPO_DRA_CONFIG``) > defaults.

    Raises:
        SettingsError: a value is invalid or missing (one line naming the setting).
    """
    return common.load(DRADriverSettings, flags, config_file, "GPUTOPO_DRA_CONFIG")
