"""``gputopo dra-allocator`` settings: CLI flags > environment (``GPUTOPO_DRA_ALLOCATOR_*``) >
config file (YAML) > defaults. :func:`load_settings` turns every problem into one
:class:`SettingsError` line (the CLI exits 2 with it); an unknown policy fails here, at start.

Config file example (keys are the field names; dashes are accepted for underscores)::

    policy: gputopo
    writers: 16
    lease_namespace: gputopo-system
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from topology.policies.default import POSTPONE_MAX_S
from topology.policies.registry import UnknownPolicy, get_policy
from topology.settings_file import (
    FileBackedSettings,
    SettingsError,
    config_file_data,
    read_settings_file,
    validation_message,
)

ENV_PREFIX = "GPUTOPO_DRA_ALLOCATOR_"

__all__ = ["AllocatorSettings", "SettingsError", "load_settings"]


class AllocatorSettings(FileBackedSettings):
    """Everything ``gputopo dra-allocator`` can be told.

    Attributes:
        kubeconfig: kubeconfig file (None = in-cluster service account).
        policy: the default placement policy (a registered name; pods pick another with
            ``gputopo.io/policy``).
        colocation_policy: the default for co-location slots when ``policy`` does not
            co-locate.
        profile_catalog: the shipped co-location catalog (a built-in name or a file).
        user_profiles: the user's co-location profiles (file or directory), or None.
        writers: API writes in flight at once (claims and pods of several pods).
        postpone_max_s: how long a bandwidth-sensitive multi-GPU pod may be postponed for a
            better set (s, from its first postponement; 0 = never): the default policy's
            bounded postponement, as the extender's (:mod:`scheduler_extender.dra.allocator`).
        leader_elect: hold a coordination.k8s.io Lease before allocating (one active
            allocator: two would each believe a GPU is free).
        lease_name, lease_namespace: the Lease.
        lease_duration_s, renew_deadline_s, retry_period_s: leader-election timing, s.
        port: ``/healthz``, ``/readyz`` and ``/metrics`` on this port (0 = none).
        host: their listen address.
        log_level: ``debug`` / ``info`` / ``warning`` / ``error``.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", case_sensitive=False, validate_default=True
    )

    kubeconfig: Path | None = None
    policy: str = "gputopo"
    colocation_policy: str = "gputopo"
    profile_catalog: str | None = None
    user_profiles: Path | None = None
    writers: int = Field(default=16, ge=1, le=256)
    postpone_max_s: float = Field(default=POSTPONE_MAX_S, ge=0, le=7 * 24 * 3600)
    leader_elect: bool = True
    lease_name: str = "gputopo-dra-allocator"
    lease_namespace: str = "gputopo-system"
    lease_duration_s: int = Field(default=15, ge=1)
    renew_deadline_s: int = Field(default=10, ge=1)
    retry_period_s: int = Field(default=2, ge=1)
    port: int = Field(default=8890, ge=0, le=65535)
    host: str = "0.0.0.0"
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("policy", "colocation_policy")
    @classmethod
    def _known(cls, v: str) -> str:
        try:
            get_policy(v)
        except UnknownPolicy as exc:
            raise ValueError(str(exc)) from None
        return v

    @model_validator(mode="after")
    def _consistent(self) -> AllocatorSettings:
        if self.kubeconfig is not None and not self.kubeconfig.is_file():
            raise ValueError(f"file {str(self.kubeconfig)!r} does not exist")
        if not get_policy(self.colocation_policy).colocation:
            raise ValueError(f"colocation_policy {self.colocation_policy!r} does not place "
                             "co-location slots")
        if self.renew_deadline_s >= self.lease_duration_s:
            raise ValueError("renew_deadline_s must be shorter than lease_duration_s")
        if self.renew_deadline_s <= 1.2 * self.retry_period_s:
            raise ValueError("renew_deadline_s must exceed 1.2 x retry_period_s")
        return self


def load_settings(cli: Mapping[str, Any] | None = None,
                  config_file: Path | None = None) -> AllocatorSettings:
    """Resolve the settings: ``cli`` (None values ignored) > env > ``config_file`` > defaults.

    Raises:
        SettingsError: any invalid value (one line, naming the setting).
    """
    overrides = {k: v for k, v in (cli or {}).items() if v is not None}
    data = read_settings_file(config_file, AllocatorSettings.model_fields) \
        if config_file is not None else {}
    with config_file_data(data):
        try:
            return AllocatorSettings(**overrides)
        except ValidationError as exc:
            raise SettingsError(validation_message(exc)) from None
