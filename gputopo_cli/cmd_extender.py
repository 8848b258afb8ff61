"""``gputopo extender`` (serve the kube-scheduler extender) and ``gputopo demo``."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Annotated

import typer

from gputopo_cli.common import configure_logging, fail


def listen_problem(host: str, port: int) -> str | None:
    """Why the extender could not listen on ``host:port`` (the OS's reason), or None: bound
    and released here as uvicorn binds (IPv6 for a host with a colon, ``SO_REUSEADDR``), so
    that a port in use is one line rather than uvicorn's log lines and exit status 3."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def register(app: typer.Typer) -> None:
    """Add ``extender`` and ``demo`` to the CLI."""

    @app.command()
    def extender(
        host: Annotated[str | None, typer.Option("--host", help="listen address (default 127.0.0.1)")] = None,
        port: Annotated[int | None, typer.Option("--port", help="listen port (default 8888; 0 = any free port)")] = None,
        tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help="PEM certificate: serve HTTPS (with --tls-key)")] = None,
        tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key of --tls-cert")] = None,
        auth: Annotated[str | None, typer.Option("--auth", help="who may call the verbs: none | loopback (127.0.0.1/::1 only: a sidecar of kube-scheduler) | mtls (client certificates; --client-ca, --allowed-client-name)")] = None,
        client_ca: Annotated[Path | None, typer.Option("--client-ca", help="--auth mtls: PEM CA that signs the callers' client certificates")] = None,
        allowed_client_name: Annotated[list[str] | None, typer.Option("--allowed-client-name", help="--auth mtls: a client certificate common name allowed to call the verbs (repeat for several)")] = None,
        log_level: Annotated[str | None, typer.Option("--log-level", help="debug | info | warning | error")] = None,
        policy: Annotated[str | None, typer.Option("--policy", help="default placement policy (pods may override with gputopo.io/policy)")] = None,
        state: Annotated[str | None, typer.Option("--state", help="kubernetes (list/watch the API; default) | memory (catalog nodes)")] = None,
        nodes: Annotated[str | None, typer.Option("--nodes", help="memory state nodes: CATALOG:COUNT[,CATALOG:COUNT...] (default dgx1-v100:4)")] = None,
        kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="kubeconfig file (default: in-cluster service account)")] = None,
        vgpu_memory_unit_mib: Annotated[int | None, typer.Option("--vgpu-memory-unit-mib", help="MiB per gputopo.io/vgpu-memory device, as the device plugins publish it (default 256)")] = None,
        bind_concurrency: Annotated[int | None, typer.Option("--bind-concurrency", help="binds served at once: threads and API connections kept for Bindings (default 64)")] = None,
        gil_switch_interval_ms: Annotated[float | None, typer.Option("--gil-switch-interval-ms", help="how long a thread may hold the GIL while another waits, ms (default 0.5; CPython's own is 5)")] = None,
        colocation_policy: Annotated[str | None, typer.Option("--colocation-policy", help="policy for gputopo.io/gpu-shared pods when --policy does not co-locate (default gputopo)")] = None,
        colocation_threshold: Annotated[float | None, typer.Option("--colocation-threshold", help="Tabrizian's threshold on the sum of C of a co-located set (Eq. 4.3 units; default 4e7)")] = None,
        profile_catalog: Annotated[str | None, typer.Option("--profile-catalog", help="shipped profile catalog (v100-cifar10-w10, v100-cifar10-w2) or a catalog file")] = None,
        user_profiles: Annotated[Path | None, typer.Option("--user-profiles", help="your own profile catalog file (e.g. a mounted ConfigMap), before the shipped one; re-read on change")] = None,
        measured_profiles: Annotated[Path | None, typer.Option("--measured-profiles", help="profiles measured with dcgm-exporter (the profile recorder's file), after the catalogs; re-read on change")] = None,
        scheduler_name: Annotated[str | None, typer.Option("--scheduler-name", help="the kube-scheduler profile served (pods' spec.schedulerName): its pending GPU pods are the waiting jobs the default policy weighs (default gputopo-scheduler)")] = None,
        lookahead_pods: Annotated[int | None, typer.Option("--lookahead-pods", help="pending pods the default policy weighs per decision, 0-8 (default 8; 0 = none)")] = None,
        postpone_max_s: Annotated[float | None, typer.Option("--postpone-max-s", help="how long a bandwidth-sensitive multi-GPU pod may wait for a better GPU set, s from its first postponement (default 1800; 0 = never)")] = None,
        config: Annotated[Path | None, typer.Option("--config", help="YAML settings file (CLI > GPUTOPO_EXTENDER_* env > file > defaults)")] = None,
    ) -> None:
        """Serve the scheduler extender (POST /filter, /prioritize, /bind) for kube-scheduler."""
        import uvicorn

        from scheduler_extender.app import create_app, tune_interpreter
        from scheduler_extender.auth import uvicorn_options
        from scheduler_extender.kubernetes_state import ApiError, KubernetesState
        from scheduler_extender.settings import SettingsError, load_settings
        from scheduler_extender.state import ClusterState, MemoryState

        try:
            settings = load_settings(
                {
                    "host": host, "port": port, "tls_cert": tls_cert, "tls_key": tls_key,
                    "auth": auth, "client_ca": client_ca,
                    "allowed_client_names": allowed_client_name or None,
                    "log_level": log_level, "policy": policy, "state": state, "nodes": nodes,
                    "kubeconfig": kubeconfig, "vgpu_memory_unit_mib": vgpu_memory_unit_mib,
                    "bind_concurrency": bind_concurrency,
                    "gil_switch_interval_ms": gil_switch_interval_ms,
                    "colocation_policy": colocation_policy,
                    "colocation_threshold": colocation_threshold,
                    "profile_catalog": profile_catalog, "user_profiles": user_profiles,
                    "measured_profiles": measured_profiles,
                    "scheduler_name": scheduler_name, "lookahead_pods": lookahead_pods,
                    "postpone_max_s": postpone_max_s,
                },
                config,
            )  # fmt: skip
        except SettingsError as exc:
            fail(str(exc))
        configure_logging(settings.log_level)
        why = listen_problem(settings.host, settings.port)
        if why is not None:  # a program that cannot start: 1, as the others
            fail(f"cannot serve on {settings.host}:{settings.port}: {why}", code=1)
        backend: ClusterState
        if settings.state == "memory":
            backend = MemoryState.from_spec(settings.nodes)
            backend.pending.scheduler_name = settings.scheduler_name
        else:
            try:
                kube = KubernetesState(kubeconfig=settings.kubeconfig,
                                       bind_connections=settings.bind_concurrency,
                                       scheduler_name=settings.scheduler_name)
            except ApiError as exc:
                fail(str(exc))
            kube.start_background()
            backend = kube
        app_ = create_app(settings, backend)
        tune_interpreter(settings.gil_switch_interval_ms / 1000)
        logging.getLogger("gputopo.extender").info(
            "extender: policy=%s state=%s auth=%s on %s://%s:%d", settings.policy,
            settings.state, settings.auth, "https" if settings.tls_cert else "http",
            settings.host, settings.port,
        )  # fmt: skip
        uvicorn.run(
            app_, host=settings.host, port=settings.port,
            log_level=settings.log_level, access_log=settings.log_level == "debug",
            **uvicorn_options(
                mode=settings.auth,
                tls_cert=str(settings.tls_cert) if settings.tls_cert else None,
                tls_key=str(settings.tls_key) if settings.tls_key else None,
                client_ca=str(settings.client_ca) if settings.client_ca else None,
            ),
        )  # fmt: skip

    @app.command()
    def demo(
        nodes: Annotated[str, typer.Option("--nodes", help="cluster: CATALOG:COUNT[,CATALOG:COUNT...]")] = "dgx1-v100:4",
        pods: Annotated[int, typer.Option("--pods", min=1, max=100_000, help="pods in the stream")] = 40,
        seed: Annotated[int, typer.Option("--seed", help="random seed of the pod stream")] = 7,
        port: Annotated[int, typer.Option("--port", min=0, max=65535, help="loopback port of the extender (0 = any free port)")] = 0,
    ) -> None:
        """Stream seeded GPU pods through a real extender on loopback; compare with the
        default stack (kube-scheduler + NVIDIA's device plugin).

        The extender (memory state) runs in-process; each pod goes through POST /filter,
        /prioritize and /bind as kube-scheduler would send them. The same stream is replayed
        with kube-scheduler's own node choice and NVIDIA's best-effort GPU choice, and with
        lowest free indices. The summary puts the worst bandwidth-sensitive job first, then
        the makespan and mean job completion time (a sensitive pod runs longer on worse
        links).
        """
        from gputopo_cli.demo import run_demo
        from scheduler_extender.state import NodesSpecError, parse_nodes_spec

        try:
            parse_nodes_spec(nodes)
        except NodesSpecError as exc:
            fail(str(exc))
        try:
            run_demo(nodes=nodes, pods=pods, seed=seed, port=port)
        except OSError as exc:
            fail(f"cannot start the extender on 127.0.0.1:{port}: {exc.strerror or exc}")
