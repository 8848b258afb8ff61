"""Planner settings: CLI flags > environment (``GPUTOPO_PLANNER_*``) > config file (YAML) >
defaults. :func:`load_settings` turns every problem into one :class:`SettingsError` line (the
CLI exits 2 with it).

Config file example (keys are the field names; dashes are accepted for underscores)::

    interval_s: 300
    namespace: ""                  # all namespaces
    profiles_configmap: gputopo-system/gputopo-job-profiles
    rho: 100
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from topology.hierarchy import Hierarchy, HierarchyError
from topology.planning.andreas import (
    DEFAULT_INTERVAL_S,
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_MOVE_PENALTY_EUR,
    DEFAULT_RHO,
)
from topology.planning.energy import DEFAULT_EUR_PER_KWH, DEFAULT_PUE
from topology.policies.default import POSTPONE_MAX_S
from topology.settings_file import (
    FileBackedSettings,
    SettingsError,
    config_file_data,
    read_settings_file,
    validation_message,
)

ENV_PREFIX = "GPUTOPO_PLANNER_"


__all__ = ["PlannerSettings", "SettingsError", "load_settings", "read_config_file"]


class PlannerSettings(FileBackedSettings):
    """Everything ``gputopo planner`` can be told.

    Attributes:
        kubeconfig: kubeconfig file (None = in-cluster service account).
        namespace: namespace of the Jobs it manages ("" = all namespaces).
        queue: manage only Jobs whose ``gputopo.io/queue`` label has this value ("" = any).
        interval_s: seconds between periodic rescheduling points (ANDREAS: 300); arrivals and
            completions trigger one too.
        debounce_s: events closer than this are handled by one rescheduling point, s.
        profiles_configmap: ``namespace/name`` of the ConfigMap whose ``profiles.yaml`` key is
            the profile document ("" = none).
        profiles_file: a profile document on disk (read when the ConfigMap is not set).
        rho: ρ, postponement penalty coefficient (ANDREAS §V-B: 100).
        max_iterations: MaxIt_RG (ANDREAS §V: 1,000).
        pue: Power Usage Effectiveness (ANDREAS §V-A: 1.33).
        eur_per_kwh: energy price (ANDREAS §V-A: 0.172).
        restart_s: what a moved or resized Job loses besides its unsaved epoch (pod restart,
            snapshot load), s; charged when the plan moves a running Job.
        move_penalty_eur: a fixed charge per running Job the plan moves or preempts, EUR (as
            the simulator's ``andreas``:
            :data:`topology.planning.andreas.DEFAULT_MOVE_PENALTY_EUR`).
        seed: the Randomized Greedy's seed.
        paper: plan with ANDREAS' Algorithm 1 as published
            (:meth:`topology.planning.andreas.PlannerSettings.paper`: no move charge, each job
            charged its node's whole idle power, Eq. 1's energy term, every iteration, no local
            search); ``restart_s`` still counts.
        leader_elect: take a coordination.k8s.io Lease before acting (one active planner).
        lease_name, lease_namespace: the Lease.
        lease_duration_s, renew_deadline_s, retry_period_s: leader-election timing.
        metrics_port: Prometheus metrics and /healthz on this port (0 = none).
        metrics_host: listen address of the metrics server.
        log_level: ``debug`` / ``info`` / ``warning`` / ``error``.
        hierarchy: the topology levels gangs are placed in (``{"levels": [{"label": …,
            "share": …, "nvlink": …}], "acrossShare": …}``: :class:`topology.hierarchy.
            HierarchySpec`); None = block > rack > ``nvidia.com/gpu.clique`` > node.
        gang_chooser: ``gputopo`` (tightest domain by bandwidth, then PreservedBW) or
            ``kueue-tas`` (Kueue's best fit) — :mod:`planner.gang`.
        postpone_max_s: how long a gang of one bandwidth-sensitive multi-GPU pod may wait for
            a better GPU set, s from its first postponement (0 = never; the ``gputopo`` chooser
            only): the default policy's bounded postponement, as the extender's
            ``postpone_max_s`` for pods it places (:func:`topology.gang.with_postponement`).
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", case_sensitive=False, validate_default=True
    )

    kubeconfig: Path | None = None
    namespace: str = ""
    queue: str = ""
    interval_s: float = Field(default=DEFAULT_INTERVAL_S, gt=0, le=86_400)
    debounce_s: float = Field(default=1.0, ge=0, le=60)
    profiles_configmap: str = ""
    profiles_file: Path | None = None
    rho: float = Field(default=DEFAULT_RHO, ge=0)
    max_iterations: int = Field(default=DEFAULT_MAX_ITERATIONS, ge=1, le=1_000_000)
    pue: float = Field(default=DEFAULT_PUE, ge=1)
    eur_per_kwh: float = Field(default=DEFAULT_EUR_PER_KWH, ge=0)
    restart_s: float = Field(default=60.0, ge=0)
    move_penalty_eur: float = Field(default=DEFAULT_MOVE_PENALTY_EUR, ge=0)
    seed: int = 0
    paper: bool = False
    leader_elect: bool = True
    lease_name: str = "gputopo-planner"
    lease_namespace: str = "gputopo-system"
    lease_duration_s: int = Field(default=15, ge=1)
    renew_deadline_s: int = Field(default=10, ge=1)
    retry_period_s: int = Field(default=2, ge=1)
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    metrics_host: str = "0.0.0.0"
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    hierarchy: dict[str, Any] | None = None
    gang_chooser: Literal["gputopo", "kueue-tas"] = "gputopo"
    postpone_max_s: float = Field(default=POSTPONE_MAX_S, ge=0, le=7 * 24 * 3600)

    @field_validator("hierarchy")
    @classmethod
    def _levels(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            try:
                Hierarchy.parse(v)
            except HierarchyError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("profiles_configmap")
    @classmethod
    def _ns_name(cls, v: str) -> str:
        v = v.strip()
        if v and (v.count("/") != 1 or not all(v.split("/"))):
            raise ValueError(f"{v!r} is not namespace/name")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> PlannerSettings:
        for f in (self.kubeconfig, self.profiles_file):
            if f is not None and not f.is_file():
                raise ValueError(f"file {str(f)!r} does not exist")
        if self.renew_deadline_s >= self.lease_duration_s:
            raise ValueError("renew_deadline_s must be shorter than lease_duration_s")
        if self.renew_deadline_s <= 1.2 * self.retry_period_s:
            raise ValueError("renew_deadline_s must exceed 1.2 x retry_period_s")
        return self


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML config file into setting names → values (:func:`read_settings_file`).

    Raises:
        SettingsError: missing file, invalid YAML, not a mapping, or unknown keys.
    """
    return read_settings_file(path, PlannerSettings.model_fields)


def load_settings(cli: Mapping[str, Any] | None = None,
                  config_file: Path | None = None) -> PlannerSettings:
    """Resolve the settings: ``cli`` (None values ignored) > env > ``config_file`` > defaults.

    Raises:
        SettingsError: any invalid value (one line, naming the setting).
    """
    overrides = {k: v for k, v in (cli or {}).items() if v is not None}
    data = read_config_file(config_file) if config_file is not None else {}
    with config_file_data(data):
        try:
            return PlannerSettings(**overrides)
        except ValidationError as exc:
            raise SettingsError(validation_message(exc)) from None
