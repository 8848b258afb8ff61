"""Workloads of the deadline- and energy-aware planner (ANDREAS, Filippini et al.).

A planning workload is a heterogeneous cluster plus jobs with epochs, due dates and tardiness
weights. Specs:

* ``andreas-armida`` — Appendix B: Table V's eight jobs on Table II's ARMIDA nodes
  (``simulator/data/andreas-armida.yaml``). ``nodes=4`` adds armida-04, which §V-C leaves out
  ("dedicated to profiling").
* ``andreas-s1`` / ``andreas-s2`` — §V-B's two scenarios: N nodes (``--nodes``, default 10;
  the paper: 10 to 100), J = 10·N jobs, half the nodes V100 and half T4; s1: 2 × V100 or
  1 × T4 per node, s2: 4 × V100 or 2 × T4; mixed inter-arrival rates; ρ = 100.
  Keys: ``jobs`` (default 10·N), ``load`` (default 1.0), ``phase`` (s, default 7200).
* a ``.json`` / ``.yaml`` file whose jobs carry ``epochs`` (format: ``docs/planner.md``).

Choices §V-B leaves open (each documented in ``docs/planner.md``):

* **Jobs**: the application is drawn uniformly from Table V's four (EfficientNet, ConvNet,
  LSTM-big, LSTM-small; per-epoch times from ``simulator/data/andreas-profiles.yaml``); the
  batch size from {½, 1, 2} × Table V's, which scales the time per epoch by (b / b₀)^−0.15
  (larger batches use the GPU better); epochs uniform in 40–160 (Table V: 60–160); the
  tardiness weight uniform in 1–5 EUR/h (Table V: 1–5); the due date is the submission time
  plus a slack factor, log-uniform in [1.1, 7], times the job's run time on one V100 (Table V's
  jobs have factors 1.13–6.8 on our profiles).
* **Mixed arrivals** ("generated as described in [15]", Saxena et al., which we could not
  consult): Poisson arrivals whose rate alternates between 1.5·λ̄ and 0.5·λ̄ every ``phase``
  seconds, starting high. λ̄ offers ``load`` × the scenario's capacity in V100-seconds of work
  (a V100 counts 1, a T4 ½: 1.25 V100-equivalents per node in s1, 2.5 in s2), so both
  scenarios run at the same load relative to their GPUs, and s2 sees twice the jobs per hour.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from simulator import SimulationError
from simulator.workloads import MAX_JOBS, MAX_NODES, _params, check_most, params_field
from topology.model import TopologyError
from topology.planning.energy import (
    BUILTIN_POWER,
    EnergyError,
    EnergyPrice,
    PowerProfile,
    gpu_model_key,
    node_cost_eur_per_h,
)
from topology.planning.profiles import (
    Config,
    ProfileDocument,
    ProfileError,
    _epoch_table,
    config_key,
    parse_profiles,
)
from topology.sources import load_topology
from topology.text import load_json, load_yaml, path_is_file, read_utf8


@dataclass(frozen=True)
class ClusterNode:
    """One node of a planning cluster.

    Attributes:
        name: node name (the Kubernetes node name in the e2e runs).
        machine: its topology source (a catalog name such as ``v100-pcie-2``).
        gpu_model: GPU model key (``v100-pcie-32gb``).
        gpus: GPU count.
    """

    name: str
    machine: str
    gpu_model: str
    gpus: int


@dataclass(frozen=True)
class PlanningJob:
    """One job to plan.

    Attributes:
        id: unique id.
        arrival_s: submission time, s.
        due_s: due date, absolute, s.
        tardiness_weight: ω, EUR per hour late.
        epochs: epochs to train.
        epoch_time_s: seconds per epoch by ``(GPU model key, GPUs)``.
        profile: the profile key the table came from (informative), or None.
        application: free text (``LSTM-big``).
        batch_size: informative.
    """

    id: str
    arrival_s: float
    due_s: float
    tardiness_weight: float
    epochs: int
    epoch_time_s: dict[Config, float]
    profile: str | None = None
    application: str = ""
    batch_size: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The workload-file form."""
        out: dict[str, Any] = {
            "id": self.id, "arrival_s": self.arrival_s, "due_s": self.due_s,
            "tardiness_weight": self.tardiness_weight, "epochs": self.epochs,
            "epoch_time_s": {config_key(c): t for c, t in sorted(self.epoch_time_s.items())},
        }
        for key in ("profile", "application", "batch_size"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out


@dataclass(frozen=True)
class PlanningWorkload:
    """A cluster and its jobs.

    Attributes:
        name: label.
        jobs: sorted by (arrival, id).
        cluster: the nodes, or None when the run supplies them (``--topology`` × ``--nodes``).
        power: power profiles by GPU model key (over :data:`BUILTIN_POWER`).
        description: one line.
        params: generator parameters.
    """

    name: str
    jobs: tuple[PlanningJob, ...]
    cluster: tuple[ClusterNode, ...] | None
    power: dict[str, PowerProfile] = field(default_factory=dict)
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    def power_for(self, model: str) -> PowerProfile:
        """The power profile of GPU model key ``model``.

        Raises:
            SimulationError: none known.
        """
        table = {**BUILTIN_POWER, **self.power}
        if model not in table:
            raise SimulationError(f"{self.name}: no power profile for GPU model {model!r}; add "
                                  "power: {" + model + ": {idle_w: W, gpu_w: W}} to the workload")
        return table[model]

    def energy_floor_eur(self, price: EnergyPrice | None = None,
                         cluster: tuple[ClusterNode, ...] | None = None) -> float:
        """A lower bound of the energy cost of running every job to the end, EUR, under any
        policy (a clairvoyant one included): each job on its cheapest configuration, charged
        only its GPUs' share of a *fully busy* node, g · c_nG / G (the node's idle power split
        over all G GPUs, which is as cheap as c_ng ever gets per GPU, since c_ng ≥ g · c_nG / G;
        energy as ANDREAS Table I / §V-A). With no tardiness either, no policy's total cost
        can be lower, which bounds the reduction any policy can reach against a baseline.

        Args:
            price: PUE and EUR/kWh (default: §V-A's).
            cluster: the nodes, if the workload has none of its own.

        Raises:
            SimulationError: no cluster, or a job no node can run.
        """
        nodes = cluster if cluster is not None else self.cluster
        if not nodes:
            raise SimulationError(f"{self.name}: no cluster")
        p = price or EnergyPrice()
        per_gpu_s = {(n.gpu_model, n.gpus): node_cost_eur_per_h(self.power_for(n.gpu_model),
                                                                n.gpus, p) / n.gpus / 3600.0
                     for n in nodes}
        floor = 0.0
        for job in self.jobs:
            costs = [job.epochs * job.epoch_time_s[(model, g)] * g * cost
                     for (model, gmax), cost in per_gpu_s.items() for g in range(1, gmax + 1)
                     if (model, g) in job.epoch_time_s]
            if not costs:
                raise SimulationError(f"job {job.id}: no node of the cluster can run it")
            floor += min(costs)
        return floor

    def to_json(self) -> dict[str, Any]:
        """The workload file form (``DIR/workload.json``; replays exactly)."""
        return {
            "name": self.name,
            "description": self.description,
            "params": self.params,
            "cluster": None if self.cluster is None else
            [{"name": n.name, "machine": n.machine} for n in self.cluster],
            "power": {k: {"idle_w": p.idle_w, "gpu_w": p.gpu_w}
                      for k, p in sorted(self.power.items())},
            "jobs": [j.to_json() for j in self.jobs],
        }


# ------------------------------------------------------------------------------ data


@cache
def packaged_profiles() -> ProfileDocument:
    """``simulator/data/andreas-profiles.yaml``: Table V's applications."""
    text = resources.files("simulator").joinpath("data/andreas-profiles.yaml").read_text()
    return parse_profiles(yaml.safe_load(text), source="andreas-profiles.yaml")


def _machine_node(name: str, machine: str) -> ClusterNode:
    try:
        topo = load_topology(machine)
    except TopologyError as exc:
        raise SimulationError(f"node {name}: {exc}") from None
    return ClusterNode(name, machine, gpu_model_key(topo.gpus[0].name), topo.size)


def cluster_of(machine: str, nodes: int) -> tuple[ClusterNode, ...]:
    """``nodes`` identical nodes of topology ``machine`` (``--topology`` × ``--nodes``),
    named ``<machine>-<i>``.

    Raises:
        SimulationError: unknown topology or nodes < 1.
    """
    if nodes < 1:
        raise SimulationError("--nodes must be at least 1")
    base = _machine_node("n", machine)
    width = len(str(nodes - 1))
    return tuple(ClusterNode(f"{Path(machine).stem}-{i:0{width}d}", machine, base.gpu_model,
                             base.gpus) for i in range(nodes))


# ------------------------------------------------------------------------------ parsing


def _num(raw: Any, key: str, where: str) -> float:
    if isinstance(raw, bool):
        raise SimulationError(f"{where}: {key}={raw!r} is not a number")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise SimulationError(f"{where}: {key}={raw!r} is not a number") from None
    if not math.isfinite(value):
        raise SimulationError(f"{where}: {key} must be finite")
    return value


JOB_FIELDS = {"id", "arrival_s", "due_s", "tardiness_weight", "epochs", "epoch_time_s",
              "profile", "application", "batch_size"}


def job_from_mapping(raw: Any, index: int, profiles: ProfileDocument) -> PlanningJob:
    """A :class:`PlanningJob` from a file row.

    Raises:
        SimulationError: a missing or malformed field (one line).
    """
    if not isinstance(raw, dict):
        raise SimulationError(f"job {index}: expected a mapping")
    where = f"job {raw.get('id', index)}"
    unknown = sorted(set(raw) - JOB_FIELDS)
    if unknown:
        raise SimulationError(f"{where}: unknown field(s) {', '.join(unknown)}")
    for key in ("due_s", "tardiness_weight", "epochs"):
        if key not in raw:
            raise SimulationError(f"{where}: missing {key}")
    arrival = _num(raw.get("arrival_s", 0.0), "arrival_s", where)
    due = _num(raw["due_s"], "due_s", where)
    weight = _num(raw["tardiness_weight"], "tardiness_weight", where)
    epochs = _num(raw["epochs"], "epochs", where)
    if arrival < 0:
        raise SimulationError(f"{where}: arrival_s must be >= 0")
    if weight <= 0:
        raise SimulationError(f"{where}: tardiness_weight must be > 0 (EUR per hour late)")
    if epochs != int(epochs) or epochs < 1:
        raise SimulationError(f"{where}: epochs must be a whole number >= 1")
    table: dict[Config, float] = {}
    profile = raw.get("profile")
    if profile:
        try:
            table.update(profiles.profile(str(profile)).epoch_time_s)
        except ProfileError as exc:
            raise SimulationError(f"{where}: {exc}") from None
    if raw.get("epoch_time_s") is not None:
        try:
            table.update(_epoch_table(raw["epoch_time_s"]))
        except (ValueError, EnergyError) as exc:
            raise SimulationError(f"{where}: epoch_time_s: {exc}") from None
    if not table:
        raise SimulationError(f"{where}: needs epoch_time_s ('<gpu_model>:<gpus>': seconds) "
                              "or a profile")
    batch = raw.get("batch_size")
    return PlanningJob(
        id=str(raw.get("id", index)), arrival_s=arrival, due_s=due, tardiness_weight=weight,
        epochs=int(epochs), epoch_time_s=table, profile=str(profile) if profile else None,
        application=str(raw.get("application") or ""),
        batch_size=int(_num(batch, "batch_size", where)) if batch is not None else None,
    )


def from_mapping(doc: Any, origin: str) -> PlanningWorkload:
    """A :class:`PlanningWorkload` from a parsed file.

    Raises:
        SimulationError: malformed content (one line).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list) or not doc["jobs"]:
        raise SimulationError(f"{origin}: a planning workload needs a non-empty 'jobs' list")
    unknown = sorted(set(doc) - {"name", "description", "params", "cluster", "power",
                                 "profiles", "jobs"})
    if unknown:
        raise SimulationError(f"{origin}: unknown field(s) {', '.join(unknown)}")
    profiles = packaged_profiles()
    if doc.get("profiles") or doc.get("power"):
        try:
            own = parse_profiles({"profiles": doc.get("profiles") or {},
                                  "power": doc.get("power") or {}}, source=origin)
        except ProfileError as exc:
            raise SimulationError(str(exc)) from None
        profiles = ProfileDocument.model_validate(
            {"profiles": {**profiles.profiles, **own.profiles},
             "power": {**profiles.power, **own.power}})
    cluster = None
    if doc.get("cluster") is not None:
        rows = doc["cluster"]
        if not isinstance(rows, list) or not rows:
            raise SimulationError(f"{origin}: cluster must be a non-empty list of "
                                  "{name, machine}")
        nodes = []
        for i, row in enumerate(rows):
            if not isinstance(row, dict) or not row.get("machine"):
                raise SimulationError(f"{origin}: cluster[{i}] needs a machine (catalog name)")
            nodes.append(_machine_node(str(row.get("name") or f"node-{i}"), str(row["machine"])))
        if len({n.name for n in nodes}) != len(nodes):
            raise SimulationError(f"{origin}: duplicate node names in cluster")
        cluster = tuple(nodes)
    jobs = [job_from_mapping(r, i, profiles) for i, r in enumerate(doc["jobs"])]
    if len({j.id for j in jobs}) != len(jobs):
        raise SimulationError(f"{origin}: duplicate job ids")
    return PlanningWorkload(
        name=str(doc.get("name") or Path(origin).stem),
        jobs=tuple(sorted(jobs, key=lambda j: (j.arrival_s, j.id))),
        cluster=cluster, power=profiles.power_profiles(),
        description=str(doc.get("description", "")), params=params_field(doc, origin),
    )


def read_document(path: str) -> Any:
    """Parse a ``.json`` / ``.yaml`` file.

    Raises:
        SimulationError: unreadable or malformed.
    """
    p = Path(path).expanduser()
    try:
        text = read_utf8(p)
    except OSError as exc:
        raise SimulationError(f"cannot read workload file {path}: {exc.strerror}") from None
    try:
        return load_json(text) if p.suffix.lower() == ".json" else load_yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SimulationError(f"workload file {path} is malformed: {first}") from None


def is_planning_document(doc: Any) -> bool:
    """A parsed workload file is a planning workload when its jobs carry ``epochs``."""
    return (isinstance(doc, dict) and isinstance(doc.get("jobs"), list)
            and any(isinstance(j, dict) and "epochs" in j for j in doc["jobs"]))


# ------------------------------------------------------------------------------ generators

GENERATORS = ("andreas-armida", "andreas-s1", "andreas-s2")

#: Table V's applications and batch sizes (the profile keys of andreas-profiles.yaml).
APPLICATIONS = {"efficientnet": ("EfficientNet", 4096), "convnet": ("ConvNet", 8192),
                "lstm-big": ("LSTM-big", 8192), "lstm-small": ("LSTM-small", 8192)}
BATCH_FACTORS = (0.5, 1.0, 2.0)
BATCH_EXPONENT = -0.15
EPOCHS = (40, 160)
WEIGHTS = (1, 5)
SLACK = (1.1, 7.0)
#: V100-equivalents per node, by case: (2 V100 + ½ · 1 T4) / 2 and (4 V100 + ½ · 2 T4) / 2.
CAPACITY_PER_NODE = {1: 1.25, 2: 2.5}
#: Per case: (V100 GPUs per V100 node, T4 GPUs per T4 node) -> catalog machines.
CASES = {1: ("v100-pcie-2", "t4-1"), 2: ("v100-pcie-4", "t4-2")}
REF_CONFIG: Config = ("v100-pcie-32gb", 1)


def armida(nodes: int = 3) -> PlanningWorkload:
    """Appendix B (module docstring).

    Raises:
        SimulationError: ``nodes`` not 3 or 4.
    """
    if nodes not in (3, 4):
        raise SimulationError("andreas-armida: nodes must be 3 (§V-C) or 4 (with armida-04)")
    text = resources.files("simulator").joinpath("data/andreas-armida.yaml").read_text()
    doc = yaml.safe_load(text)
    if nodes == 4:
        doc["cluster"] = [{"name": "armida-04", "machine": "v100-pcie-1"}, *doc["cluster"]]
    doc["params"] = {"nodes": nodes}
    return from_mapping(doc, "andreas-armida")


def scenario(case: int, nodes: int, seed: int, jobs: int | None = None, load: float = 1.0,
             phase_s: float = 7200.0) -> PlanningWorkload:
    """§V-B's scenario ``case`` (1 or 2) on ``nodes`` nodes (module docstring).

    Raises:
        SimulationError: bad parameters.
    """
    if nodes < 2:
        raise SimulationError(f"andreas-s{case}: needs at least 2 nodes (half V100, half T4)")
    check_most(nodes, "nodes", MAX_NODES, f"andreas-s{case}")
    n_jobs = 10 * nodes if jobs is None else jobs
    if n_jobs < 1 or load <= 0 or phase_s <= 0:
        raise SimulationError(f"andreas-s{case}: jobs, load and phase must be positive")
    check_most(n_jobs, "jobs", MAX_JOBS, f"andreas-s{case}")
    profiles = packaged_profiles()
    v100, t4 = CASES[case]
    n_v100 = (nodes + 1) // 2
    width = len(str(nodes))
    cluster = tuple(
        [_machine_node(f"v100-{i:0{width}d}", v100) for i in range(n_v100)]
        + [_machine_node(f"t4-{i:0{width}d}", t4) for i in range(nodes - n_v100)])
    rng = random.Random(seed)
    # mean work of a job on one V100, s: E[epochs] x mean over apps and batches of s/epoch
    mean_epochs = (EPOCHS[0] + EPOCHS[1]) / 2
    per_epoch = [profiles.profile(a).epoch_time_s[REF_CONFIG] * b ** BATCH_EXPONENT
                 for a in APPLICATIONS for b in BATCH_FACTORS]
    mean_work = mean_epochs * sum(per_epoch) / len(per_epoch)
    rate = load * CAPACITY_PER_NODE[case] * nodes / mean_work  # jobs per second
    out: list[PlanningJob] = []
    t = 0.0
    for i in range(n_jobs):
        high = int(t // phase_s) % 2 == 0
        t += rng.expovariate(rate * (1.5 if high else 0.5))
        app = rng.choice(list(APPLICATIONS))
        label, batch0 = APPLICATIONS[app]
        factor = rng.choice(BATCH_FACTORS)
        epochs = rng.randint(*EPOCHS)
        scale = factor ** BATCH_EXPONENT
        table = {c: round(s * scale, 3) for c, s in profiles.profile(app).epoch_time_s.items()}
        slack = math.exp(rng.uniform(math.log(SLACK[0]), math.log(SLACK[1])))
        due = t + slack * epochs * table[REF_CONFIG]
        out.append(PlanningJob(
            id=f"j{i:0{len(str(n_jobs))}d}", arrival_s=round(t, 3), due_s=round(due, 3),
            tardiness_weight=float(rng.randint(*WEIGHTS)), epochs=epochs, epoch_time_s=table,
            profile=app, application=label, batch_size=int(batch0 * factor)))
    return PlanningWorkload(
        name=f"andreas-s{case}", jobs=tuple(out), cluster=cluster,
        power=profiles.power_profiles(),
        description=(f"ANDREAS §V-B scenario {case}: {n_jobs} jobs on {nodes} nodes "
                     f"({n_v100} x {v100}, {nodes - n_v100} x {t4}), mixed arrivals"),
        params={"case": case, "nodes": nodes, "jobs": n_jobs, "seed": seed, "load": load,
                "phase_s": phase_s, "mean_rate_per_h": round(rate * 3600, 3)},
    )


def is_planning_spec(spec: str) -> bool:
    """Whether a ``--workload`` spec names a planning workload (a generator above, or a file
    whose jobs carry ``epochs``)."""
    name = spec.strip().partition(":")[0].strip().lower()
    if name in GENERATORS:
        return True
    path = Path(spec.strip()).expanduser()
    if path_is_file(path) and path.suffix.lower() in (".json", ".yaml", ".yml"):
        try:
            return is_planning_document(read_document(str(path)))
        except SimulationError:
            return False
    return False


def load_planning_workload(spec: str, *, seed: int = 0,
                           nodes: int | None = None) -> PlanningWorkload:
    """Resolve a planning workload spec (module docstring).

    Raises:
        SimulationError: unknown name, bad parameter, unreadable or malformed file.
    """
    name, _, rest = spec.strip().partition(":")
    key = name.strip().lower()
    if key not in GENERATORS:
        return from_mapping(read_document(spec.strip()), spec.strip())
    params = _params(rest)

    def take(k: str, default: float) -> float:
        return _num(params.pop(k), k, key) if k in params else default

    if key == "andreas-armida":
        n = int(take("nodes", float(nodes if nodes is not None else 3)))
        w = armida(n)
    else:
        n = nodes if nodes is not None else 10
        jobs = params.pop("jobs", None)
        w = scenario(1 if key == "andreas-s1" else 2, n, seed,
                     int(_num(jobs, "jobs", key)) if jobs is not None else None,
                     take("load", 1.0), take("phase", 7200.0))
    if params:
        raise SimulationError(f"unknown parameter(s) for {key}: {', '.join(sorted(params))}")
    return w
