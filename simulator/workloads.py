"""Workloads: jobs, the generators of the papers' traces, and workload files.

A workload spec is ``NAME[:key=value,...]`` or a file path:

* ``mapa`` — MAPA §4: 300 jobs, GPUs uniform in 1–5, networks uniform over AlexNet,
  Inception-v3, VGG-16, ResNet-50 (bandwidth sensitive), CaffeNet and GoogleNet (insensitive)
  (Fig. 5b), pattern ring; all submitted at t = 0 to a FIFO queue (MAPA's job file).
  Keys: ``jobs``, ``arrival=batch|poisson``, ``rate`` (jobs/min, Poisson arrivals).
* ``amaral-prototype`` — Amaral §5.2, Table 1 (``simulator/data/amaral-prototype.json``).
* ``amaral-s1`` — Amaral §5.5.1: 100 jobs, 5 Minsky machines, Poisson arrivals λ = 10 jobs/min,
  batch class Binomial(3, ½) over tiny…big, network Binomial(2, ½) over AlexNet, CaffeRef,
  GoogLeNet. Keys: ``jobs``, ``rate``.
* ``amaral-s2`` — Amaral §5.5.2: 10 000 jobs on 1 000 machines. The paper keeps λ = 10/min;
  on 200× the machines of s1 that leaves the cluster idle, so by default λ scales with the
  node count to keep s1's load per machine (2 jobs/min per machine; ``rate=`` overrides).
* ``tabrizian-best`` — Tabrizian §6.2: VGG-19, VGG-11 and ResNet-18 at batch 64, two of
  each, 1 000 iterations, submitted together to two single-V100 machines (``v100-1gpu`` × 2).
  Keys: ``workers`` (data workers: 2, the thesis' Fig. 6.3b and default, or 10, Fig. 6.3a),
  ``iterations``.
* ``tabrizian-worst`` — Tabrizian §6.3: SENet-18 and ResNet-18 at batch 256, two of each
  (four jobs), two single-V100 machines. Keys: ``workers``, ``iterations``.
* ``tabrizian-mix`` — a Poisson stream mixing shared single-GPU training jobs (the catalog's
  models and batch sizes) with exclusive multi-GPU MAPA jobs on DGX-1 V100 nodes. Keys:
  ``jobs``, ``rate`` (jobs/min), ``shared`` (fraction of shared jobs), ``workers``.
* a ``.json`` / ``.yaml`` / ``.csv`` file (format in ``docs/simulator.md``); every run writes
  its workload as ``DIR/workload.json``, so a generated trace can be replayed exactly.

Shared jobs (``shared: true``) ask for one co-location slot (``gputopo.io/gpu-shared``) and
carry a profile (:mod:`topology.colocation`): a catalog key ``<model>:<batch>`` resolved
against the workload's profile catalog, or explicit ``kernel_occupancy``/``mem_bandwidth_util``
/ ``iteration_s`` / ``gpu_memory_mib``; the resolved numbers are written into the job so that
``workload.json`` replays without the catalog.

Assumptions the papers leave open (GPU counts of Amaral's generated jobs, base run times,
communication shares) are module constants below, each with its source or reasoning.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
import re
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from simulator import SimulationError
from topology.colocation.model import DEFAULT_THRESHOLD
from topology.colocation.profile import (
    JobProfile,
    ProfileCatalog,
    ProfileError,
    parse_profile_key,
    resolve_catalog,
)
from topology.colocation.sources import (
    ANN_ITERATION_MS,
    ANN_KERNEL_OCCUPANCY,
    ANN_MEM_BANDWIDTH_UTIL,
    ANN_PROFILE,
    resolve_profile,
)
from topology.patterns import PatternError, parse_pattern
from topology.policies.amaral import lookup_profile
from topology.policies.base import Request, RequestError, SharedRequest
from topology.text import load_json, load_yaml, path_exists, path_is_file, read_utf8

# ------------------------------------------------------------------------------ networks


@dataclass(frozen=True)
class NetworkModel:
    """How a network's run time responds to bandwidth (see :mod:`simulator.runtime`).

    Attributes:
        base_s: solo run time on the ideal GPU set, seconds (mean; jobs jitter around it).
        comm_share: share of that run time spent communicating at the ideal bandwidth.
        sensitive: bandwidth sensitive (MAPA Fig. 5b).
    """

    base_s: float
    comm_share: float
    sensitive: bool


#: MAPA's six networks. Sensitivity: MAPA Fig. 5b. Communication shares: VGG-16 runs 3× faster
#: on a double NVLink than on PCIe (MAPA §2.1, Fig. 2b: 2 GPUs, 50 vs 12 GB/s links; with the
#: run-time model that is a share of 0.63); the other sensitive networks are placed below it in
#: the order of their data sizes (Fig. 5a); insensitive ones barely respond (Fig. 16). Base run
#: times: the 300–800 s range of MAPA Fig. 13's execution times.
MAPA_NETWORKS: dict[str, NetworkModel] = {
    "alexnet": NetworkModel(350.0, 0.45, True),
    "inception-v3": NetworkModel(500.0, 0.35, True),
    "vgg16": NetworkModel(400.0, 0.63, True),
    "resnet50": NetworkModel(450.0, 0.40, True),
    "caffenet": NetworkModel(300.0, 0.04, False),
    "googlenet": NetworkModel(350.0, 0.03, False),
}

#: Amaral Fig. 4: pack (P2P over NVLink) vs spread speedup on Minsky by network and batch
#: class (AlexNet ≈1.30× with tiny batches, ≈1.20× at batch 8, even above 16; GoogLeNet
#: hardly responds; CaffeRef, "based on AlexNet", slightly below it).
AMARAL_PACK_SPEEDUP: dict[str, dict[str, float]] = {
    "alexnet": {"tiny": 1.30, "small": 1.25, "medium": 1.20, "big": 1.02},
    "cafferef": {"tiny": 1.27, "small": 1.22, "medium": 1.15, "big": 1.02},
    "googlenet": {"tiny": 1.05, "small": 1.03, "medium": 1.02, "big": 1.00},
}
#: Solo run time (s) of an AlexNet job on the best GPUs by batch class (Amaral's prototype:
#: Job 0, a tiny-batch AlexNet, ends ≈70 s after it starts); CaffeRef ×0.9, GoogLeNet ×1.4.
AMARAL_BASE_S = {"tiny": 70.0, "small": 90.0, "medium": 140.0, "big": 300.0}
AMARAL_NET_TIME = {"alexnet": 1.0, "cafferef": 0.9, "googlenet": 1.4}
#: Minsky's pack/spread EffBW ratio for a GPU pair (NV2 40 GB/s vs SYS 12 GB/s); turns a pack
#: speedup S into a communication share (S - 1) / (ratio - 1).
MINSKY_PACK_RATIO = 40.0 / 12.0
AMARAL_BATCHES = ("tiny", "small", "medium", "big")
AMARAL_NETS = ("alexnet", "cafferef", "googlenet")
#: Amaral's generator does not say how many GPUs a job asks for; Table 1 has 1- and 2-GPU
#: jobs and §5.2 "some needing more than two". We draw 1 + Binomial(3, 1/3) (1: 30 %,
#: 2: 44 %, 3: 22 %, 4: 4 %) — at most a whole Minsky.
AMARAL_GPU_TRIALS, AMARAL_GPU_P = 3, 1 / 3
#: Table 1's minimum utilities.
AMARAL_MIN_UTILITY = {1: 0.3}
AMARAL_MIN_UTILITY_MULTI = 0.5
#: A job counts as bandwidth sensitive when packing speeds it up by at least this (Fig. 4).
AMARAL_SENSITIVE_SPEEDUP = 1.10


def amaral_comm_share(network: str, batch: str) -> float:
    """Communication share of an Amaral job, from its Fig. 4 pack speedup on Minsky."""
    s = AMARAL_PACK_SPEEDUP[network][batch]
    return round((s - 1.0) / (MINSKY_PACK_RATIO - 1.0), 4)


# ------------------------------------------------------------------------------ jobs

#: A job's id: a number (generated workloads, CSV rows) or a name (``"bert-a"``).
JobId = int | str


def id_key(jid: JobId) -> tuple[int, int | str]:
    """Sort key of job ids: numbers in numeric order, then names in text order (a workload
    may mix both)."""
    return (0, jid) if isinstance(jid, int) else (1, jid)


def parse_job_id(value: Any, where: str) -> JobId:
    """A job id from a workload file: a whole number (``7``, ``"7"``, ``7.0``) stays a number,
    any other non-empty text is a name kept exactly (``"bert-a"``).

    Raises:
        SimulationError: empty, a boolean, a fraction, or not text or a number.
    """
    if isinstance(value, bool):
        raise SimulationError(f"{where}: id={value!r} must be a number or a name")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value == int(value):
            return int(value)
        raise SimulationError(f"{where}: id={value!r} must be a whole number or a name")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise SimulationError(f"{where}: id is empty")
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        return text
    raise SimulationError(f"{where}: id={value!r} must be a number or a name")


@dataclass(frozen=True)
class Job:
    """One job of a workload.

    Attributes:
        id: unique id, a number or a name (:data:`JobId`; the order of submission at equal
            arrival times, numbers before names: :func:`id_key`).
        arrival_s: submission time, seconds.
        gpus: whole GPUs requested (≥ 1).
        network: model name (``vgg16``, ``alexnet``, …; free text for other jobs).
        runtime_s: solo run time on the ideal GPU set, seconds.
        comm_share: share of ``runtime_s`` spent communicating (0–1).
        sensitive: bandwidth sensitive (``gputopo.io/bandwidth-sensitive``).
        pattern: communication pattern text (``ring``, ``all-to-all``, edge list).
        profile: performance profile for interference (``alexnet/tiny``), or for a shared
            job its co-location profile key (``resnet18:64``), or None.
        min_utility: TOPO-AWARE-P's minimum utility (``gputopo.io/min-utility``), or None.
        shared: asks for one co-location slot (``gputopo.io/gpu-shared``), not whole GPUs.
        kernel_occupancy: shared jobs: C (Tabrizian Eq. 4.3), percent·µs over 2 iterations.
        mem_bandwidth_util: shared jobs: M (Eq. 4.2), same units.
        gpu_memory_mib: shared jobs: GPU memory reserved, MiB.
        iteration_s: shared jobs: solo iteration time t_j, seconds.
    """

    id: JobId
    arrival_s: float
    gpus: int
    network: str
    runtime_s: float
    comm_share: float
    sensitive: bool
    pattern: str = "all-to-all"
    profile: str | None = None
    min_utility: float | None = None
    shared: bool = False
    kernel_occupancy: float | None = None
    mem_bandwidth_util: float | None = None
    gpu_memory_mib: int | None = None
    iteration_s: float | None = None

    def colocation_profile(self) -> JobProfile:
        """A shared job's profile (its resolved numbers).

        Raises:
            SimulationError: not a shared job, or its numbers are missing.
        """
        c, m = self.kernel_occupancy, self.mem_bandwidth_util
        mem, t = self.gpu_memory_mib, self.iteration_s
        if not self.shared or c is None or m is None or mem is None or t is None:
            raise SimulationError(f"job {self.id}: not a shared job with a resolved profile")
        try:
            return JobProfile(iteration_s=t, kernel_occupancy=c, mem_bandwidth_util=m,
                              gpu_memory_mib=mem, key=self.profile, source="workload")
        except ProfileError as exc:
            raise SimulationError(f"job {self.id}: {exc}") from None

    def request(self, threshold: float = DEFAULT_THRESHOLD) -> Request:
        """The pod's request as the extender would build it from the annotations.

        Args:
            threshold: the co-location ΣC threshold (shared jobs; Tabrizian §4.2.4).

        Raises:
            SimulationError: bad pattern / profile / minimum utility.
        """
        if self.shared:
            prof = self.colocation_profile()
            try:
                return Request(count=1, shared=SharedRequest(
                    prof, prof.gpu_memory_mib, name=f"job-{self.id}", threshold=threshold))
            except RequestError as exc:
                raise SimulationError(f"job {self.id}: {exc}") from None
        try:
            pat = parse_pattern(self.pattern, self.gpus)
            return Request(count=self.gpus, pattern=pat, bandwidth_sensitive=self.sensitive,
                           min_utility=self.min_utility, profile=self.profile)
        except (PatternError, RequestError) as exc:
            raise SimulationError(f"job {self.id}: {exc}") from None


@dataclass(frozen=True)
class Workload:
    """A list of jobs and how to run them.

    Attributes:
        name: label.
        jobs: the jobs, sorted by (arrival, id).
        interference: model co-location interference between jobs' profiles at run time
            (Amaral §3.3); MAPA's evaluation does not.
        default_nodes: node count when the CLI gets no ``--nodes``.
        default_topology: the papers' machine for this workload: a catalog name, a topology
            file path, or an inline topology document (JSON text).
        own_cluster: the workload defines its cluster (``default_topology`` ×
            ``default_nodes``), so it runs without ``--topology`` (Tabrizian's two single-V100
            machines; a file with ``cluster``); otherwise ``default_topology`` is informative.
        description: one line.
        params: generator parameters (for the report).
        profiles: the co-location profile catalog its shared jobs' keys were resolved
            against (informative: the jobs carry the resolved numbers).
    """

    name: str
    jobs: tuple[Job, ...]
    interference: bool = False
    default_nodes: int = 1
    default_topology: str | None = None
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    profiles: str | None = None
    own_cluster: bool = False

    @property
    def has_shared(self) -> bool:
        """Some job asks for a co-location slot."""
        return any(j.shared for j in self.jobs)

    def to_json(self) -> dict[str, Any]:
        """The workload file form (``DIR/workload.json``)."""
        out = {
            "name": self.name,
            "description": self.description,
            "interference": self.interference,
            "default_nodes": self.default_nodes,
            "default_topology": self.default_topology,
            "params": self.params,
            "jobs": [_job_json(j) for j in self.jobs],
        }
        if self.profiles is not None:
            out["profiles"] = self.profiles
        if self.own_cluster:
            del out["default_topology"], out["default_nodes"]
            out["cluster"] = {"topology": self.default_topology, "nodes": self.default_nodes}
        return out


def _job_json(job: Job) -> dict[str, Any]:
    doc = asdict(job)
    if not job.shared:  # keep non-shared rows as they were
        for k in ("shared", "kernel_occupancy", "mem_bandwidth_util", "gpu_memory_mib",
                  "iteration_s"):
            doc.pop(k)
    return doc


# ------------------------------------------------------------------------------ generators


def _binomial(rng: random.Random, n: int, p: float) -> int:
    return sum(1 for _ in range(n) if rng.random() < p)


def mapa(jobs: int = 300, seed: int = 0, arrival: str = "batch", rate: float = 10.0) -> Workload:
    """MAPA §4's trace (module docstring).

    Raises:
        SimulationError: bad parameters.
    """
    if jobs < 1:
        raise SimulationError("mapa: jobs must be at least 1")
    check_most(jobs, "jobs", MAX_JOBS, "mapa")
    if arrival not in ("batch", "poisson"):
        raise SimulationError("mapa: arrival must be batch or poisson")
    if rate <= 0:
        raise SimulationError("mapa: rate must be positive")
    rng = random.Random(seed)
    names = list(MAPA_NETWORKS)
    out: list[Job] = []
    t = 0.0
    for i in range(jobs):
        if arrival == "poisson":
            t += rng.expovariate(rate / 60.0)
        net = rng.choice(names)
        m = MAPA_NETWORKS[net]
        gpus = rng.randint(1, 5)
        out.append(Job(
            id=i, arrival_s=round(t, 3), gpus=gpus, network=net,
            runtime_s=round(m.base_s * rng.uniform(0.75, 1.25), 1), comm_share=m.comm_share,
            sensitive=m.sensitive, pattern="ring", profile=net,
        ))
    return Workload(
        "mapa", tuple(out), interference=False, default_nodes=1, default_topology="dgx1-v100",
        description=f"MAPA §4: {jobs} jobs, 1-5 GPUs, ring, six networks (Fig. 5b)",
        params={"jobs": jobs, "seed": seed, "arrival": arrival, "rate_per_min": rate},
    )


def amaral_job(i: JobId, t: float, gpus: int, network: str, batch: str,
               jitter: float = 1.0) -> Job:
    """An Amaral job (run time, communication share, sensitivity from the tables above)."""
    share = amaral_comm_share(network, batch)
    base = AMARAL_BASE_S[batch] * AMARAL_NET_TIME[network] * jitter
    return Job(
        id=i, arrival_s=round(t, 3), gpus=gpus, network=network, runtime_s=round(base, 1),
        comm_share=share,
        sensitive=AMARAL_PACK_SPEEDUP[network][batch] >= AMARAL_SENSITIVE_SPEEDUP,
        pattern="all-to-all", profile=f"{network}/{batch}",
        min_utility=AMARAL_MIN_UTILITY.get(gpus, AMARAL_MIN_UTILITY_MULTI),
    )


def amaral(jobs: int, seed: int, rate: float, name: str, nodes: int) -> Workload:
    """Amaral §5.3's generator: Poisson arrivals (``rate`` jobs/min), Binomial batch class and
    network, 1 + Binomial(3, 1/3) GPUs, all-to-all pattern, Table 1 minimum utilities.

    Raises:
        SimulationError: bad parameters.
    """
    if jobs < 1 or rate <= 0:
        raise SimulationError(f"{name}: jobs must be at least 1 and rate positive")
    check_most(jobs, "jobs", MAX_JOBS, name)
    rng = random.Random(seed)
    out: list[Job] = []
    t = 0.0
    for i in range(jobs):
        t += rng.expovariate(rate / 60.0)
        batch = AMARAL_BATCHES[_binomial(rng, 3, 0.5)]
        net = AMARAL_NETS[_binomial(rng, 2, 0.5)]
        gpus = 1 + _binomial(rng, AMARAL_GPU_TRIALS, AMARAL_GPU_P)
        out.append(amaral_job(i, t, gpus, net, batch, rng.uniform(0.9, 1.1)))
    return Workload(
        name, tuple(out), interference=True, default_nodes=nodes, default_topology="minsky",
        description=f"Amaral §5.3: {jobs} jobs, Poisson λ={rate:g}/min, Binomial batch/network",
        params={"jobs": jobs, "seed": seed, "rate_per_min": rate},
    )


def amaral_prototype() -> Workload:
    """Amaral Table 1 (the packaged data file)."""
    text = resources.files("simulator").joinpath("data/amaral-prototype.json").read_text()
    return _from_mapping(json.loads(text), "amaral-prototype")


# ------------------------------------------------------------------------------ files


#: Most nodes a simulated cluster may have. The largest benchmark runs 1 000; the simulator
#: keeps state per node (and a generator draws per node), so a mistyped count would take the
#: machine's memory before the first event instead of an error.
MAX_NODES = 10_000
#: Most jobs a generated workload may have (the largest benchmark generates 10 000).
MAX_JOBS = 100_000


def check_most(value: int, key: str, most: int, where: str) -> None:
    """Refuse a count above ``most`` (:data:`MAX_NODES`, :data:`MAX_JOBS`).

    Raises:
        SimulationError: one line naming ``where``, ``key``, the value and the bound.
    """
    if value > most:
        raise SimulationError(f"{where}: {key}={value} is more than the simulator takes "
                              f"(at most {most})")


def _num(value: Any, key: str, where: str, kind: type = float) -> Any:
    try:
        out = kind(value)
    except (TypeError, ValueError):
        raise SimulationError(f"{where}: {key}={value!r} is not a number") from None
    if isinstance(out, float) and not math.isfinite(out):
        raise SimulationError(f"{where}: {key} must be finite")
    return out


def _bool(value: Any, key: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1"):
        return True
    if text in ("false", "no", "0"):
        return False
    raise SimulationError(f"{where}: {key}={value!r} is not true/false")


def params_field(doc: dict[str, Any], origin: str) -> dict[str, Any]:
    """A workload document's ``params`` (the generator's parameters, kept for the report): a
    mapping, or ``{}`` when absent or null.

    Raises:
        SimulationError: ``params`` is something else (one line naming ``origin``).
    """
    raw = doc.get("params")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SimulationError(f"{origin}: params must be a mapping, got {type(raw).__name__}")
    return dict(raw)


#: Iterations of a shared job that gives neither ``runtime_s`` nor ``iterations`` (§6.2).
DEFAULT_ITERATIONS = 1000

_SHARED_FIELDS = ("kernel_occupancy", "mem_bandwidth_util", "gpu_memory_mib", "iteration_s",
                  "iterations")


def shared_job(jid: JobId, arrival: float, raw: dict[str, Any], catalog: ProfileCatalog,
               where: str) -> Job:
    """A shared (co-location) job from a file row: its profile resolved as a pod's would be
    (:func:`topology.colocation.sources.resolve_profile`: explicit numbers, then the profile
    key in ``catalog``, then the conservative default).

    Raises:
        SimulationError: a bad or unknown profile key, malformed numbers, a GPU count other
            than 1.
    """
    if "gpus" in raw and _num(raw["gpus"], "gpus", where, float) != 1:
        raise SimulationError(f"{where}: a shared job takes one co-location slot (gpus: 1)")
    annotations: dict[str, str] = {}
    key: str | None = None
    if raw.get("profile"):
        try:
            key = parse_profile_key(str(raw["profile"]))
        except ProfileError as exc:
            raise SimulationError(f"{where}: {exc}") from None
        annotations[ANN_PROFILE] = key
    explicit = any(raw.get(k) not in (None, "") for k in
                   ("kernel_occupancy", "mem_bandwidth_util", "iteration_s"))
    if key is not None and key not in catalog and not explicit:
        raise SimulationError(
            f"{where}: profile {key!r} is not in catalog {catalog.name} "
            f"({', '.join(sorted(catalog)) or 'empty'}); give kernel_occupancy, "
            "mem_bandwidth_util and iteration_s"
        )
    for field_name, ann in (("kernel_occupancy", ANN_KERNEL_OCCUPANCY),
                            ("mem_bandwidth_util", ANN_MEM_BANDWIDTH_UTIL)):
        if raw.get(field_name) not in (None, ""):
            annotations[ann] = str(_num(raw[field_name], field_name, where))
    if raw.get("iteration_s") not in (None, ""):
        annotations[ANN_ITERATION_MS] = str(1000.0 * _num(raw["iteration_s"], "iteration_s",
                                                          where))
    memory = None
    if raw.get("gpu_memory_mib") not in (None, ""):
        memory = int(_num(raw["gpu_memory_mib"], "gpu_memory_mib", where, float))
        if memory <= 0:
            raise SimulationError(f"{where}: gpu_memory_mib must be > 0")
    try:
        prof = resolve_profile(annotations, catalog=catalog, memory_request_mib=memory)
    except ProfileError as exc:
        raise SimulationError(f"{where}: {exc}") from None
    if raw.get("runtime_s") not in (None, ""):
        runtime = _num(raw["runtime_s"], "runtime_s", where)
    else:
        iterations = _num(raw.get("iterations", DEFAULT_ITERATIONS), "iterations", where, float)
        if iterations <= 0:
            raise SimulationError(f"{where}: iterations must be > 0")
        runtime = iterations * prof.iteration_s
    if runtime <= 0:
        raise SimulationError(f"{where}: runtime_s must be > 0")
    network = str(raw.get("network") or (key.split(":")[0] if key else "job")).strip().lower()
    return Job(
        id=jid, arrival_s=arrival, gpus=1, network=network, runtime_s=round(runtime, 4),
        comm_share=0.0, sensitive=False, pattern="all-to-all", profile=key, shared=True,
        kernel_occupancy=prof.kernel_occupancy, mem_bandwidth_util=prof.mem_bandwidth_util,
        gpu_memory_mib=prof.gpu_memory_mib, iteration_s=prof.iteration_s,
    )


def job_from_mapping(raw: dict[str, Any], index: int,
                     catalog: ProfileCatalog | None = None) -> Job:
    """A :class:`Job` from a file row (keys in ``docs/simulator.md``).

    Unknown MAPA/Amaral networks need ``runtime_s``; known ones take the tables' defaults.
    Shared jobs (``shared: true``) resolve their profile against ``catalog`` (default: the
    shipped :data:`topology.colocation.profile.DEFAULT_CATALOG`).

    Raises:
        SimulationError: a missing or malformed field.
    """
    where = f"job {raw.get('id', index)}"
    allowed = {"id", "arrival_s", "gpus", "network", "batch", "runtime_s", "comm_share",
               "sensitive", "pattern", "profile", "min_utility", "shared", *_SHARED_FIELDS}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise SimulationError(f"{where}: unknown field(s) {', '.join(unknown)}")
    jid = parse_job_id(raw.get("id", index), where)
    arrival = _num(raw.get("arrival_s", 0.0), "arrival_s", where)
    if arrival < 0:
        raise SimulationError(f"{where}: arrival_s must be >= 0")
    if _bool(raw.get("shared", False), "shared", where):
        return shared_job(jid, arrival, raw, catalog or resolve_catalog(None), where)
    given = [k for k in _SHARED_FIELDS if raw.get(k) not in (None, "")]
    if given:
        raise SimulationError(f"{where}: {', '.join(given)} describe a co-located job; "
                              "set shared: true")
    if raw.get("profile") and ":" in str(raw["profile"]):
        raise SimulationError(f"{where}: profile {raw['profile']!r} is a co-location profile "
                              "(<model>:<batch>); set shared: true")
    if "gpus" not in raw:
        raise SimulationError(f"{where}: missing gpus")
    gpus = _num(raw["gpus"], "gpus", where, float)
    if gpus != int(gpus) or gpus < 1:
        raise SimulationError(f"{where}: gpus must be a whole number >= 1 (fractional "
                              "requests are not simulated)")
    gpus = int(gpus)
    network = str(raw.get("network") or "job").strip().lower()
    batch = raw.get("batch") or None
    if batch is not None and network in AMARAL_PACK_SPEEDUP and batch in AMARAL_BASE_S:
        base = amaral_job(jid, arrival, gpus, network, str(batch))
    elif batch is not None:
        raise SimulationError(f"{where}: batch {batch!r} needs an Amaral network "
                              f"({', '.join(AMARAL_NETS)}) and class ({', '.join(AMARAL_BATCHES)})")
    elif network in MAPA_NETWORKS:
        m = MAPA_NETWORKS[network]
        base = Job(jid, arrival, gpus, network, m.base_s, m.comm_share, m.sensitive, "ring",
                   network)
    else:
        if "runtime_s" not in raw:
            raise SimulationError(f"{where}: network {network!r} is not in the tables; give "
                                  "runtime_s")
        base = Job(jid, arrival, gpus, network, 0.0, 0.0, gpus > 1)
    overrides: dict[str, Any] = {}
    if "runtime_s" in raw:
        overrides["runtime_s"] = _num(raw["runtime_s"], "runtime_s", where)
    if "comm_share" in raw and raw["comm_share"] not in ("", None):
        overrides["comm_share"] = _num(raw["comm_share"], "comm_share", where)
    elif network not in MAPA_NETWORKS and batch is None:
        overrides["comm_share"] = 0.5 if _bool(raw.get("sensitive", gpus > 1), "sensitive",
                                               where) else 0.0
    if "sensitive" in raw and raw["sensitive"] not in ("", None):
        overrides["sensitive"] = _bool(raw["sensitive"], "sensitive", where)
    if raw.get("pattern"):
        overrides["pattern"] = str(raw["pattern"])
    if raw.get("profile"):
        overrides["profile"] = str(raw["profile"])
    if raw.get("min_utility") not in (None, ""):
        overrides["min_utility"] = _num(raw["min_utility"], "min_utility", where)
    job = replace(base, **overrides)
    if job.runtime_s <= 0:
        raise SimulationError(f"{where}: runtime_s must be > 0")
    if not 0.0 <= job.comm_share <= 1.0:
        raise SimulationError(f"{where}: comm_share must be in [0, 1]")
    if job.profile is not None:
        try:
            lookup_profile(job.profile)
        except RequestError as exc:
            raise SimulationError(f"{where}: {exc}") from None
    job.request()  # validates pattern and min_utility
    return job


def _cluster_topology(value: Any, origin: str) -> str | None:
    """A workload's own topology: a catalog name or path (relative paths are relative to the
    workload file), or an inline topology document (kept as JSON text)."""
    if value is None or value == "":
        return None
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    text = str(value).strip()
    if text.startswith("{"):
        return text
    base = Path(origin).parent
    candidate = base / text
    if not Path(text).is_absolute() and ("/" in text or Path(text).suffix) and \
            path_exists(candidate):
        return str(candidate)
    return text


def _from_mapping(doc: Any, origin: str) -> Workload:
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SimulationError(f"{origin}: a workload file needs a 'jobs' list")
    rows = doc["jobs"]
    if not rows:
        raise SimulationError(f"{origin}: the workload has no jobs")
    unknown = sorted(set(doc) - {"name", "description", "interference", "default_nodes",
                                 "default_topology", "params", "jobs", "profiles", "cluster"})
    if unknown:
        raise SimulationError(f"{origin}: unknown workload field(s) {', '.join(unknown)}")
    profiles = doc.get("profiles")
    catalog: ProfileCatalog | None = None
    if any(isinstance(r, dict) and _bool(r.get("shared", False), "shared", origin)
           for r in rows):
        spec = str(profiles) if profiles else None
        if spec is not None and not Path(spec).is_absolute() and \
                path_exists(Path(origin).parent / spec):
            spec = str(Path(origin).parent / spec)
        try:
            catalog = resolve_catalog(spec)
        except ProfileError as exc:
            raise SimulationError(f"{origin}: {exc}") from None
    jobs = [job_from_mapping(r if isinstance(r, dict) else {}, i, catalog)
            for i, r in enumerate(rows)]
    cluster = doc.get("cluster")
    nodes_raw: Any = doc.get("default_nodes", 1)
    topo_raw: Any = doc.get("default_topology")
    if cluster is not None:
        if not isinstance(cluster, dict) or "topology" not in cluster:
            raise SimulationError(f"{origin}: cluster needs a topology (and nodes)")
        topo_raw = cluster["topology"]
        nodes_raw = cluster.get("nodes", 1)
    return _finish(
        Workload(
            name=str(doc.get("name") or Path(origin).stem),
            jobs=tuple(jobs),
            interference=_bool(doc.get("interference", False), "interference", origin),
            default_nodes=int(_num(nodes_raw, "nodes", origin, int)),
            default_topology=_cluster_topology(topo_raw, origin),
            description=str(doc.get("description", "")),
            params=params_field(doc, origin),
            profiles=catalog.name if catalog is not None else (str(profiles) if profiles
                                                                else None),
            own_cluster=cluster is not None,
        )
    )


# ------------------------------------------------------------------------------ Tabrizian

#: Tabrizian §6.1: two machines, each with one V100.
TABRIZIAN_MACHINE = "v100-1gpu"
TABRIZIAN_NODES = 2
#: The catalog of each data-worker setting (§6: "ten data workers" and "two data workers").
TABRIZIAN_CATALOGS = {10: "v100-cifar10-w10", 2: "v100-cifar10-w2"}
#: §6.2: "VGG19, VGG11, and ResNet-18 with a batch size of 64. We submit two set of these jobs".
TABRIZIAN_BEST = ("vgg19:64", "vgg11:64", "resnet18:64")
#: §6.3: "SENet18 and ResNet18 ... when the batch size is 256"; four jobs on two GPUs.
TABRIZIAN_WORST = ("se_resnet18:256", "resnet18:256")


def _catalog_for(workers: int, name: str) -> ProfileCatalog:
    if workers not in TABRIZIAN_CATALOGS:
        raise SimulationError(f"{name}: workers must be 2 or 10 (the thesis' two settings)")
    return resolve_catalog(TABRIZIAN_CATALOGS[workers])


def tabrizian_batch(name: str, keys: tuple[str, ...], sets: int, workers: int,
                    iterations: int, description: str) -> Workload:
    """``sets`` copies of the jobs ``keys``, all submitted at t = 0 (§6: "We submit the jobs in
    one batch altogether"), on two single-V100 machines.

    Raises:
        SimulationError: bad parameters.
    """
    if iterations < 1 or sets < 1:
        raise SimulationError(f"{name}: iterations and sets must be at least 1")
    check_most(sets * len(keys), "jobs", MAX_JOBS, name)
    catalog = _catalog_for(workers, name)
    jobs = []
    for s in range(sets):
        for i, key in enumerate(keys):
            jobs.append(shared_job(s * len(keys) + i, 0.0,
                                   {"profile": key, "iterations": iterations}, catalog,
                                   f"{name} job {s * len(keys) + i}"))
    return Workload(
        name, tuple(jobs), interference=False, default_nodes=TABRIZIAN_NODES,
        default_topology=TABRIZIAN_MACHINE, description=description,
        params={"workers": workers, "iterations": iterations, "sets": sets},
        profiles=catalog.name, own_cluster=True,
    )


#: tabrizian-mix: MAPA jobs take 2-5 GPUs (MAPA §4's 1-5, without single-GPU jobs, which are
#: the shared ones here).
MIX_GPUS = (2, 5)
#: Batch sizes of the shared jobs and their weights (small batches dominate: §3.2).
MIX_BATCHES = ((64, 0.5), (128, 0.3), (256, 0.2))
#: Iterations of a shared job: uniform in this range (runs of ~0.5-20 min solo).
MIX_ITERATIONS = (2000, 8000)
MIX_NODES = 4


def tabrizian_mix(jobs: int = 200, seed: int = 0, rate: float = 4.0, shared: float = 0.7,
                  workers: int = 10) -> Workload:
    """A Poisson stream (``rate`` jobs/min) mixing shared single-GPU jobs (fraction
    ``shared``; model uniform over the catalog's five, batch 64/128/256 with weights
    0.5/0.3/0.2, 2 000-8 000 iterations) with exclusive multi-GPU MAPA jobs (2-5 GPUs, MAPA's
    networks and ring pattern) on DGX-1 V100 nodes (default 4).

    Raises:
        SimulationError: bad parameters.
    """
    if jobs < 1 or rate <= 0 or not 0.0 <= shared <= 1.0:
        raise SimulationError("tabrizian-mix: jobs >= 1, rate > 0 and 0 <= shared <= 1")
    check_most(jobs, "jobs", MAX_JOBS, "tabrizian-mix")
    catalog = _catalog_for(workers, "tabrizian-mix")
    rng = random.Random(seed)
    models = sorted({k.split(":")[0] for k in catalog})
    nets = list(MAPA_NETWORKS)
    out: list[Job] = []
    t = 0.0
    for i in range(jobs):
        t += rng.expovariate(rate / 60.0)
        if rng.random() < shared:
            model = rng.choice(models)
            batch = rng.choices([b for b, _ in MIX_BATCHES], [w for _, w in MIX_BATCHES])[0]
            iters = rng.randint(*MIX_ITERATIONS)
            out.append(shared_job(i, round(t, 3), {"profile": f"{model}:{batch}",
                                                   "iterations": iters},
                                  catalog, f"tabrizian-mix job {i}"))
        else:
            net = rng.choice(nets)
            m = MAPA_NETWORKS[net]
            out.append(Job(
                id=i, arrival_s=round(t, 3), gpus=rng.randint(*MIX_GPUS), network=net,
                runtime_s=round(m.base_s * rng.uniform(0.75, 1.25), 1), comm_share=m.comm_share,
                sensitive=m.sensitive, pattern="ring", profile=net,
            ))
    return Workload(
        "tabrizian-mix", tuple(out), interference=False, default_nodes=MIX_NODES,
        default_topology="dgx1-v100",
        description=(f"{jobs} jobs, Poisson {rate:g}/min: {shared:.0%} shared single-GPU "
                     "(Tabrizian catalog), the rest exclusive 2-5-GPU MAPA jobs"),
        params={"jobs": jobs, "seed": seed, "rate_per_min": rate, "shared": shared,
                "workers": workers},
        profiles=catalog.name, own_cluster=True,
    )


def _finish(w: Workload) -> Workload:
    ids = [j.id for j in w.jobs]
    if len(set(ids)) != len(ids):
        raise SimulationError(f"{w.name}: duplicate job ids")
    if w.default_nodes < 1:
        raise SimulationError(f"{w.name}: default_nodes must be >= 1")
    return replace(w, jobs=tuple(sorted(w.jobs, key=lambda j: (j.arrival_s, id_key(j.id)))))


def load_file(path: str) -> Workload:
    """Read a workload from a ``.json``, ``.yaml``/``.yml`` or ``.csv`` file.

    Raises:
        SimulationError: unreadable file or malformed content (one line).
    """
    p = Path(path).expanduser()
    try:
        text = read_utf8(p)
    except OSError as exc:
        raise SimulationError(f"cannot read workload file {path}: {exc.strerror}") from None
    suffix = p.suffix.lower()
    try:
        if suffix == ".csv":
            rows = list(csv.DictReader(io.StringIO(text)))
            doc: Any = {"name": p.stem, "jobs": [{k: v for k, v in r.items() if v != ""}
                                                 for r in rows]}
        elif suffix in (".yaml", ".yml"):
            doc = load_yaml(text)
        else:
            doc = load_json(text)
    except (json.JSONDecodeError, yaml.YAMLError, csv.Error) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SimulationError(f"workload file {path} is malformed: {first}") from None
    return _from_mapping(doc, str(p))


GENERATORS = ("mapa", "amaral-prototype", "amaral-s1", "amaral-s2", "tabrizian-best",
              "tabrizian-worst", "tabrizian-mix")


def _params(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SimulationError(f"bad workload parameter {item!r}: expected key=value")
        out[key.strip().lower()] = value.strip()
    return out


def load_workload(spec: str, *, seed: int = 0, nodes: int | None = None) -> Workload:
    """Resolve a workload spec (module docstring) to a :class:`Workload`.

    Args:
        spec: ``mapa``, ``amaral-prototype``, ``amaral-s1``, ``amaral-s2``,
            ``tabrizian-best``, ``tabrizian-worst``, ``tabrizian-mix`` with optional
            ``:key=value,...``, or a file path.
        seed: generator seed.
        nodes: the cluster's node count, if known (``amaral-s2`` scales its rate with it).

    Raises:
        SimulationError: unknown name, bad parameter, unreadable or malformed file.
    """
    spec = spec.strip()
    if not spec:
        raise SimulationError("empty workload spec")
    name, _, rest = spec.partition(":")
    key = name.strip().lower()
    if key not in GENERATORS:
        path = Path(spec).expanduser()
        if path_exists(path):
            if not path_is_file(path):
                raise SimulationError(f"cannot read workload file {spec}: not a regular file")
            return load_file(spec)
        if "/" in spec or path.suffix.lower() in (".json", ".yaml", ".yml", ".csv"):
            raise SimulationError(f"workload file not found: {spec}")
        raise SimulationError(
            f"unknown workload {spec!r}: use one of {', '.join(GENERATORS)} or a file path"
        )
    params = _params(rest)

    def take(k: str, default: Any, kind: type) -> Any:
        if k not in params:
            return default
        return _num(params.pop(k), k, key, kind)

    if key == "mapa":
        w = mapa(jobs=take("jobs", 300, int), seed=seed,
                 arrival=params.pop("arrival", "batch"), rate=take("rate", 10.0, float))
    elif key == "amaral-prototype":
        w = amaral_prototype()
    elif key == "amaral-s1":
        w = amaral(take("jobs", 100, int), seed, take("rate", 10.0, float), "amaral-s1", 5)
    elif key == "tabrizian-best":
        w = tabrizian_batch(
            "tabrizian-best", TABRIZIAN_BEST, 2, take("workers", 2, int),
            take("iterations", DEFAULT_ITERATIONS, int),
            "Tabrizian §6.2: VGG-19, VGG-11, ResNet-18 at batch 64, two of each, together")
    elif key == "tabrizian-worst":
        w = tabrizian_batch(
            "tabrizian-worst", TABRIZIAN_WORST, 2, take("workers", 2, int),
            take("iterations", DEFAULT_ITERATIONS, int),
            "Tabrizian §6.3: SENet-18 and ResNet-18 at batch 256, two of each, together")
    elif key == "tabrizian-mix":
        w = tabrizian_mix(take("jobs", 200, int), seed, take("rate", 4.0, float),
                          take("shared", 0.7, float), take("workers", 10, int))
    else:
        n = nodes if nodes is not None else 1000
        w = amaral(take("jobs", 10_000, int), seed, take("rate", 2.0 * n, float),
                   "amaral-s2", 1000)
    if params:
        raise SimulationError(f"unknown parameter(s) for {key}: {', '.join(sorted(params))}")
    return _finish(w)
