"""``gputopo dra-allocator``: ResourceClaims of gputopo's DeviceClasses get the GPU set the
placement policies choose (docs/dra.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gputopo_cli.common import configure_logging, fail


def register(app: typer.Typer) -> None:
    """Add ``dra-allocator`` to the CLI."""

    @app.command("dra-allocator")
    def dra_allocator(
        kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="kubeconfig file (default: in-cluster service account)")] = None,
        policy: Annotated[str | None, typer.Option("--policy", help="default placement policy (default gputopo; pods override it with gputopo.io/policy)")] = None,
        colocation_policy: Annotated[str | None, typer.Option("--colocation-policy", help="default policy of co-location slots when --policy does not co-locate")] = None,
        profile_catalog: Annotated[str | None, typer.Option("--profile-catalog", help="shipped co-location catalog name or file")] = None,
        user_profiles: Annotated[Path | None, typer.Option("--user-profiles", help="your co-location profiles (file or directory)")] = None,
        writers: Annotated[int | None, typer.Option("--writers", help="API writes in flight at once (default 16)")] = None,
        postpone_max_s: Annotated[float | None, typer.Option("--postpone-max-s", help="how long a bandwidth-sensitive multi-GPU pod may wait for a better GPU set, s from its first postponement (default 1800; 0 = never)")] = None,
        leader_elect: Annotated[bool | None, typer.Option("--leader-elect/--no-leader-elect", help="hold a coordination.k8s.io Lease before allocating (default on)")] = None,
        lease_namespace: Annotated[str | None, typer.Option("--lease-namespace", help="namespace of the Lease (default gputopo-system)")] = None,
        host: Annotated[str | None, typer.Option("--host", help="listen address of /healthz, /readyz, /metrics (default 0.0.0.0)")] = None,
        port: Annotated[int | None, typer.Option("--port", help="port of /healthz, /readyz, /metrics (default 8890; 0 = none)")] = None,
        log_level: Annotated[str | None, typer.Option("--log-level", help="debug | info | warning | error")] = None,
        config: Annotated[Path | None, typer.Option("--config", help="YAML settings file (CLI > GPUTOPO_DRA_ALLOCATOR_* env > file > defaults)")] = None,
    ) -> None:
        """Allocate the ResourceClaims that ask gputopo's DeviceClasses (gpu.gputopo.io,
        share.gpu.gputopo.io, slot.gpu.gputopo.io): for each pod not bound yet, the node and
        GPUs its placement policy chooses on the live free GPUs, written as the claims'
        status.allocation before kube-scheduler binds the pod there; then it removes the
        pod's gputopo.io/dra-allocation scheduling gate."""
        from scheduler_extender.dra.service import ServeError, run
        from scheduler_extender.dra.settings import SettingsError, load_settings
        from scheduler_extender.kubernetes_state import ApiError

        try:
            settings = load_settings(
                {
                    "kubeconfig": kubeconfig, "policy": policy,
                    "colocation_policy": colocation_policy, "profile_catalog": profile_catalog,
                    "user_profiles": user_profiles, "writers": writers,
                    "postpone_max_s": postpone_max_s,
                    "leader_elect": leader_elect, "lease_namespace": lease_namespace,
                    "host": host, "port": port, "log_level": log_level,
                },
                config,
            )  # fmt: skip
        except SettingsError as exc:
            fail(str(exc))
        configure_logging(settings.log_level)
        try:
            run(settings)
        except ApiError as exc:
            fail(str(exc))
        except ServeError as exc:  # a program that cannot start: 1, as the node programs
            fail(str(exc), code=1)
