"""The extender's co-location profile layers, read from files and re-read when they change.

Where a shared pod's profile comes from (:func:`topology.colocation.sources.resolve_profile`):
its explicit annotations, then its ``gputopo.io/profile`` key in the **user catalog** (a file,
typically a ConfigMap mounted by the chart), then in the **shipped catalog** (a built-in name,
default ``v100-cifar10-w10``, or a file), then in the **measured** profiles (the file the
profile recorder writes from dcgm-exporter, :mod:`topology.colocation.dcgm`), then the
conservative default.

Files are YAML/JSON ``ColocationProfiles`` documents (:class:`topology.colocation.profile.
CatalogDocument`). A file that appears, changes or disappears is picked up at the next pod
(the kubelet updates a mounted ConfigMap in place); one that does not validate keeps the last
good version and is logged once per change, so a bad edit never takes profiles away.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from topology.colocation.model import DEFAULT_THRESHOLD
from topology.colocation.profile import (
    JobProfile,
    ProfileCatalog,
    ProfileError,
    load_catalog_file,
    resolve_catalog,
)

log = logging.getLogger("gputopo.extender")


@dataclass(frozen=True)
class ColocationInputs:
    """What a shared pod's request is built from (a snapshot of the layers).

    Attributes:
        catalog: the shipped (or configured) catalog.
        user: the user's catalog, consulted before ``catalog`` (None = none).
        measured: measured profiles, consulted after both catalogs (None = none).
        threshold: the ΣC threshold (Tabrizian §4.2.4), Eq. 4.3 units.
    """

    catalog: Mapping[str, JobProfile]
    user: Mapping[str, JobProfile] | None = None
    measured: Mapping[str, JobProfile] | None = None
    threshold: float = DEFAULT_THRESHOLD


@dataclass
class _Watched:
    """A catalog file, or a directory of them (a mounted ConfigMap with one key per node:
    the documents are merged in name order)."""

    path: Path
    source: str
    stamp: tuple[tuple[str, float, int], ...] | None = None
    catalog: ProfileCatalog | None = None
    problem: str = ""

    def _files(self) -> list[Path]:
        if self.path.is_dir():
            return sorted(p for p in self.path.iterdir()
                          if p.suffix in (".yaml", ".yml", ".json") and p.is_file()
                          and not p.name.startswith("."))
        return [self.path] if self.path.exists() else []

    def current(self) -> ProfileCatalog | None:
        try:
            files = self._files()
            stamp: tuple[tuple[str, float, int], ...] | None = tuple(
                (str(f), f.stat().st_mtime, f.stat().st_size) for f in files) or None
        except OSError:
            stamp = None
        if stamp == self.stamp:
            return self.catalog
        self.stamp = stamp
        if stamp is None:
            self.catalog = None
            return None
        try:
            merged: ProfileCatalog | None = None
            for f in files:
                one = load_catalog_file(f, source=self.source)
                merged = one if merged is None else merged.overlay(one, name=merged.name)
            self.catalog = merged
            self.problem = ""
        except ProfileError as exc:
            self.problem = str(exc)
            log.warning("profile file %s ignored (keeping the last good one): %s", self.path,
                        exc)
        return self.catalog


@dataclass
class ProfileLayers:
    """The profile layers of one extender (thread-safe).

    Args:
        catalog: a shipped catalog name or a catalog file (read once).
        user_file: the user's catalog file or directory (re-read on change), or None.
        measured_file: the measured-profiles file or directory (a mounted ConfigMap with
            one document per node; re-read on change), or None.
        threshold: the ΣC threshold.

    Raises:
        ProfileError: ``catalog`` is neither a shipped name nor a readable, valid file.
    """

    catalog: str | None = None
    user_file: Path | None = None
    measured_file: Path | None = None
    threshold: float = DEFAULT_THRESHOLD
    _base: ProfileCatalog = field(init=False)
    _user: _Watched | None = field(init=False, default=None)
    _measured: _Watched | None = field(init=False, default=None)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._base = resolve_catalog(self.catalog)
        if self.user_file is not None:
            self._user = _Watched(self.user_file, "user")
        if self.measured_file is not None:
            self._measured = _Watched(self.measured_file, "measured")

    def snapshot(self) -> ColocationInputs:
        """The layers as they are now (files re-read when changed)."""
        with self._lock:
            user = self._user.current() if self._user is not None else None
            measured = self._measured.current() if self._measured is not None else None
        return ColocationInputs(self._base, user, measured, self.threshold)

    def problems(self) -> list[str]:
        """Why a file is currently ignored (one line each; empty when all are fine)."""
        return [w.problem for w in (self._user, self._measured) if w is not None and w.problem]
