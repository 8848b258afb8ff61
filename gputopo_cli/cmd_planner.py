"""``gputopo planner``: plan the managed batch/v1 Jobs by due date and energy (ANDREAS)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gputopo_cli.common import configure_logging, fail


def register(app: typer.Typer) -> None:
    """Add ``planner`` to the CLI."""

    @app.command()
    def planner(
        kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="kubeconfig file (default: in-cluster service account)")] = None,
        namespace: Annotated[str | None, typer.Option("--namespace", help="namespace of the Jobs to manage (default: all)")] = None,
        queue: Annotated[str | None, typer.Option("--queue", help="manage only Jobs labelled gputopo.io/queue=<this> (default: any value)")] = None,
        interval: Annotated[float | None, typer.Option("--interval", help="seconds between periodic rescheduling points (default 300)")] = None,
        profiles_configmap: Annotated[str | None, typer.Option("--profiles-configmap", help="NAMESPACE/NAME of the ConfigMap whose profiles.yaml is the profile document")] = None,
        profiles_file: Annotated[Path | None, typer.Option("--profiles-file", help="the profile document as a file")] = None,
        iterations: Annotated[int | None, typer.Option("--iterations", help="MaxIt_RG (default 1000)")] = None,
        leader_elect: Annotated[bool | None, typer.Option("--leader-elect/--no-leader-elect", help="hold a coordination.k8s.io Lease before acting (default on)")] = None,
        lease_namespace: Annotated[str | None, typer.Option("--lease-namespace", help="namespace of the Lease (default gputopo-system)")] = None,
        metrics_port: Annotated[int | None, typer.Option("--metrics-port", help="Prometheus /metrics port (default 9464; 0 = off)")] = None,
        log_level: Annotated[str | None, typer.Option("--log-level", help="debug | info | warning | error")] = None,
        postpone_max_s: Annotated[float | None, typer.Option("--postpone-max-s", help="how long a gang of one bandwidth-sensitive multi-GPU pod may wait for a better GPU set, s from its first postponement (default 1800; 0 = never)")] = None,
        config: Annotated[Path | None, typer.Option("--config", help="YAML settings file (CLI > GPUTOPO_PLANNER_* env > file > defaults)")] = None,
    ) -> None:
        """Plan the Jobs labelled gputopo.io/queue (created suspended, annotated with a due
        date, a tardiness weight, epochs and a profile): resume them on a node and GPU count,
        suspend the ones a more urgent Job preempts (docs/planner.md)."""
        from planner.kube import ApiError
        from planner.service import ServeError, run
        from planner.settings import SettingsError, load_settings

        try:
            settings = load_settings(
                {
                    "kubeconfig": kubeconfig, "namespace": namespace, "queue": queue,
                    "interval_s": interval, "profiles_configmap": profiles_configmap,
                    "profiles_file": profiles_file, "max_iterations": iterations,
                    "leader_elect": leader_elect, "lease_namespace": lease_namespace,
                    "metrics_port": metrics_port, "log_level": log_level,
                    "postpone_max_s": postpone_max_s,
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
