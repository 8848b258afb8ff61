"""``gputopo cluster-demo``: the main job through a real kube-scheduler on a local control plane."""

from __future__ import annotations

from typing import Annotated

import typer

from gputopo_cli.common import fail


def register(app: typer.Typer) -> None:
    """Add ``cluster-demo`` to the CLI."""

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
