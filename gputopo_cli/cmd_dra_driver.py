"""``gputopo dra-driver``: run gputopo's DRA driver (``gpu.gputopo.io``) on this node.

Every flag can also come from ``GPUTOPO_DRA_<NAME>`` (``NODE_NAME`` for the node) or the
``--config`` file; flags win, then the environment, then the file, then the defaults
(:mod:`dra_driver.settings`). Bad flags exit 2 with one line; a driver that cannot start (no
NVML, an unusable checkpoint, no Kubernetes config, a socket it cannot create) exits 1 with
one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gputopo_cli.common import configure_logging, fail


def register(app: typer.Typer) -> None:
    """Add the ``dra-driver`` command."""

    @app.command("dra-driver",
                 context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
    def dra_driver(
        ctx: typer.Context,
        node_name: Annotated[str | None, typer.Option(help="this node's name (env: NODE_NAME): the pool and every slice's nodeName")] = None,
        topology: Annotated[str | None, typer.Option(help="CATALOG|FILE: GPUs from a fake NVML fed by this topology (catalog name, topology JSON/YAML or saved `nvidia-smi topo -m`); default: the real NVML")] = None,
        kubeconfig: Annotated[str | None, typer.Option(help="kubeconfig file (default: in-cluster)")] = None,
        no_kubelet: Annotated[bool | None, typer.Option("--no-kubelet", help="publish ResourceSlices and the Node's topology only, no kubelet plugin (nodes without a kubelet, e.g. kwok); needs --topology")] = None,
        gpu_memory_mib: Annotated[str | None, typer.Option(help="MiB of GPUs whose memory the source does not give and the catalog does not know; unset: no memory capacity")] = None,
        gpu_model: Annotated[str | None, typer.Option(help="catalog GPU model of GPUs the source names none for (a `nvidia-smi topo -m` text), e.g. 'Tesla V100-SXM2-16GB'")] = None,
        shared_slots: Annotated[str | None, typer.Option(help="co-location slots per GPU (gpu-<i>-slot devices); 0 = none (default: 3)")] = None,
        shares: Annotated[bool | None, typer.Option("--shares/--no-shares", help="publish gpu-<i>-share devices (vGPU shares; default: on)")] = None,
        allocator_taint: Annotated[bool | None, typer.Option("--allocator-taint/--no-allocator-taint", help="taint every device gpu.gputopo.io/allocator=gputopo:NoSchedule so only gputopo's dra-allocator allocates them (default: on); off: kube-scheduler allocates them itself, by first fit")] = None,
        registry_dir: Annotated[str | None, typer.Option(help="kubelet plugin-registration directory (default: /var/lib/kubelet/plugins_registry)")] = None,
        plugin_dir: Annotated[str | None, typer.Option(help="this plugin's directory: DRA socket and checkpoint (default: /var/lib/kubelet/plugins/gpu.gputopo.io)")] = None,
        cdi_dir: Annotated[str | None, typer.Option(help="where CDI specs are written (default: /var/run/cdi)")] = None,
        mps_pipe_dir: Annotated[str | None, typer.Option(help="host CUDA MPS pipe directory (default: /run/nvidia/mps)")] = None,
        mps_shm_dir: Annotated[str | None, typer.Option(help="host directory the MPS daemon uses as /dev/shm, mounted in co-location slots (default: none)")] = None,
        omit_missing_device_nodes: Annotated[bool | None, typer.Option("--omit-missing-device-nodes/--keep-missing-device-nodes", help="leave /dev/nvidia* nodes absent on the host out of CDI specs (test nodes)")] = None,
        publish_interval: Annotated[str | None, typer.Option(help="seconds between resyncs of the slices and the Node's topology (default: 60)")] = None,
        health_recovery: Annotated[str | None, typer.Option(help="seconds an unhealthy GPU must answer NVML normally before it is healthy again; 0 = never (default: 300)")] = None,
        health_probe_interval: Annotated[str | None, typer.Option(help="seconds between NVML health probes (default: 5)")] = None,
        publish_node_metadata: Annotated[bool | None, typer.Option("--publish-node-metadata/--no-publish-node-metadata", help="also publish the Node's gputopo.io/topology annotation and labels (default: on)")] = None,
        log_level: Annotated[str | None, typer.Option(help="DEBUG|INFO|WARNING|ERROR (default: INFO)")] = None,
        config: Annotated[str | None, typer.Option(help="YAML/JSON settings file (env: GPUTOPO_DRA_CONFIG)")] = None,
        # --- test-only, hidden ---------------------------------------------------------------
        claim_source: Annotated[str | None, typer.Option(hidden=True, help="kubernetes | file:PATH")] = None,
        slice_sink: Annotated[str | None, typer.Option(hidden=True, help="kubernetes | file:PATH")] = None,
        node_sink: Annotated[str | None, typer.Option(hidden=True, help="kubernetes | file:PATH")] = None,
        fake_xid_file: Annotated[str | None, typer.Option(hidden=True, help="'<index> <xid>|lost|ok' lines for the fake NVML")] = None,
        watch_interval: Annotated[str | None, typer.Option(hidden=True, help="socket check period, s")] = None,
    ) -> None:
        """Run gputopo's DRA driver: publish ResourceSlices for this node's GPUs (driver
        gpu.gputopo.io) and the Node's topology, register with the kubelet, and prepare each
        claim's GPUs as a CDI spec (exactly its allocated GPUs)."""
        if ctx.args:
            fail(f"unknown option or argument {ctx.args[0]!r} (see gputopo dra-driver --help)")
        from dra_driver.driver import DRADriver, DriverError
        from dra_driver.settings import SettingsError, load_settings

        flags = {
            "node_name": node_name, "topology": topology, "kubeconfig": kubeconfig,
            "no_kubelet": no_kubelet, "gpu_memory_mib": gpu_memory_mib, "gpu_model": gpu_model,
            "shared_slots": shared_slots, "shares": shares, "allocator_taint": allocator_taint,
            "registry_dir": registry_dir,
            "plugin_dir": plugin_dir, "cdi_dir": cdi_dir, "mps_pipe_dir": mps_pipe_dir,
            "mps_shm_dir": mps_shm_dir, "omit_missing_device_nodes": omit_missing_device_nodes,
            "publish_interval_s": publish_interval, "health_recovery_s": health_recovery,
            "health_probe_interval_s": health_probe_interval,
            "publish_node_metadata": publish_node_metadata, "log_level": log_level,
            "claim_source": claim_source, "slice_sink": slice_sink, "node_sink": node_sink,
            "fake_xid_file": fake_xid_file, "watch_interval_s": watch_interval,
        }
        try:
            settings = load_settings(flags, Path(config) if config else None)
        except SettingsError as exc:
            fail(str(exc))
        configure_logging(settings.log_level)
        try:
            driver = DRADriver.build(settings)
            driver.run_until_signalled()
        except DriverError as exc:
            fail(str(exc), code=1)
