"""``gputopo cluster-demo``: the main job through a real kube-scheduler on a local control plane."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gputopo_cli.common import fail


def register(app: typer.Typer) -> None:
    """Add ``cluster-demo`` and ``cluster up|down|status`` to the CLI."""
    register_cluster(app)

    @app.command(
        "cluster-demo",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
    def cluster_demo(
        ctx: typer.Context,
        nodes: Annotated[str, typer.Option("--nodes", help="kwok GPU nodes: CATALOG:COUNT[,CATALOG:COUNT...]")] = "dgx1-v100:3,dgx-a100:1,pcie-8gpu:1",
        pods: Annotated[int, typer.Option("--pods", help="pods in the seeded stream (1-500)")] = 16,
        seed: Annotated[int, typer.Option("--seed", help="random seed of the pod stream")] = 7,
        policy: Annotated[str, typer.Option("--policy", help="the extender's default placement policy")] = "gputopo",
        timeout: Annotated[float, typer.Option("--timeout", help="seconds to wait for the pods to be bound or refused (1-3600)")] = 120.0,
    ) -> None:
        """Start etcd, kube-apiserver, kwok GPU nodes, the gputopo extender and kube-scheduler
        (the Helm chart's config) on 127.0.0.1; create a seeded batch of GPU pods through the
        API; print where each landed; stop everything by PID.

        The first run may build the control-plane binaries from the Go module proxy (minutes);
        they are cached in ~/.cache/gputopo.
        """
        from gputopo_cli.cluster_demo import run_cluster_demo
        from localcluster import BinariesUnavailable, ControlPlaneError, find_binaries
        from localcluster.chart import ChartError
        from scheduler_extender.state import NodesSpecError, parse_nodes_spec
        from topology.policies.registry import UnknownPolicy, get_policy

        if ctx.args:
            fail(f"unexpected argument {ctx.args[0]!r} (see gputopo cluster-demo --help)")
        if not 1 <= pods <= 500:
            fail(f"--pods must be between 1 and 500, got {pods}")
        if not 1 <= timeout <= 3600:
            fail(f"--timeout must be between 1 and 3600 seconds, got {timeout:g}")
        try:
            node_list = parse_nodes_spec(nodes)
            get_policy(policy)
        except (NodesSpecError, UnknownPolicy) as exc:
            fail(str(exc))
        try:
            try:
                binaries = find_binaries(allow_build=False)
            except BinariesUnavailable:
                print("building the control-plane binaries from the Go module proxy (first run "
                      "only, several minutes; log in ~/.cache/gputopo/build-k8s-tools.log) ...",
                      flush=True)
                binaries = find_binaries()
        except BinariesUnavailable as exc:
            fail(f"control-plane binaries unavailable: {exc}", 1)
        try:
            run_cluster_demo(nodes=node_list, pods=pods, seed=seed, policy=policy,
                             timeout_s=timeout, binaries=binaries)
        except (ControlPlaneError, ChartError, BinariesUnavailable, TimeoutError, OSError) as exc:
            fail(f"cluster demo failed: {exc}", 1)


def register_cluster(app: typer.Typer) -> None:
    """Add ``cluster up``, ``cluster down`` and ``cluster status`` to the CLI."""
    cluster_app = typer.Typer(
        help="A local cluster that stays up (kind without Docker): etcd, kube-apiserver, "
        "kube-controller-manager, kube-scheduler with the chart's configuration, kwok GPU "
        "nodes and gputopo's components, on 127.0.0.1.",
        no_args_is_help=True,
    )

    @cluster_app.command("up")
    def up(
        nodes: Annotated[str, typer.Option("--nodes", help="kwok GPU nodes: CATALOG:COUNT[,CATALOG:COUNT...]")] = "dgx1-v100:2",
        mode: Annotated[str, typer.Option("--mode", help="device-plugin | dra")] = "device-plugin",
        policy: Annotated[str, typer.Option("--policy", help="default placement policy")] = "gputopo",
        state_dir: Annotated[Path | None, typer.Option("--state-dir", help="where state, kubeconfig and logs go (default ~/.cache/gputopo/cluster)")] = None,
        timeout: Annotated[float, typer.Option("--timeout", help="seconds to wait for it (1-3600)")] = 600.0,
        device_taint_rules: Annotated[bool, typer.Option("--device-taint-rules", help="serve DeviceTaintRules (resource.k8s.io/v1beta2) and turn on their beta gate DRADeviceTaintRules in kube-apiserver, kube-scheduler and kube-controller-manager (both off by default in 1.36)")] = False,
    ) -> None:
        """Start the cluster in the background and print its kubeconfig path; it runs until
        `gputopo cluster down`. The first run builds the control-plane binaries (minutes;
        cached in ~/.cache/gputopo)."""
        from localcluster import BinariesUnavailable, find_binaries
        from localcluster.standing import MODES, ClusterUpError, default_state_dir
        from localcluster.standing import up as start
        from scheduler_extender.state import NodesSpecError, parse_nodes_spec
        from topology.policies.registry import UnknownPolicy, get_policy

        if mode not in MODES:
            fail(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not 1 <= timeout <= 3600:
            fail(f"--timeout must be between 1 and 3600 seconds, got {timeout:g}")
        try:
            # nodes are named <catalog>-<i> (parse_nodes_spec validates the spec)
            node_list = [(name, name.rsplit("-", 1)[0]) for name, _ in parse_nodes_spec(nodes)]
            get_policy(policy)
        except (NodesSpecError, UnknownPolicy) as exc:
            fail(str(exc))
        try:
            try:
                find_binaries(allow_build=False)
            except BinariesUnavailable:
                print("building the control-plane binaries from the Go module proxy (first run "
                      "only, several minutes; log in ~/.cache/gputopo/build-k8s-tools.log) ...",
                      flush=True)
                find_binaries()
        except BinariesUnavailable as exc:
            fail(f"control-plane binaries unavailable: {exc}", 1)
        where = state_dir or default_state_dir()
        try:
            st = start(node_list, mode, where, policy=policy, timeout_s=timeout,
                       device_taint_rules=device_taint_rules)
        except ClusterUpError as exc:
            fail(str(exc), 1)
        print(f"gputopo cluster up ({st.mode}): {len(st.nodes)} nodes, API server {st.server}")
        for p in st.processes:
            print(f"  {p.name:<28} pid {p.pid}")
        print(f"kubeconfig: {st.kubeconfig}")
        print(f"  export KUBECONFIG={st.kubeconfig}")
        print("stop it with: gputopo cluster down"
              + (f" --state-dir {where}" if state_dir else ""))

    @cluster_app.command("down")
    def down(state_dir: Annotated[Path | None, typer.Option("--state-dir", help="where state, kubeconfig and logs go (default ~/.cache/gputopo/cluster)")] = None) -> None:
        """Stop exactly what `gputopo cluster up` started (by the PIDs it recorded)."""
        from localcluster.standing import ClusterUpError, default_state_dir
        from localcluster.standing import down as stop

        try:
            stopped = stop(state_dir or default_state_dir())
        except ClusterUpError as exc:
            fail(str(exc), 1)
        for p in stopped:
            print(f"stopped {p.name} (pid {p.pid})")
        print(f"gputopo cluster down: {len(stopped)} processes stopped")

    @cluster_app.command("status")
    def status(state_dir: Annotated[Path | None, typer.Option("--state-dir", help="where state, kubeconfig and logs go (default ~/.cache/gputopo/cluster)")] = None) -> None:
        """The cluster's processes, nodes, and every pod with its node and GPUs."""
        from localcluster.standing import alive, default_state_dir, running
        from localcluster.status import pod_gpu_lines

        where = state_dir or default_state_dir()
        st = running(where)
        if st is None:
            fail(f"no cluster runs from {where}", 1)
        print(f"mode {st.mode}, API server {st.server}, kubeconfig {st.kubeconfig}")
        for p in st.processes:
            print(f"  {p.name:<28} pid {p.pid:<8} {'running' if alive(p) else 'NOT RUNNING'}")
        for line in pod_gpu_lines(Path(st.kubeconfig), st.mode):
            print(line)

    app.add_typer(cluster_app, name="cluster")
