"""Job profiles for co-location (Tabrizian 2020, §4.2) and the catalogs that hold them.

A **profile** describes one training job running *alone* on a GPU:

* ``iteration_s`` — its solo iteration time ``t_j`` (seconds), the ``t_j`` of Eq. 4.1;
* ``kernel_occupancy`` — ``C``, Eq. 4.3: ``C = Σ_i q_i · t_i`` over the kernels of the profiled
  window, occupancy-weighted kernel time;
* ``mem_bandwidth_util`` — ``M``, Eq. 4.2: ``M = Σ_i p_i · t_i``, DRAM-bandwidth-weighted
  kernel time;
* ``gpu_memory_mib`` — the GPU memory it holds (MiB).

**Units of C and M.** The thesis prints neither the units nor more of the window than "two
iterations of training" (captions of Figs. 4.7 and 4.9). gputopo reads them the way Nsight
Compute reports its two inputs: ``q_i`` and ``p_i`` in **percent** (achieved occupancy; percent
of peak DRAM bandwidth) and ``t_i`` in **microseconds** (``gpu__time_duration``), summed over
the kernels of :data:`WINDOW_ITERATIONS` = 2 training iterations. Under that reading the thesis'
classifier threshold ``ΣC ≤ 4·10⁷`` (§4.2.4) falls where the text puts it: above every set
except those holding a batch-256 ResNet-50 (the only jobs the thesis found slowed down,
§4.2.4: "all of the red dots happen when the batch size is 256"), and just above the
worst-case pair of §6.3 (SENet-18 + ResNet-18 at batch 256, which the classifier still
accepts). See ``topology/colocation/data/README.md`` for how every catalog number was derived.

A time-averaged ratio (what NVIDIA DCGM's ``DCGM_FI_PROF_SM_OCCUPANCY`` and
``DCGM_FI_PROF_DRAM_ACTIVE`` report over a solo run) converts to these units as
``C = ratio · 100 · WINDOW_ITERATIONS · t_j · 10⁶`` (:func:`from_ratios`).

**Catalogs** map a profile key ``<model>:<batch>`` (``resnet18:64``) to a profile. The shipped
ones (``v100-cifar10-w10``, the default, and ``v100-cifar10-w2``) are derived from the thesis'
text; a user replaces or extends them with a file (or ConfigMap) of the same schema,
validated by :class:`CatalogDocument`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from topology.text import load_yaml, path_exists

#: Training iterations in the profiling window C and M are summed over (Figs. 4.7/4.9: "two
#: iterations of training").
WINDOW_ITERATIONS = 2
#: Percent (``q_i``, ``p_i``) × microseconds (``t_i``) per (ratio × second) of one iteration:
#: ``C = ratio · RATIO_SECOND_TO_UNITS · t_j`` with ``RATIO_SECOND_TO_UNITS = 100 · 2 · 10⁶``.
RATIO_SECOND_TO_UNITS = 100.0 * WINDOW_ITERATIONS * 1e6

#: The catalog used when no other is named (Tabrizian's V100, CIFAR-10, ten data workers).
DEFAULT_CATALOG = "v100-cifar10-w10"
#: Shipped catalogs by name (files under ``topology/colocation/data/``).
BUILTIN_CATALOGS = ("v100-cifar10-w10", "v100-cifar10-w2")

#: Where a profile came from (precedence order of :mod:`topology.colocation.sources`).
ProfileSource = Literal["annotation", "user", "catalog", "measured", "default", "explicit"]

_KEY_RE = re.compile(r"^([a-z0-9][a-z0-9_.\-]*):([1-9][0-9]{0,6})$")
#: Other spellings of the thesis' model names (Table 4.1 uses ``se_resnet18``; §6.3 "SENet18").
MODEL_ALIASES = {
    "senet18": "se_resnet18",
    "se-resnet18": "se_resnet18",
    "seresnet18": "se_resnet18",
    "se-resnet-18": "se_resnet18",
    "resnet-18": "resnet18",
    "resnet-50": "resnet50",
    "vgg-11": "vgg11",
    "vgg-19": "vgg19",
}


class ProfileError(ValueError):
    """A profile, a profile key or a catalog document is malformed (one-line message)."""


def parse_profile_key(text: str) -> str:
    """Canonical form of a profile key ``<model>:<batch>`` (lower case, aliases resolved).

    ``"ResNet18:64"`` → ``"resnet18:64"``; ``"senet18:256"`` → ``"se_resnet18:256"``.

    Raises:
        ProfileError: not ``<model>:<batch>`` with a model name of letters, digits, ``_.-``
            and a positive integer batch size.
    """
    raw = str(text).strip().lower()
    m = _KEY_RE.match(raw)
    if m is None:
        raise ProfileError(
            f"profile key {text!r} is not <model>:<batch> (e.g. resnet18:64)"
        )
    model = MODEL_ALIASES.get(m.group(1), m.group(1))
    return f"{model}:{int(m.group(2))}"


@dataclass(frozen=True)
class JobProfile:
    """One job's solo profile (Tabrizian §4.1-§4.2).

    Attributes:
        iteration_s: solo iteration time ``t_j`` (Eq. 4.1), seconds, > 0.
        kernel_occupancy: ``C`` (Eq. 4.3), percent·µs over :data:`WINDOW_ITERATIONS`
            iterations, ≥ 0.
        mem_bandwidth_util: ``M`` (Eq. 4.2), percent·µs over the same window, ≥ 0.
        gpu_memory_mib: GPU memory the job holds, MiB, ≥ 0.
        key: the profile key it was found under (``resnet18:64``), or None.
        source: where it came from (``catalog``, ``user``, ``annotation``, ``measured``,
            ``default``, ``explicit``).
    """

    iteration_s: float
    kernel_occupancy: float
    mem_bandwidth_util: float
    gpu_memory_mib: int
    key: str | None = None
    source: str = "explicit"

    def __post_init__(self) -> None:
        if not (self.iteration_s > 0 and self.iteration_s < 1e6):
            raise ProfileError(f"iteration time must be in (0, 1e6) s, got {self.iteration_s}")
        for name in ("kernel_occupancy", "mem_bandwidth_util"):
            v = getattr(self, name)
            if not (v >= 0 and v < 1e15):
                raise ProfileError(f"{name} must be a finite number >= 0, got {v}")
        if self.gpu_memory_mib < 0:
            raise ProfileError(f"GPU memory must be >= 0 MiB, got {self.gpu_memory_mib}")

    def identity(self) -> tuple[float, float, float, int]:
        """The numbers a decision depends on (for cache keys; ``key``/``source`` excluded)."""
        return (self.iteration_s, self.kernel_occupancy, self.mem_bandwidth_util,
                self.gpu_memory_mib)

    def label(self) -> str:
        """``resnet18:64`` or, without a key, ``C=…,M=…``."""
        if self.key:
            return self.key
        return f"C={self.kernel_occupancy:.3g},M={self.mem_bandwidth_util:.3g}"


def from_ratios(
    sm_occupancy: float,
    dram_active: float,
    iteration_s: float,
    gpu_memory_mib: int,
    *,
    key: str | None = None,
    source: str = "measured",
) -> JobProfile:
    """A profile from time-averaged ratios measured while the job ran alone.

    ``C = sm_occupancy · 100 · WINDOW_ITERATIONS · iteration_s · 10⁶`` and likewise ``M`` from
    ``dram_active`` (module docstring): the time average of warp residency over a solo run
    equals the occupancy-weighted kernel time of a window divided by the window's length.

    Args:
        sm_occupancy: mean ``DCGM_FI_PROF_SM_OCCUPANCY`` (0–1, fraction of resident warps).
        dram_active: mean ``DCGM_FI_PROF_DRAM_ACTIVE`` (0–1, fraction of DRAM-active cycles).
        iteration_s: the job's solo iteration time, seconds.
        gpu_memory_mib: GPU memory it held, MiB.
        key: profile key, if any.
        source: provenance label.

    Raises:
        ProfileError: a ratio outside [0, 1] or a bad time / memory.
    """
    for name, v in (("SM occupancy", sm_occupancy), ("DRAM active", dram_active)):
        if not 0.0 <= v <= 1.0:
            raise ProfileError(f"{name} ratio must be in [0, 1], got {v}")
    if not iteration_s > 0:
        raise ProfileError(f"iteration time must be > 0 s, got {iteration_s}")
    scale = RATIO_SECOND_TO_UNITS * iteration_s
    return JobProfile(
        iteration_s=iteration_s,
        kernel_occupancy=sm_occupancy * scale,
        mem_bandwidth_util=dram_active * scale,
        gpu_memory_mib=int(gpu_memory_mib),
        key=key,
        source=source,
    )


# ------------------------------------------------------------------------------ documents


class ProfileEntry(BaseModel):
    """One profile of a catalog document (the file/ConfigMap schema).

    Attributes:
        iteration_s: solo iteration time, seconds (> 0).
        kernel_occupancy: C (Eq. 4.3), percent·µs over two iterations (≥ 0).
        mem_bandwidth_util: M (Eq. 4.2), percent·µs over two iterations (≥ 0).
        gpu_memory_mib: GPU memory, MiB (≥ 0).
        source: free text: where the numbers come from (a measurement, a derivation).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    iteration_s: float = Field(gt=0, lt=1e6)
    kernel_occupancy: float = Field(ge=0, lt=1e15)
    mem_bandwidth_util: float = Field(ge=0, lt=1e15)
    gpu_memory_mib: int = Field(ge=0, le=10_000_000)
    source: str = ""


