"""Job profiles: how long one epoch of a job takes on g GPUs of a model (ANDREAS §III, §IV-A).

ANDREAS' Job Profiler "collect[s] information about the expected per-epoch execution time of the
submitted jobs on the different resources available" (§III), and the optimiser's execution
time t_jng (Table I) of a job with E epochs left is

    t_jng = E · τ_j(model(n), g)                                          [s]

where τ_j is the job's time per epoch on g GPUs of node n's GPU model. Jobs snapshot their
weights every epoch (§V; "if jobs are preempted, they will restart from the last snapshot",
§IV-A), so a job that has finished ``done`` of its ``epochs`` has ``epochs − done`` left,
whatever fraction of the current epoch it had run.

Two sources of τ, both pure:

* a **profile document** (:class:`ProfileDocument`, YAML or JSON; the same document a
  ConfigMap carries): named profiles, each a table ``"<gpu_model>:<gpus>" → seconds``, and
  optional power profiles;
* **measurement**: a job reports its finished epochs over time (``gputopo.io/epochs-done``);
  :func:`estimate_epoch_time` fits the seconds per epoch of one run segment, and
  :class:`EpochTimeLearner` keeps those estimates per (profile, configuration) and combines
  them with the document (:meth:`EpochTimeLearner.epoch_times`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from topology.planning.energy import EnergyError, PowerProfile, gpu_model_key
from topology.text import load_json, load_yaml, read_utf8

#: A configuration of a job: (GPU model key, GPU count).
Config = tuple[str, int]

API_VERSION: Literal["gputopo.io/v1"] = "gputopo.io/v1"
KIND: Literal["JobProfiles"] = "JobProfiles"


class ProfileError(ValueError):
    """A profile document, configuration key or set of observations is malformed."""


def parse_config_key(text: str) -> Config:
    """``"<gpu_model>:<gpus>"`` → ``(model key, gpus)``; the model is normalised with
    :func:`topology.planning.energy.gpu_model_key` (``"Tesla T4:1"`` → ``("t4", 1)``).

    Raises:
        ProfileError: no ``:``, a bad model name, or a GPU count that is not a whole number ≥ 1.
    """
    model, sep, count = str(text).rpartition(":")
    if not sep or not model.strip():
        raise ProfileError(f"configuration key {text!r} is not <gpu_model>:<gpus>")
    try:
        key = gpu_model_key(model)
    except EnergyError as exc:
        raise ProfileError(f"configuration key {text!r}: {exc}") from None
    try:
        gpus = int(count.strip())
    except ValueError:
        raise ProfileError(f"configuration key {text!r}: GPU count {count!r} is not a whole "
                           "number") from None
    if gpus < 1:
        raise ProfileError(f"configuration key {text!r}: GPU count must be >= 1")
    return key, gpus


def config_key(config: Config) -> str:
    """``("t4", 1)`` → ``"t4:1"`` (the inverse of :func:`parse_config_key`)."""
    return f"{config[0]}:{config[1]}"


PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def _epoch_table(value: Any) -> dict[Config, float]:
    if not isinstance(value, Mapping):
        raise ValueError("epoch_time_s must be a mapping of '<gpu_model>:<gpus>' to seconds")
    out: dict[Config, float] = {}
    for raw_key, raw_seconds in value.items():
        if isinstance(raw_key, tuple):
            cfg: Config = (gpu_model_key(str(raw_key[0])), int(raw_key[1]))
        else:
            try:
                cfg = parse_config_key(str(raw_key))
            except ProfileError as exc:
                raise ValueError(str(exc)) from None
        if isinstance(raw_seconds, bool) or not isinstance(raw_seconds, int | float | str):
            raise ValueError(f"{config_key(cfg)}: seconds per epoch must be a number")
        try:
            seconds = float(raw_seconds)
        except ValueError:
            raise ValueError(f"{config_key(cfg)}: {raw_seconds!r} is not a number") from None
        if not math.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"{config_key(cfg)}: seconds per epoch must be positive and finite")
        if cfg in out:
            raise ValueError(f"{config_key(cfg)} given twice")
        out[cfg] = seconds
    return out


class JobProfile(BaseModel):
    """One application's time per epoch, by configuration.

    Attributes:
        epoch_time_s: ``(GPU model key, GPUs) → seconds per epoch`` (in files: keys
            ``"<gpu_model>:<gpus>"``, e.g. ``"v100-pcie-32gb:2"``, ``"Tesla T4:1"``).
        description: free text (application, batch size).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    epoch_time_s: dict[Config, float]
    description: str = ""

    @field_validator("epoch_time_s", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> dict[Config, float]:
        table = _epoch_table(value)
        if not table:
            raise ValueError("epoch_time_s needs at least one configuration")
        return table

    def time_per_epoch(self, model: str, gpus: int) -> float | None:
        """Seconds per epoch on ``gpus`` GPUs of ``model`` (a name or key); None when the
        profile does not cover that configuration."""
        return self.epoch_time_s.get((gpu_model_key(model), gpus))

    def to_json(self) -> dict[str, Any]:
        """The document form (string keys)."""
        out: dict[str, Any] = {"epoch_time_s": {config_key(c): s for c, s in
                                                sorted(self.epoch_time_s.items())}}
        if self.description:
            out["description"] = self.description
        return out


class PowerSpec(BaseModel):
    """A power profile in a document (:class:`topology.planning.energy.PowerProfile`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    idle_w: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    gpu_w: Annotated[float, Field(ge=0, allow_inf_nan=False)]

    def profile(self) -> PowerProfile:
        """As a :class:`PowerProfile`."""
        return PowerProfile(self.idle_w, self.gpu_w)


class ProfileDocument(BaseModel):
    """The profile document (file, or the ``profiles.yaml`` key of a ConfigMap)::

        apiVersion: gputopo.io/v1
        kind: JobProfiles
        power:                       # optional: W per GPU model (overrides the built-ins)
          v100-pcie-32gb: {idle_w: 150, gpu_w: 250}
        profiles:
          convnet:
            description: ConvNet, batch 8192 (ANDREAS Table V)
            epoch_time_s: {"v100-pcie-32gb:1": 14.0, "v100-pcie-32gb:2": 9.1, "t4:1": 30.8}
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_version: Literal["gputopo.io/v1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["JobProfiles"] = KIND
    power: dict[str, PowerSpec] = Field(default_factory=dict)
    profiles: dict[str, JobProfile] = Field(default_factory=dict)

    @field_validator("power", mode="before")
    @classmethod
    def _power_keys(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        out: dict[str, Any] = {}
        for k, v in value.items():
            try:
                out[gpu_model_key(str(k))] = v
            except EnergyError as exc:
                raise ValueError(str(exc)) from None
        return out

    def power_profiles(self) -> dict[str, PowerProfile]:
        """GPU model key → :class:`PowerProfile` of the document."""
        return {k: v.profile() for k, v in self.power.items()}

    def profile(self, name: str) -> JobProfile:
        """The profile ``name``.

        Raises:
            ProfileError: unknown name (the message lists the known ones).
        """
        if name not in self.profiles:
            known = ", ".join(sorted(self.profiles)) or "none"
            raise ProfileError(f"unknown profile {name!r}; known: {known}")
        return self.profiles[name]

    def to_json(self) -> dict[str, Any]:
        """The document as plain data (what :func:`load_profiles` reads back)."""
        out: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND}
        if self.power:
            out["power"] = {k: v.model_dump() for k, v in sorted(self.power.items())}
        out["profiles"] = {k: v.to_json() for k, v in sorted(self.profiles.items())}
        return out


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "document"
    return f"{where}: {err.get('msg', 'invalid')}"


def parse_profiles(data: Any, *, source: str = "profile document") -> ProfileDocument:
    """Validate already-parsed data as a :class:`ProfileDocument`.

    Raises:
        ProfileError: one line naming the first bad field.
    """
    if not isinstance(data, Mapping):
        raise ProfileError(f"{source}: expected a mapping with 'profiles'")
    try:
        return ProfileDocument.model_validate(dict(data))
    except ValidationError as exc:
        raise ProfileError(f"{source}: {_first_error(exc)}") from None


def load_profiles(text_or_path: str | Path) -> ProfileDocument:
    """Read a profile document from YAML/JSON text or a file path.

    Raises:
        ProfileError: unreadable file, bad YAML/JSON, or a bad field (one line).
    """
    source = "profile document"
    text = str(text_or_path)
    if isinstance(text_or_path, Path) or ("\n" not in text and Path(text).suffix in
                                          (".yaml", ".yml", ".json")):
        path = Path(text_or_path)
        source = str(path)
        try:
            text = read_utf8(path)
        except OSError as exc:
            raise ProfileError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = load_json(text) if text.lstrip().startswith("{") else load_yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ProfileError(f"{source}: not YAML/JSON: {str(exc).splitlines()[0]}") from None
    return parse_profiles(data, source=source)


# ------------------------------------------------------------------------------ learning


@dataclass(frozen=True)
class EpochObservation:
    """A job's report: at ``time_s`` it had finished ``epochs_done`` epochs."""

    time_s: float
    epochs_done: int


def estimate_epoch_time(observations: Sequence[EpochObservation]) -> float | None:
    """Seconds per epoch of one run segment (one configuration, no restart in between), from
    the job's epoch reports: the least-squares slope of time against finished epochs,

        τ̂ = Σ (e_i − ē)(t_i − t̄) / Σ (e_i − ē)²                              [s/epoch]

    Time is regressed on epochs because epochs are exact and report times carry the noise.
    For each epoch count only its earliest report is used (a count reported again later
    says nothing new about when that epoch ended). Include the segment start (its time and
    the epochs done before it) as the first observation when known.

    Returns:
        the estimate, or None when fewer than two distinct epoch counts were seen.

    Raises:
        ProfileError: a non-finite time, a negative epoch count, epochs that go down as time
            goes up, or a non-positive slope.
    """
    first: dict[int, float] = {}
    for ob in sorted(observations, key=lambda o: (o.time_s, o.epochs_done)):
        if not math.isfinite(ob.time_s):
            raise ProfileError("observation time must be finite")
        if ob.epochs_done < 0:
            raise ProfileError("epochs done must be >= 0")
        if first and ob.epochs_done < max(first):
            raise ProfileError(
                f"epochs done went down from {max(first)} to {ob.epochs_done} at "
                f"t={ob.time_s:g}s (a restart starts a new segment)")
        first.setdefault(ob.epochs_done, ob.time_s)
    if len(first) < 2:
        return None
    es = list(first)
    ts = [first[e] for e in es]
    e_mean = statistics.fmean(es)
    t_mean = statistics.fmean(ts)
    num = sum((e - e_mean) * (t - t_mean) for e, t in zip(es, ts, strict=True))
    den = sum((e - e_mean) ** 2 for e in es)
    slope = num / den
    if slope <= 0:
        raise ProfileError("epochs advanced in no time: reports are not in time order")
    return slope


@dataclass
class _Measured:
    seconds: float = 0.0  # Σ τ̂ · epochs (epoch-weighted)
    epochs: float = 0.0

    @property
    def mean(self) -> float:
        return self.seconds / self.epochs


class EpochTimeLearner:
    """Per-epoch times learnt from finished epochs, per (profile key, configuration).

    :meth:`record` adds one segment's estimate, weighted by the epochs it covered;
    :meth:`epoch_times` gives the table the planner uses for a profile:

    * a configuration that was measured uses the epoch-weighted mean of its estimates;
    * one that was not, but is in the declared profile, uses the declared time scaled by the
      median ratio measured / declared over the profile's measured configurations (a job
      that runs 20 % slower than profiled on one configuration probably does on all);
    * declared times are used as they are while nothing was measured.

    Pure and deterministic: no clock, no I/O.
    """

    def __init__(self) -> None:
        self._measured: dict[str, dict[Config, _Measured]] = {}

    def record(self, key: str, config: Config, seconds_per_epoch: float, epochs: float) -> None:
        """Add an estimate of ``seconds_per_epoch`` for ``config`` of profile ``key`` that
        covered ``epochs`` epochs.

        Raises:
            ProfileError: non-positive or non-finite figures.
        """
        if not (math.isfinite(seconds_per_epoch) and seconds_per_epoch > 0):
            raise ProfileError("seconds per epoch must be positive and finite")
        if not (math.isfinite(epochs) and epochs > 0):
            raise ProfileError("epochs must be positive and finite")
        cfg = (gpu_model_key(config[0]), int(config[1]))
        m = self._measured.setdefault(key, {}).setdefault(cfg, _Measured())
        m.seconds += seconds_per_epoch * epochs
        m.epochs += epochs

    def observe(self, key: str, config: Config,
                observations: Sequence[EpochObservation]) -> float | None:
        """:func:`estimate_epoch_time` of one segment's reports, recorded when there is one
        (weighted by the epochs between the first and last report); returns the estimate."""
        est = estimate_epoch_time(observations)
        if est is not None:
            done = [o.epochs_done for o in observations]
            self.record(key, config, est, float(max(done) - min(done)))
        return est

    def measured(self, key: str) -> dict[Config, float]:
        """The measured seconds per epoch of profile ``key`` (mean per configuration)."""
        return {c: m.mean for c, m in sorted(self._measured.get(key, {}).items())}

    def epoch_times(self, key: str,
                    declared: Mapping[Config, float] | None = None) -> dict[Config, float]:
        """The table to plan with for profile ``key`` (class docstring)."""
        measured = self.measured(key)
        declared = dict(declared or {})
        ratios = [measured[c] / declared[c] for c in measured if c in declared]
        scale = statistics.median(ratios) if ratios else 1.0
        out = {c: t * scale for c, t in declared.items()}
        out.update(measured)
        return dict(sorted(out.items()))

    def keys(self) -> Iterable[str]:
        """Profile keys with measurements."""
        return sorted(self._measured)


def remaining_epochs(total: int, done: int) -> int:
    """Epochs a job still has to run after a restart from its last snapshot: ``total − done``
    (ANDREAS §IV-A; snapshots every epoch, §V), never below 0.

    Raises:
        ProfileError: negative figures.
    """
    if total < 0 or done < 0:
        raise ProfileError("epoch counts must be >= 0")
    return max(0, total - done)
