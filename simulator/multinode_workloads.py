"""Multi-node workloads: single-node jobs and gangs on a cluster with a topology hierarchy.

A multi-node workload brings its cluster: ``blocks`` × ``racks`` per block × ``nodes`` per rack
of one machine (a catalog name, e.g. ``dgx1-v100``, with its NICs from
:func:`topology.catalog.network`), node labels ``topology.gputopo.io/block`` and ``/rack``
(and, with ``cliques: rack``, one ``nvidia.com/gpu.clique`` per rack: a GB200 NVL72 rack), and
the hierarchy's levels (:class:`topology.hierarchy.HierarchySpec`; default
:data:`topology.hierarchy.DEFAULT`).

A job asks for ``pods`` pods of ``gpus`` whole GPUs each (``pods`` = 1: a single-node job; more:
a gang that starts when all its pods have their GPUs), a communication pattern inside each pod
and the MAPA-style run-time fields of :class:`simulator.workloads.Job`.

Spec: ``hierarchy[:key=value,...]`` or a ``.json``/``.yaml`` file whose cluster has ``racks``
or whose jobs have ``pods``. Every run writes ``DIR/workload.json``, which replays exactly.

``hierarchy`` (the issue-23 workload): 4 blocks × 4 racks × 8 DGX-1 V100 nodes (1,024 GPUs);
``jobs`` (300) arrive as a Poisson stream at ``rate`` jobs/min (6); a share ``gangs`` (0.4) are
gangs of 2-16 pods (uniform; never more than the cluster holds) of 8 GPUs (70 %) or 4 GPUs
(30 %; at most a node's GPUs), the rest single-node jobs of 1 to a node's GPUs (uniform);
networks and their communication shares are MAPA's (Fig. 5b;
:data:`simulator.workloads.MAPA_NETWORKS`), gangs drawn from the bandwidth-sensitive four
with probability 0.8; run times MAPA's 300-500 s (±25 %), × 3 for gangs (a multi-node training
run is longer than one node's). Keys: ``jobs``, ``rate``, ``gangs``, ``machine``, ``blocks``,
``racks``, ``nodes``, ``cliques`` (``rack``: every rack one NVLink domain, e.g. GB200 NVL72
trays with ``machine=gb200-tray,nodes=18``), ``max_pods`` (the largest gang, 16).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from simulator import SimulationError
from simulator.workloads import (
    MAPA_NETWORKS,
    MAX_JOBS,
    MAX_NODES,
    JobId,
    _bool,
    _num,
    _params,
    check_most,
    id_key,
    params_field,
    parse_job_id,
)
from topology.hierarchy import DEFAULT, Hierarchy, HierarchyError
from topology.model import TopologyError
from topology.patterns import PatternError, parse_pattern
from topology.policies.base import Request, RequestError
from topology.sources import load_topology
from topology.text import load_json, load_yaml, path_is_file, read_utf8

#: The issue-23 cluster: 4 blocks × 4 racks × 8 DGX-class nodes.
DEFAULT_MACHINE = "dgx1-v100"
DEFAULT_SHAPE = (4, 4, 8)
#: Gang sizes (pods) and their GPUs per pod with weights.
GANG_PODS = (2, 16)
GANG_GPUS = ((8, 0.7), (4, 0.3))
#: Share of gangs drawn from MAPA's bandwidth-sensitive networks.
GANG_SENSITIVE = 0.8
#: A gang's run time relative to a MAPA job's.
GANG_RUNTIME_FACTOR = 3.0
SENSITIVE_NETS = tuple(n for n, m in MAPA_NETWORKS.items() if m.sensitive)
INSENSITIVE_NETS = tuple(n for n, m in MAPA_NETWORKS.items() if not m.sensitive)
CLIQUES = ("none", "rack")


@dataclass(frozen=True)
class MultiJob:
    """One job: ``pods`` pods of ``gpus`` GPUs.

    Attributes:
        id: unique id (a number or a name).
        arrival_s: submission time, s.
        pods: number of pods (1: a single-node job; more: a gang).
        gpus: whole GPUs per pod.
        network: model name (MAPA's take their table values).
        runtime_s: run time on the best placement an idle cluster offers, s.
        comm_share: share of that time spent communicating (0-1).
        sensitive: bandwidth sensitive.
        pattern: each pod's communication pattern (``ring``, ...).
        required, preferred: a hierarchy level label the gang must / should stay inside.
    """

    id: JobId
    arrival_s: float
    pods: int
    gpus: int
    network: str
    runtime_s: float
    comm_share: float
    sensitive: bool
    pattern: str = "ring"
    required: str | None = None
    preferred: str | None = None

    @property
    def gang(self) -> bool:
        """More than one pod."""
        return self.pods > 1

    def request(self) -> Request:
        """Each pod's request.

        Raises:
            SimulationError: a bad pattern.
        """
        try:
            return Request(count=self.gpus, pattern=parse_pattern(self.pattern, self.gpus),
                           bandwidth_sensitive=self.sensitive)
        except (PatternError, RequestError) as exc:
            raise SimulationError(f"job {self.id}: {exc}") from None


@dataclass(frozen=True)
class ClusterSpec:
    """The cluster of a multi-node workload (module docstring)."""

    machine: str = DEFAULT_MACHINE
    blocks: int = DEFAULT_SHAPE[0]
    racks: int = DEFAULT_SHAPE[1]
    nodes: int = DEFAULT_SHAPE[2]
    cliques: str = "none"
    hierarchy: dict[str, Any] | None = None

    @property
    def size(self) -> int:
        """Number of nodes."""
        return self.blocks * self.racks * self.nodes

    def resolved_hierarchy(self) -> Hierarchy:
        """The hierarchy (default :data:`topology.hierarchy.DEFAULT`).

        Raises:
            SimulationError: a malformed hierarchy.
        """
        if self.hierarchy is None:
            return DEFAULT
        try:
            return Hierarchy.parse(self.hierarchy)
        except HierarchyError as exc:
            raise SimulationError(str(exc)) from None


@dataclass(frozen=True)
class MultiWorkload:
    """Jobs and their cluster."""

    name: str
    jobs: tuple[MultiJob, ...]
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The workload file form (``DIR/workload.json``)."""
        return {"name": self.name, "description": self.description, "params": self.params,
                "cluster": asdict(self.cluster), "jobs": [asdict(j) for j in self.jobs]}


def hierarchy_workload(jobs: int = 300, seed: int = 0, rate: float = 6.0, gangs: float = 0.4,
                       machine: str = DEFAULT_MACHINE, blocks: int = DEFAULT_SHAPE[0],
                       racks: int = DEFAULT_SHAPE[1], nodes: int = DEFAULT_SHAPE[2],
                       cliques: str = "none", max_pods: int = GANG_PODS[1]) -> MultiWorkload:
    """The ``hierarchy`` generator (module docstring).

    Raises:
        SimulationError: bad parameters.
    """
    if jobs < 1 or rate <= 0 or not 0.0 <= gangs <= 1.0:
        raise SimulationError("hierarchy: jobs >= 1, rate > 0 and 0 <= gangs <= 1")
    check_most(jobs, "jobs", MAX_JOBS, "hierarchy")
    check_most(blocks * racks * nodes, "blocks x racks x nodes", MAX_NODES, "hierarchy")
    if min(blocks, racks, nodes) < 1:
        raise SimulationError("hierarchy: blocks, racks and nodes must be >= 1")
    if cliques not in CLIQUES:
        raise SimulationError(f"hierarchy: cliques must be {' or '.join(CLIQUES)}")
    if max_pods < GANG_PODS[0]:
        raise SimulationError(f"hierarchy: max_pods must be >= {GANG_PODS[0]}")
    try:
        per_node = load_topology(machine).size
    except TopologyError as exc:
        raise SimulationError(str(exc)) from None
    rng = random.Random(seed)
    out: list[MultiJob] = []
    t = 0.0
    size = blocks * racks * nodes
    for i in range(jobs):
        t += rng.expovariate(rate / 60.0)
        if rng.random() < gangs:
            pods = rng.randint(GANG_PODS[0], max_pods)
            gpus = min(per_node, rng.choices([g for g, _ in GANG_GPUS],
                                             [w for _, w in GANG_GPUS])[0])
            pods = min(pods, size * (per_node // gpus))  # a small cluster: at most all of it
            net = rng.choice(SENSITIVE_NETS if rng.random() < GANG_SENSITIVE
                             else INSENSITIVE_NETS)
            scale = GANG_RUNTIME_FACTOR
        else:
            pods, gpus = 1, rng.randint(1, per_node)
            net = rng.choice(list(MAPA_NETWORKS))
            scale = 1.0
        m = MAPA_NETWORKS[net]
        out.append(MultiJob(i, round(t, 3), pods, gpus, net,
                            round(m.base_s * scale * rng.uniform(0.75, 1.25), 1),
                            m.comm_share, m.sensitive))
    cluster = ClusterSpec(machine, blocks, racks, nodes, cliques)
    return _finish(MultiWorkload(
        "hierarchy", tuple(out), cluster,
        description=(f"{jobs} jobs, Poisson {rate:g}/min, {gangs:.0%} gangs of 2-16 pods on "
                     f"{blocks} blocks x {racks} racks x {nodes} {machine}"),
        params={"jobs": jobs, "seed": seed, "rate_per_min": rate, "gangs": gangs}))


GENERATORS = ("hierarchy",)
_JOB_KEYS = {"id", "arrival_s", "pods", "gpus", "network", "runtime_s", "comm_share",
             "sensitive", "pattern", "required", "preferred"}


def _job(raw: Any, index: int) -> MultiJob:
    if not isinstance(raw, dict):
        raise SimulationError(f"job {index}: not a mapping")
    where = f"job {raw.get('id', index)}"
    unknown = sorted(set(raw) - _JOB_KEYS)
    if unknown:
        raise SimulationError(f"{where}: unknown field(s) {', '.join(unknown)}")
    jid = parse_job_id(raw.get("id", index), where)
    network = str(raw.get("network") or "job").strip().lower()
    table = MAPA_NETWORKS.get(network)
    if table is None and "runtime_s" not in raw:
        raise SimulationError(f"{where}: network {network!r} is not in the tables; give "
                              "runtime_s")
    pods = _num(raw.get("pods", 1), "pods", where, int)
    gpus = _num(raw.get("gpus", 0), "gpus", where, int)
    if pods < 1 or gpus < 1:
        raise SimulationError(f"{where}: pods and gpus must be whole numbers >= 1")
    sensitive = _bool(raw["sensitive"], "sensitive", where) if "sensitive" in raw else (
        table.sensitive if table else gpus * pods > 1)
    job = MultiJob(
        jid, _num(raw.get("arrival_s", 0.0), "arrival_s", where), pods, gpus, network,
        _num(raw["runtime_s"], "runtime_s", where) if "runtime_s" in raw else table.base_s,  # type: ignore[union-attr]
        _num(raw["comm_share"], "comm_share", where) if "comm_share" in raw else (
            table.comm_share if table else (0.5 if sensitive else 0.0)),
        sensitive, str(raw.get("pattern") or "ring"),
        str(raw["required"]) if raw.get("required") else None,
        str(raw["preferred"]) if raw.get("preferred") else None)
    if job.arrival_s < 0 or job.runtime_s <= 0 or not 0.0 <= job.comm_share <= 1.0:
        raise SimulationError(f"{where}: arrival_s >= 0, runtime_s > 0, 0 <= comm_share <= 1")
    if job.required and job.preferred:
        raise SimulationError(f"{where}: give required or preferred, not both")
    job.request()
    return job


def _cluster(raw: Any, origin: str) -> ClusterSpec:
    if raw is None:
        return ClusterSpec()
    if not isinstance(raw, dict):
        raise SimulationError(f"{origin}: cluster must be a mapping")
    unknown = sorted(set(raw) - {"machine", "blocks", "racks", "nodes", "cliques", "hierarchy"})
    if unknown:
        raise SimulationError(f"{origin}: unknown cluster field(s) {', '.join(unknown)}")
    blocks, racks, nodes = (_num(raw.get(k, d), k, origin, int) for k, d in zip(
        ("blocks", "racks", "nodes"), DEFAULT_SHAPE, strict=True))
    spec = ClusterSpec(str(raw.get("machine", DEFAULT_MACHINE)), blocks, racks, nodes,
                       cliques=str(raw.get("cliques", "none")), hierarchy=raw.get("hierarchy"))
    if min(spec.blocks, spec.racks, spec.nodes) < 1:
        raise SimulationError(f"{origin}: blocks, racks and nodes must be >= 1")
    check_most(spec.size, "blocks x racks x nodes", MAX_NODES, origin)
    if spec.cliques not in CLIQUES:
        raise SimulationError(f"{origin}: cliques must be {' or '.join(CLIQUES)}")
    spec.resolved_hierarchy()
    return spec


def from_document(doc: Any, origin: str) -> MultiWorkload:
    """A multi-node workload from a parsed file.

    Raises:
        SimulationError: a malformed document (one line, naming the job or field).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list) or not doc["jobs"]:
        raise SimulationError(f"{origin}: a workload file needs a non-empty 'jobs' list")
    unknown = sorted(set(doc) - {"name", "description", "params", "cluster", "jobs"})
    if unknown:
        raise SimulationError(f"{origin}: unknown workload field(s) {', '.join(unknown)}")
    return _finish(MultiWorkload(
        str(doc.get("name") or Path(origin).stem),
        tuple(_job(r, i) for i, r in enumerate(doc["jobs"])), _cluster(doc.get("cluster"),
                                                                         origin),
        str(doc.get("description", "")), params_field(doc, origin)))


def _finish(w: MultiWorkload) -> MultiWorkload:
    ids = [j.id for j in w.jobs]
    if len(set(ids)) != len(ids):
        raise SimulationError(f"{w.name}: duplicate job ids")
    return replace(w, jobs=tuple(sorted(w.jobs, key=lambda j: (j.arrival_s, id_key(j.id)))))


def _read(path: Path) -> Any:
    try:
        text = read_utf8(path)
    except OSError as exc:
        raise SimulationError(f"cannot read workload file {path}: {exc.strerror}") from None
    try:
        return load_yaml(text) if path.suffix.lower() in (".yaml", ".yml") else \
            load_json(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SimulationError(f"workload file {path} is malformed: {first}") from None


def is_multinode_document(doc: Any) -> bool:
    """A document describes a multi-node workload: its cluster has racks, or a job has pods."""
    if not isinstance(doc, dict):
        return False
    cluster = doc.get("cluster")
    if isinstance(cluster, dict) and ("racks" in cluster or "blocks" in cluster):
        return True
    jobs = doc.get("jobs")
    return isinstance(jobs, list) and any(isinstance(j, dict) and "pods" in j for j in jobs)


def is_multinode_spec(spec: str) -> bool:
    """Whether a ``--workload`` spec names a multi-node workload."""
    name = spec.strip().partition(":")[0].strip().lower()
    if name in GENERATORS:
        return True
    path = Path(spec.strip()).expanduser()
    if path_is_file(path) and path.suffix.lower() in (".json", ".yaml", ".yml"):
        try:
            return is_multinode_document(_read(path))
        except SimulationError:
            return False
    return False


def load_multinode_workload(spec: str, *, seed: int = 0) -> MultiWorkload:
    """Resolve a spec (module docstring).

    Raises:
        SimulationError: unknown name, bad parameter, unreadable or malformed file.
    """
    name, _, rest = spec.strip().partition(":")
    if name.strip().lower() not in GENERATORS:
        path = Path(spec.strip()).expanduser()
        if not path_is_file(path):
            raise SimulationError(f"workload file not found: {spec}")
        return from_document(_read(path), str(path))
    params = _params(rest)

    def take(k: str, default: Any, kind: type) -> Any:
        return _num(params.pop(k), k, "hierarchy", kind) if k in params else default

    w = hierarchy_workload(
        jobs=take("jobs", 300, int), seed=seed, rate=take("rate", 6.0, float),
        gangs=take("gangs", 0.4, float), machine=params.pop("machine", DEFAULT_MACHINE),
        blocks=take("blocks", DEFAULT_SHAPE[0], int), racks=take("racks", DEFAULT_SHAPE[1], int),
        nodes=take("nodes", DEFAULT_SHAPE[2], int), cliques=params.pop("cliques", "none"),
        max_pods=take("max_pods", GANG_PODS[1], int))
    if params:
        raise SimulationError(f"unknown parameter(s) for hierarchy: {', '.join(sorted(params))}")
    return w
