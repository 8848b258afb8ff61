"""Extender settings: CLI flags > environment (``GPUTOPO_EXTENDER_*``) > config file (YAML) >
defaults.

Use :func:`load_settings`; it turns every problem (unknown policy, malformed nodes spec, a TLS
certificate without its key, an unknown key in the config file …) into one
:class:`SettingsError` line, which the CLI prints before exiting with code 2.

Config file example (keys are the field names; dashes are accepted for underscores)::

    host: 0.0.0.0
    port: 8888
    policy: gputopo
    state: kubernetes
    log_level: info
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from scheduler_extender.kubernetes_state import DEFAULT_BIND_CONCURRENCY
from scheduler_extender.pending import DEFAULT_SCHEDULER_NAME
from scheduler_extender.state import NodesSpecError, parse_nodes_spec
from topology.contract import DEFAULT_VGPU_MEMORY_UNIT_MIB
from topology.policies.base import MAX_UPCOMING
from topology.policies.default import POSTPONE_MAX_S
from topology.policies.registry import DEFAULT_POLICY, UnknownPolicy, get_policy
from topology.settings_file import (
    FileBackedSettings,
    SettingsError,
    config_file_data,
    read_settings_file,
    validation_message,
)

ENV_PREFIX = "GPUTOPO_EXTENDER_"

__all__ = ["ExtenderSettings", "SettingsError", "load_settings", "read_config_file"]


class ExtenderSettings(FileBackedSettings):
    """Everything ``gputopo extender`` can be told.

    Attributes:
        host: listen address (default loopback; ``0.0.0.0`` in a cluster).
        port: listen port (0 = any free port).
        tls_cert: PEM certificate file; with ``tls_key`` serves HTTPS (uvicorn ssl).
        tls_key: PEM private key file.
        auth: who may call the verbs (``scheduler_extender.auth``): ``none`` (anyone),
            ``loopback`` (peers on 127.0.0.0/8 or ::1 only, else 403: the extender as a
            sidecar of kube-scheduler) or ``mtls`` (HTTPS client certificates signed by
            ``client_ca`` whose subject CN is in ``allowed_client_names``; none: 401, another
            name: 403). ``/healthz``, ``/readyz``, ``/metrics`` stay open in every mode.
        client_ca: ``mtls``: PEM CA bundle that signs the callers' client certificates.
        allowed_client_names: ``mtls``: subject common names accepted (e.g. the
            ``gputopo-scheduler`` certificate kube-scheduler presents).
        log_level: ``debug`` / ``info`` / ``warning`` / ``error``.
        policy: default placement policy (a registered name; pods may override it with the
            ``gputopo.io/policy`` annotation).
        state: ``kubernetes`` (list/watch the API) or ``memory`` (catalog nodes, tests/demo).
        nodes: memory backend nodes, ``CATALOG:COUNT[,CATALOG:COUNT…]``.
        kubeconfig: kubeconfig file for the kubernetes backend (None = in-cluster config).
        eval_budget_ms: how long one pod's filter + prioritize may wait for placement
            decisions that are not cached yet, milliseconds; decisions still running then
            are answered provisionally (filter: pass on capacity; prioritize: 0) and cached
            when done. 0 (the default) = no budget: every answer is exact, and latency grows
            with the number of distinct node states. A budget (e.g. 20) bounds latency on
            very large clusters at the price of provisional scores for unseen states.
        vgpu_memory_unit_mib: MiB per ``gputopo.io/vgpu-memory`` device: pods request
            vGPU memory in these units (must equal the device plugin's
            ``--vgpu-memory-unit-mib``; a node publishing another unit is refused to pods
            asking vGPU memory, with both units named).
        eval_workers: worker processes that finish over-budget decisions in the background
            (None = CPUs − 2, at most 4; 0 = none: the request thread decides what fits its
            budget and leaves the rest provisional until a later call has time).
        bind_concurrency: binds served at once — the threads running ``/bind`` and the
            keep-alive connections to the API server kept for their Bindings. kube-scheduler
            runs each pod's binding cycle in its own goroutine, with no limit, so the binds
            in flight are its scheduling rate times the bind latency: about 150 pods/s (a
            trivial extender's ceiling, measured in ``benchmarks/bench_scheduler.py``) ×
            100–300 ms per Binding on a busy API server is 15–45. More binds wait for a
            thread instead of opening throwaway TLS connections, and from a backlog that
            wait set the throughput: 64 (the default) gave 0.98× the trivial extender's
            pods/s where 16 gave 0.84× (medians of 6 paired repeats, docs/performance.md).
        gil_switch_interval_ms: how long a thread may hold the GIL while another wants it,
            milliseconds (``sys.setswitchinterval``; CPython's default is 5). The event loop
            answering filter and prioritize shares the GIL with the bind and watch threads,
            and every wait lands in kube-scheduler's serial scheduling cycle; 0.5 (the
            default) measured 0.89–1.19× a trivial extender's pods/s where 5 gave 0.58–0.87×
            (``scheduler_extender.app.tune_interpreter``).
        colocation_policy: the policy for ``gputopo.io/gpu-shared`` pods when ``policy``
            does not place co-location slots (must be one that does).
        colocation_threshold: Tabrizian's ΣC threshold (§4.2.4), Eq. 4.3 units (percent·µs
            over two iterations); default 4·10⁷.
        profile_catalog: the shipped profile catalog (``v100-cifar10-w10``,
            ``v100-cifar10-w2``) or a catalog file.
        user_profiles: a catalog file of the user's own profiles (e.g. a mounted ConfigMap),
            consulted before ``profile_catalog``; re-read when it changes.
        measured_profiles: the file the profile recorder writes (measured with
            dcgm-exporter), consulted after both catalogs; re-read when it changes.
        scheduler_name: the kube-scheduler profile this extender serves (the pods'
            ``spec.schedulerName``): its pending GPU pods are the lookahead's waiting jobs.
        lookahead_pods: how many pending pods a lookahead policy (``gputopo``) weighs per
            decision (0 = none; at most 8, ``topology.policies.base.MAX_UPCOMING``).
        postpone_max_s: how long a bandwidth-sensitive multi-GPU pod may be postponed for a
            better set (s, from its first postponement; 0 = never): the
            default policy's bounded postponement (``scheduler_extender.pending``).
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", case_sensitive=False, validate_default=True
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8888, ge=0, le=65535)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    auth: Literal["none", "loopback", "mtls"] = "none"
    client_ca: Path | None = None
    allowed_client_names: list[str] = Field(default_factory=list)
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    policy: str = DEFAULT_POLICY
    state: Literal["memory", "kubernetes"] = "kubernetes"
    nodes: str = "dgx1-v100:4"
    kubeconfig: Path | None = None
    eval_budget_ms: float = Field(default=0.0, ge=0, le=60_000)
    eval_workers: int | None = Field(default=None, ge=0, le=64)
    vgpu_memory_unit_mib: int = Field(default=DEFAULT_VGPU_MEMORY_UNIT_MIB, ge=1, le=1 << 20)
    bind_concurrency: int = Field(default=DEFAULT_BIND_CONCURRENCY, ge=1, le=256)
    gil_switch_interval_ms: float = Field(default=0.5, ge=0.01, le=100)
    colocation_policy: str = "gputopo"
    colocation_threshold: float = Field(default=4e7, gt=0, lt=1e15)
    profile_catalog: str = "v100-cifar10-w10"
    user_profiles: Path | None = None
    measured_profiles: Path | None = None
    scheduler_name: str = Field(default=DEFAULT_SCHEDULER_NAME, min_length=1)
    lookahead_pods: int = Field(default=MAX_UPCOMING, ge=0, le=MAX_UPCOMING)
    postpone_max_s: float = Field(default=POSTPONE_MAX_S, ge=0, le=7 * 24 * 3600)

    @field_validator("log_level", "state", "auth", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        try:
            get_policy(v.strip())
        except UnknownPolicy as exc:
            raise ValueError(str(exc)) from None
        return v.strip()

    @field_validator("colocation_policy")
    @classmethod
    def _colocating_policy(cls, v: str) -> str:
        try:
            spec = get_policy(v.strip())
        except UnknownPolicy as exc:
            raise ValueError(str(exc)) from None
        if not spec.colocation:
            raise ValueError(f"policy {v.strip()!r} does not place co-location slots")
        return v.strip()

    @field_validator("profile_catalog")
    @classmethod
    def _catalog(cls, v: str) -> str:
        from topology.colocation.profile import ProfileError, resolve_catalog

        try:
            resolve_catalog(v.strip())
        except ProfileError as exc:
            raise ValueError(str(exc)) from None
        return v.strip()

    @model_validator(mode="after")
    def _consistent(self) -> ExtenderSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key must be given together")
        self.allowed_client_names = [n.strip() for n in self.allowed_client_names if n.strip()]
        if self.auth == "mtls":
            missing = [n for n, v in (("tls_cert", self.tls_cert), ("client_ca", self.client_ca))
                       if v is None]
            if missing:
                raise ValueError(f"auth mtls needs {' and '.join(missing)} (HTTPS with client "
                                 "certificates verified against client_ca)")
            if not self.allowed_client_names:
                raise ValueError("auth mtls needs allowed_client_names (the client "
                                 "certificate common names that may call the verbs)")
        elif self.client_ca is not None or self.allowed_client_names:
            raise ValueError(f"client_ca and allowed_client_names are for auth mtls, not "
                             f"{self.auth}")
        for f in (self.tls_cert, self.tls_key, self.kubeconfig, self.client_ca):
            if f is not None and not f.is_file():
                raise ValueError(f"file {str(f)!r} does not exist")
        if self.tls_cert is not None and self.tls_key is not None:
            problem = tls_problem(self.tls_cert, self.tls_key, self.client_ca)
            if problem:
                raise ValueError(problem)
        if self.state == "memory":
            try:
                parse_nodes_spec(self.nodes)
            except NodesSpecError as exc:
                raise ValueError(f"nodes: {exc}") from None
        return self


def tls_problem(cert: Path, key: Path, client_ca: Path | None) -> str | None:
    """Why the extender could not serve HTTPS with ``cert``, ``key`` and ``client_ca`` (PEM
    files), in one line, or None: loaded here as uvicorn will load them, so that a wrong file
    is a settings error at start-up, not an ``ssl.SSLError`` traceback from the server. An
    encrypted private key is refused (no password can be given; OpenSSL would otherwise ask
    for one on the terminal)."""

    def no_password() -> bytes:
        raise ValueError("encrypted")

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(str(cert), str(key), password=no_password)
    except ValueError:
        return f"tls_key {str(key)!r} is encrypted; give an unencrypted PEM private key"
    except (ssl.SSLError, OSError) as exc:
        why = getattr(exc, "reason", None) or exc.strerror or str(exc)
        return (f"tls_cert {str(cert)!r} and tls_key {str(key)!r} are not a PEM certificate "
                f"and its private key ({why})")
    if client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=str(client_ca))
        except (ssl.SSLError, OSError) as exc:
            why = getattr(exc, "reason", None) or exc.strerror or str(exc)
            return f"client_ca {str(client_ca)!r} is not a PEM CA bundle ({why})"
    return None


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML config file into setting names → values (:func:`read_settings_file`).

    Raises:
        SettingsError: missing file, invalid YAML, not a mapping, or unknown keys.
    """
    return read_settings_file(path, ExtenderSettings.model_fields)


def load_settings(
    cli: Mapping[str, Any] | None = None, config_file: Path | None = None
) -> ExtenderSettings:
    """Resolve the settings: ``cli`` (None values ignored) > env > ``config_file`` > defaults.

    Raises:
        SettingsError: any invalid value (one line, naming the setting).
    """
    overrides = {k: v for k, v in (cli or {}).items() if v is not None}
    data = read_config_file(config_file) if config_file is not None else {}
    with config_file_data(data):
        try:
            return ExtenderSettings(**overrides)
        except ValidationError as exc:
            raise SettingsError(validation_message(exc)) from None
