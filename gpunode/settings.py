"""What both node programs' settings check the same way, and how they are resolved
(flags > environment > config file > defaults, :mod:`topology.settings_file`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from topology.settings_file import (
    FileBackedSettings,
    SettingsError,
    config_file_data,
    read_settings_file,
)

S = TypeVar("S", bound=FileBackedSettings)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def node_name(v: str) -> str:
    """A node name, stripped (a DNS subdomain is at most 253 characters)."""
    v = v.strip()
    if len(v) > 253:
        raise ValueError("node name longer than 253 characters")
    return v


def kubernetes_or_file(v: str) -> str:
    """``kubernetes`` or ``file:PATH`` (the tests' sources and sinks)."""
    if v == "kubernetes" or (v.startswith("file:") and len(v) > len("file:")):
        return v
    raise ValueError(f"must be 'kubernetes' or 'file:PATH', got {v!r}")


def log_level(v: str) -> str:
    """One of :data:`LOG_LEVELS`, upper case."""
    level = v.strip().upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"must be DEBUG, INFO, WARNING or ERROR, got {v!r}")
    return level


def one_line(exc: ValidationError) -> str:
    """The first error as one line naming the setting as its flag (``shared-slots: …``)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "settings"
    msg = str(first["msg"]).removeprefix("Value error, ")
    if where in ("settings", "__root__"):
        return msg
    return f"{where.replace('_', '-')}: {msg}"


def load(cls: type[S], flags: Mapping[str, Any] | None, config_file: Path | None,
         config_env: str) -> S:
    """Build ``cls`` from ``flags`` (None values are unset) > the environment >
    ``config_file`` (or the file named by the variable ``config_env``) > defaults.

    Raises:
        SettingsError: a value is invalid or missing, or the file is unusable (one line).
    """
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    path = config_file
    if path is None and os.environ.get(config_env):
        path = Path(os.environ[config_env])
    data = read_settings_file(path, cls.model_fields) if path is not None else {}
    with config_file_data(data):
        try:
            return cls(**given)
        except ValidationError as exc:
            raise SettingsError(one_line(exc)) from None
