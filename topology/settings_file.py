"""Config files under the programs' settings: one reader, one pydantic-settings source.

The device plugin, the extender and the planner resolve their settings the same way —
CLI flags > environment > config file > defaults — and read ``--config`` with the same rules,
so the three share this module (the core is the only package they all import; it holds no
Kubernetes, HTTP or gRPC).

Use: a settings class derives from :class:`FileBackedSettings`, and the program's
``load_settings`` builds it inside ``with config_file_data(read_settings_file(path,
Cls.model_fields)):``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import yaml
from pydantic import AliasChoices, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from topology.text import load_yaml, read_utf8

_FILE_DATA: ContextVar[dict[str, Any] | None] = ContextVar("gputopo_config_file", default=None)


class SettingsError(ValueError):
    """Settings are invalid or the config file cannot be read; ``str(exc)`` is one line
    naming the setting (the CLIs print it and exit 2)."""


def read_settings_file(path: Path, fields: Iterable[str]) -> dict[str, Any]:
    """Read a YAML (or JSON, which YAML reads too) config file into field names → values.

    Keys are the field names; dashes stand for underscores and leading dashes are dropped, so a
    flag's spelling (``--node-name``) works too. An empty file is no settings.

    Args:
        path: the file.
        fields: the names the settings class knows (``Cls.model_fields``).

    Raises:
        SettingsError: unreadable file, not UTF-8, invalid YAML, not a mapping, a setting
            given twice (one key spelled twice, or ``node-name`` beside ``node_name``), or
            unknown keys (named).
    """
    try:
        raw = load_yaml(read_utf8(path))
    except OSError as exc:
        raise SettingsError(
            f"cannot read config file {str(path)!r}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise SettingsError(f"config file {str(path)!r} is not valid YAML: "
                            f"{' '.join(str(exc).split())}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SettingsError(f"config file {str(path)!r} must be a mapping of settings")
    data: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for k, v in raw.items():
        name = str(k).strip().lstrip("-").replace("-", "_")
        if name in data:
            raise SettingsError(f"config file {str(path)!r} sets {name!r} twice (as "
                                f"{spelled[name]!r} and {str(k)!r})")
        data[name], spelled[name] = v, str(k)
    known = list(fields)
    unknown = sorted(set(data) - set(known))
    if unknown:
        names = ", ".join(repr(u) for u in unknown)
        raise SettingsError(
            f"config file {str(path)!r}: unknown setting{'s' if len(unknown) > 1 else ''} "
            f"{names}; known: {', '.join(known)}")
    return data


@contextmanager
def config_file_data(data: dict[str, Any]) -> Iterator[None]:
    """Make ``data`` (from :func:`read_settings_file`) what :class:`ConfigFileSource` yields
    while a settings object is built inside the ``with`` block."""
    token = _FILE_DATA.set(data)
    try:
        yield
    finally:
        _FILE_DATA.reset(token)


class ConfigFileSource(PydanticBaseSettingsSource):
    """The config file's values (set by :func:`config_file_data`), below the environment.

    Values are keyed as the other sources key them (a field's first validation alias, else its
    name), so precedence holds for aliased fields too; ``None`` values count as unset.
    """

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return (_FILE_DATA.get() or {}).get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in (_FILE_DATA.get() or {}).items():
            if value is None:
                continue
            alias = self.settings_cls.model_fields[name].validation_alias
            key = alias.choices[0] if isinstance(alias, AliasChoices) else name
            out[str(key)] = value
        return out


def validation_message(exc: ValidationError) -> str:
    """The first error of a settings ``ValidationError`` as one line:
    ``setting <field>: <message>`` (pydantic's "Value error, " prefix dropped)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    msg = str(first["msg"]).removeprefix("Value error, ")
    prefix = f"setting {where}: " if where else ""
    return " ".join(f"{prefix}{msg}".split())


class FileBackedSettings(BaseSettings):
    """Settings resolved from init arguments (CLI flags) > environment > the config file set by
    :func:`config_file_data` > defaults (no dotenv, no secrets directory)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, ConfigFileSource(settings_cls))
