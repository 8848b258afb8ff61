"""``gputopo device-plugin``: run the kubelet device plugin on this node.

Every flag can also come from ``GPUTOPO_DP_<NAME>`` (``NODE_NAME`` for the node) or the
``--config`` file; flags win, then the environment, then the file, then the defaults (see
:mod:`device_plugin.settings`). Bad flags exit 2 with one line; a plugin that cannot start
(no NVML, no device-plugin directory, no Kubernetes config) exits 1 with one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gputopo_cli.common import configure_logging, fail

_DIR = "kubelet device-plugin directory (default: /var/lib/kubelet/device-plugins/)"


def register(app: typer.Typer) -> None:
    """Add the ``device-plugin`` command."""

    @app.command(
        "device-plugin",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
    def device_plugin(
        ctx: typer.Context,
        device_plugin_dir: Annotated[str | None, typer.Option(help=_DIR)] = None,
        node_name: Annotated[
            str | None, typer.Option(help="this node's name (env: NODE_NAME)")
        ] = None,
        kubeconfig: Annotated[
            str | None, typer.Option(help="kubeconfig file (default: in-cluster)")
        ] = None,
        fake_topology: Annotated[
            str | None,
            typer.Option(
                help="CATALOG|FILE: fake NVML fed by this topology (catalog name, topology "
                "JSON/YAML or saved `nvidia-smi topo -m`; test nodes)"
            ),
        ] = None,
        gpu_memory_mib: Annotated[
            str | None,
            typer.Option(
                help="MiB of GPUs whose memory the source does not give and the catalog does "
                "not know (e.g. a `nvidia-smi topo -m` text); unset: such GPUs get no "
                "gputopo.io/vgpu-memory"
            ),
        ] = None,
        gpu_model: Annotated[
            str | None,
            typer.Option(help="catalog GPU model (e.g. 'Tesla V100-SXM2-16GB') of GPUs the topology source names none for (a `nvidia-smi topo -m` text): its name and memory are used"),
        ] = None,
        metrics_port: Annotated[
            str | None, typer.Option(help="Prometheus port, 0 = off (default: 9445)")
        ] = None,
        metrics_host: Annotated[
            str | None, typer.Option(help="metrics bind address (default: 0.0.0.0)")
        ] = None,
        vgpu_memory_unit_mib: Annotated[
            str | None, typer.Option(help="MiB per gputopo.io/vgpu-memory device (default: 256)")
        ] = None,
        pod_resources_socket: Annotated[
            str | None,
            typer.Option(
                help="kubelet pod-resources socket, '' = off (default: /var/lib/kubelet/pod-resources/kubelet.sock)"
            ),
        ] = None,
        mps_pipe_dir: Annotated[
            str | None, typer.Option(help="host CUDA MPS pipe directory (default: /run/nvidia/mps)")
        ] = None,
        mps_shm_dir: Annotated[
            str | None, typer.Option(help="host directory the MPS control daemon uses as /dev/shm, mounted at /dev/shm in co-location slots (default: none)")
        ] = None,
        shared_slots: Annotated[
            str | None, typer.Option(help="gputopo.io/gpu-shared co-location slots per GPU; 0 = not advertised (default: 3)")
        ] = None,
        dcgm_exporter_url: Annotated[
            str | None, typer.Option(help="dcgm-exporter /metrics URL on this node (e.g. http://localhost:9400/metrics): measure co-location profiles of jobs running alone (default: off)")
        ] = None,
        profile_sink: Annotated[
            str | None, typer.Option(help="where measured profiles go: configmap:NAMESPACE/NAME (data key <node>.yaml) or file:PATH")
        ] = None,
        profile_interval: Annotated[
            str | None, typer.Option(help="seconds between dcgm-exporter scrapes (default: 10)")
        ] = None,
        profile_window: Annotated[
            str | None, typer.Option(help="scrapes of a job alone per measurement (default: 6)")
        ] = None,
        omit_missing_device_nodes: Annotated[
            bool | None,
            typer.Option(
                "--omit-missing-device-nodes/--keep-missing-device-nodes",
                help="leave out /dev/nvidia* nodes absent on the host (test nodes, e.g. kind)",
            ),
        ] = None,
        health_recovery: Annotated[
            str | None,
            typer.Option(
                help="seconds an unhealthy GPU must answer NVML normally before it is healthy "
                "again; 0 = never (default: 300)"
            ),
        ] = None,
        health_probe_interval: Annotated[
            str | None, typer.Option(help="seconds between NVML health probes (default: 5)")
        ] = None,
        publish_interval: Annotated[
            str | None, typer.Option(help="seconds between topology re-publications (default: 60)")
        ] = None,
        log_level: Annotated[
            str | None, typer.Option(help="DEBUG|INFO|WARNING|ERROR (default: INFO)")
        ] = None,
        kubelet_config_file: Annotated[
            str | None,
            typer.Option(
                help="the kubelet's KubeletConfiguration file (e.g. /var/lib/kubelet/config.yaml):"
                " its topologyManagerPolicy/Scope/PolicyOptions and cpuManagerPolicy are "
                "published on the Node so the extender places GPUs where the kubelet's "
                "Topology Manager will accept them"
            ),
        ] = None,
        kubelet_topology_manager_policy: Annotated[
            str | None,
            typer.Option(
                help="none|best-effort|restricted|single-numa-node: this node's kubelet "
                "topologyManagerPolicy (wins over --kubelet-config-file; default: none)"
            ),
        ] = None,
        kubelet_topology_manager_scope: Annotated[
            str | None,
            typer.Option(help="container|pod: the kubelet's topologyManagerScope "
                         "(default: container)"),
        ] = None,
        kubelet_cpu_manager_policy: Annotated[
            str | None,
            typer.Option(help="none|static: the kubelet's cpuManagerPolicy (default: none)"),
        ] = None,
        config: Annotated[
            str | None, typer.Option(help="YAML/JSON settings file (env: GPUTOPO_DP_CONFIG)")
        ] = None,
        # --- test-only, hidden -------------------------------------------------------------
        pod_source: Annotated[
            str | None, typer.Option(hidden=True, help="kubernetes | file:PATH (tests)")
        ] = None,
        node_sink: Annotated[
            str | None, typer.Option(hidden=True, help="kubernetes | file:PATH (tests)")
        ] = None,
        fake_xid_file: Annotated[
            str | None,
            typer.Option(
                hidden=True,
                help="lines '<index> <xid>|lost|ok' injected into the fake NVML (tests)",
            ),
        ] = None,
        watch_interval: Annotated[
            str | None, typer.Option(hidden=True, help="kubelet.sock poll period, s")
        ] = None,
        allocate_wait: Annotated[
            str | None, typer.Option(hidden=True, help="Allocate re-list window, s")
        ] = None,
    ) -> None:
        """Run the gputopo device plugin: advertise nvidia.com/gpu, gputopo.io/vgpu-core and
        gputopo.io/vgpu-memory to the kubelet, publish the node's topology, and hand each
        container exactly the GPUs the gputopo extender chose for its pod."""
        if ctx.args:
            fail(f"unknown option or argument {ctx.args[0]!r} (see gputopo device-plugin --help)")
        from device_plugin.plugin import DevicePlugin, PluginError
        from device_plugin.settings import SettingsError, load_settings

        flags = {
            "device_plugin_dir": device_plugin_dir,
            "node_name": node_name,
            "kubeconfig": kubeconfig,
            "fake_topology": fake_topology,
            "gpu_memory_mib": gpu_memory_mib,
            "gpu_model": gpu_model,
            "health_recovery_s": health_recovery,
            "health_probe_interval_s": health_probe_interval,
            "metrics_port": metrics_port,
            "metrics_host": metrics_host,
            "vgpu_memory_unit_mib": vgpu_memory_unit_mib,
            "pod_resources_socket": pod_resources_socket,
            "mps_pipe_dir": mps_pipe_dir,
            "mps_shm_dir": mps_shm_dir,
            "shared_slots": shared_slots,
            "dcgm_exporter_url": dcgm_exporter_url,
            "profile_sink": profile_sink,
            "profile_interval_s": profile_interval,
            "profile_window": profile_window,
            "omit_missing_device_nodes": omit_missing_device_nodes,
            "publish_interval_s": publish_interval,
            "kubelet_config_file": kubelet_config_file,
            "kubelet_topology_manager_policy": kubelet_topology_manager_policy,
            "kubelet_topology_manager_scope": kubelet_topology_manager_scope,
            "kubelet_cpu_manager_policy": kubelet_cpu_manager_policy,
            "log_level": log_level,
            "pod_source": pod_source,
            "node_sink": node_sink,
            "fake_xid_file": fake_xid_file,
            "watch_interval_s": watch_interval,
            "allocate_wait_s": allocate_wait,
        }
        try:
            settings = load_settings(flags, Path(config) if config else None)
        except SettingsError as exc:
            fail(str(exc))
        configure_logging(settings.log_level)
        try:
            plugin = DevicePlugin.build(settings)
            plugin.run_until_signalled()
        except PluginError as exc:
            fail(str(exc), code=1)