class CatalogMeta(BaseModel):
    """Informative header of a catalog document."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=253)
    description: str = ""
    gpu: str = ""
    units: dict[str, str] = Field(default_factory=dict)


class CatalogDocument(BaseModel):
    """A profile catalog file or ConfigMap value (``kind: ColocationProfiles``).

    ``profiles`` maps a profile key (``<model>:<batch>``) to a :class:`ProfileEntry`; keys are
    canonicalised (:func:`parse_profile_key`) and must be unique after that.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    apiVersion: Literal["gputopo.io/v1"]  # noqa: N815 - the Kubernetes-style field name
    kind: Literal["ColocationProfiles"]
    metadata: CatalogMeta
    profiles: dict[str, ProfileEntry]

    @field_validator("profiles")
    @classmethod
    def _keys(cls, value: dict[str, ProfileEntry]) -> dict[str, ProfileEntry]:
        out: dict[str, ProfileEntry] = {}
        for raw, entry in value.items():
            try:
                key = parse_profile_key(raw)
            except ProfileError as exc:
                raise ValueError(str(exc)) from None
            if key in out:
                raise ValueError(f"profile key {raw!r} appears twice (as {key!r})")
            out[key] = entry
        return out


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid"))


class ProfileCatalog(Mapping[str, JobProfile]):
    """An immutable mapping ``profile key → JobProfile`` with a name.

    Build one with :func:`load_catalog_text`, :func:`load_catalog_file`, :func:`builtin_catalog`
    or :meth:`from_profiles`; :meth:`overlay` layers a user's catalog over another.
    """

    def __init__(self, name: str, profiles: Mapping[str, JobProfile],
                 description: str = "") -> None:
        self.name = name
        self.description = description
        self._profiles = dict(profiles)

    @classmethod
    def from_profiles(cls, name: str, profiles: Mapping[str, JobProfile]) -> ProfileCatalog:
        """A catalog from canonical keys → profiles.

        Raises:
            ProfileError: a key is not ``<model>:<batch>``.
        """
        return cls(name, {parse_profile_key(k): v for k, v in profiles.items()})

    def __getitem__(self, key: str) -> JobProfile:
        return self._profiles[parse_profile_key(key)]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        try:
            return parse_profile_key(key) in self._profiles
        except ProfileError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._profiles)

    def __len__(self) -> int:
        return len(self._profiles)

    def overlay(self, top: Mapping[str, JobProfile], name: str | None = None) -> ProfileCatalog:
        """This catalog with ``top``'s entries replacing or adding to it."""
        merged = dict(self._profiles)
        merged.update({parse_profile_key(k): v for k, v in top.items()})
        return ProfileCatalog(name or f"{self.name}+{getattr(top, 'name', 'user')}", merged)

    def to_document(self) -> dict[str, Any]:
        """The catalog as a :class:`CatalogDocument` mapping (for writing files)."""
        return {
            "apiVersion": "gputopo.io/v1",
            "kind": "ColocationProfiles",
            "metadata": {"name": self.name, "description": self.description},
            "profiles": {
                k: {
                    "iteration_s": p.iteration_s,
                    "kernel_occupancy": p.kernel_occupancy,
                    "mem_bandwidth_util": p.mem_bandwidth_util,
                    "gpu_memory_mib": p.gpu_memory_mib,
                }
                for k, p in self._profiles.items()
            },
        }


def catalog_from_document(doc: Any, *, origin: str = "<catalog>",
                          source: str = "user") -> ProfileCatalog:
    """Validate a parsed document (a mapping) into a :class:`ProfileCatalog`.

    Raises:
        ProfileError: one line naming ``origin`` and the first schema violation.
    """
    try:
        parsed = CatalogDocument.model_validate(doc)
    except ValidationError as exc:
        raise ProfileError(f"{origin}: {_first_error(exc)}") from None
    profiles = {
        key: JobProfile(
            iteration_s=e.iteration_s,
            kernel_occupancy=e.kernel_occupancy,
            mem_bandwidth_util=e.mem_bandwidth_util,
            gpu_memory_mib=e.gpu_memory_mib,
            key=key,
            source=source,
        )
        for key, e in parsed.profiles.items()
    }
    return ProfileCatalog(parsed.metadata.name, profiles, parsed.metadata.description)


def load_catalog_text(text: str, *, origin: str = "<catalog>",
                      source: str = "user") -> ProfileCatalog:
    """Parse a catalog from YAML or JSON text (e.g. a ConfigMap's ``profiles.yaml`` value).

    Raises:
        ProfileError: not YAML/JSON, or not a valid ``ColocationProfiles`` document.
    """
    try:
        doc = load_yaml(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ProfileError(f"{origin}: not YAML/JSON: {first}") from None
    return catalog_from_document(doc, origin=origin, source=source)


def load_catalog_file(path: str | Path, *, source: str = "user") -> ProfileCatalog:
    """Read a catalog file (YAML or JSON).

    Raises:
        ProfileError: unreadable file or invalid content.
    """
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise ProfileError(f"cannot read profile catalog {path}: {reason}") from None
    return load_catalog_text(text, origin=str(path), source=source)


def builtin_catalog(name: str = DEFAULT_CATALOG) -> ProfileCatalog:
    """A shipped catalog by name (:data:`BUILTIN_CATALOGS`).

    Raises:
        ProfileError: no shipped catalog has this name.
    """
    key = name.strip().lower()
    if key not in BUILTIN_CATALOGS:
        raise ProfileError(
            f"unknown profile catalog {name!r}; shipped: {', '.join(BUILTIN_CATALOGS)}"
        )
    return _load_builtin(key)


@cache
def _load_builtin(key: str) -> ProfileCatalog:
    """The packaged file ``data/<key>.yaml``, parsed once (it never changes at run time)."""
    text = resources.files("topology.colocation").joinpath(f"data/{key}.yaml").read_text()
    return load_catalog_text(text, origin=f"builtin:{key}", source="catalog")


def resolve_catalog(spec: str | None) -> ProfileCatalog:
    """A catalog from a spec: None → the default; a shipped name; or a file path.

    Raises:
        ProfileError: unknown name, unreadable or invalid file.
    """
    if spec is None or not spec.strip():
        return builtin_catalog()
    if spec.strip().lower() in BUILTIN_CATALOGS:
        return builtin_catalog(spec)
    p = Path(spec).expanduser()
    if path_exists(p):
        return load_catalog_file(p)
    raise ProfileError(
        f"unknown profile catalog {spec!r}: not a shipped catalog "
        f"({', '.join(BUILTIN_CATALOGS)}) and no such file"
    )


def keys_by_model(keys: Iterable[str]) -> dict[str, list[int]]:
    """``{"resnet18": [64, 128, 256], ...}`` from profile keys (for listings)."""
    out: dict[str, list[int]] = {}
    for k in keys:
        model, _, batch = parse_profile_key(k).partition(":")
        out.setdefault(model, []).append(int(batch))
    return {m: sorted(b) for m, b in sorted(out.items())}
