"""The gputopo contract: resource names, annotation keys, and the assignment they encode.

This is what the two programs agree on, so it lives in the core that both import and neither
owns (an import-linter contract keeps ``device_plugin`` and ``scheduler_extender`` from
importing each other):

* the device plugin advertises :data:`RESOURCE_GPU`, :data:`RESOURCE_VGPU_CORE`,
  :data:`RESOURCE_VGPU_MEMORY` and :data:`RESOURCE_GPU_SHARED` (co-location slots), and
  publishes the node's topology in :data:`ANN_TOPOLOGY`
  (the document's schema and its parsing are :mod:`topology.serialization`: ``dumps`` on the
  node, ``loads`` in the extender, versioned ``gputopo.io/v1``);
* the extender reads the pod's input annotations (:data:`ANN_PATTERN` …), and its bind writes
  :func:`assignment_annotations`;
* the device plugin's Allocate reads them back with :func:`parse_assignment`;
* the device plugin publishes its kubelet's NUMA-alignment settings in the labels
  :data:`LABEL_TOPOLOGY_MANAGER_POLICY` … (read and written by
  :func:`topology.numa_alignment.kubelet_config_from_labels` /
  :func:`~topology.numa_alignment.kubelet_config_labels`), so the extender can choose GPUs the
  kubelet's Topology Manager will accept (docs/cpu-pinning.md).

Pure: no Kubernetes client, no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from topology.colocation.model import DEFAULT_SLOTS
from topology.colocation.profile import JobProfile, ProfileError
from topology.policies.base import (
    Decision,
    GPUUsage,
    NodeState,
    Resident,
    add_grant,
    add_resident,
)
from topology.text import decimal_int

# --- resources --------------------------------------------------------------------------
RESOURCE_GPU = "nvidia.com/gpu"  # whole GPUs
RESOURCE_VGPU_CORE = "gputopo.io/vgpu-core"  # percent of one GPU's compute (100 = whole)
RESOURCE_VGPU_MEMORY = "gputopo.io/vgpu-memory"  # GPU memory, MiB
#: One co-location slot on one physical GPU (Tabrizian: a job sharing the GPU under MPS with
#: the jobs the extender's co-location policy chose). A pod asks for exactly 1, optionally with
#: ``gputopo.io/vgpu-memory`` units to reserve (and MPS-limit) its GPU memory.
RESOURCE_GPU_SHARED = "gputopo.io/gpu-shared"
MANAGED_RESOURCES = (RESOURCE_GPU, RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY, RESOURCE_GPU_SHARED)

#: MiB per ``gputopo.io/vgpu-memory`` unit. The kubelet hands out one device per requested
#: unit, and one device per MiB would list ~130,000 devices on a DGX-1 (over the kubelet's
#: 4 MiB gRPC message limit), so a pod asks for memory in units of 256 MiB: ``16`` = 4 GiB.
#: The device plugin publishes its unit on the Node (:data:`ANN_VGPU_MEMORY_UNIT`); the
#: extender converts units to MiB and rejects nodes whose unit differs from its own.
DEFAULT_VGPU_MEMORY_UNIT_MIB = 256

# --- inputs (pod annotations) -------------------------------------------------------------
PREFIX = "gputopo.io/"
ANN_PATTERN = PREFIX + "pattern"
ANN_BW_SENSITIVE = PREFIX + "bandwidth-sensitive"
ANN_POLICY = PREFIX + "policy"
ANN_MIN_UTILITY = PREFIX + "min-utility"
#: Co-location inputs (Tabrizian §4.2; :mod:`topology.colocation.sources`): C (Eq. 4.3) and M
#: (Eq. 4.2) in percent·µs over two iterations, a profile key ``<model>:<batch>``, and the
#: job's solo iteration time in ms (with explicit C/M).
ANN_KERNEL_OCCUPANCY = PREFIX + "kernel-occupancy"
ANN_MEM_BANDWIDTH_UTIL = PREFIX + "mem-bandwidth-util"
ANN_PROFILE = PREFIX + "profile"
ANN_ITERATION_MS = PREFIX + "iteration-time-ms"

# --- node ---------------------------------------------------------------------------------
ANN_TOPOLOGY = PREFIX + "topology"
ANN_VGPU_MEMORY_UNIT = PREFIX + "vgpu-memory-unit-mib"  # MiB per vgpu-memory unit
#: Co-location slots per GPU the node's device plugin advertises (gpu-shared devices per GPU).
ANN_GPU_SHARED_SLOTS = PREFIX + "gpu-shared-slots"
#: Indices of the node's GPUs its device plugin reports unhealthy (critical XID, failed NVML
#: query; comma-separated, empty when all are healthy). The extender never hands them out.
ANN_UNHEALTHY_GPUS = PREFIX + "unhealthy-gpus"
LABEL_GPU_MODEL = PREFIX + "gpu-model"
LABEL_TOPOLOGY_CLASS = PREFIX + "topology-class"
#: The node's kubelet settings that decide NUMA alignment (KubeletConfiguration fields of the
#: same names; values as the kubelet spells them). No policy label = the kubelet's default,
#: ``none``: the extender then leaves NUMA alignment alone.
LABEL_TOPOLOGY_MANAGER_POLICY = PREFIX + "topology-manager-policy"  # none|best-effort|...
LABEL_TOPOLOGY_MANAGER_SCOPE = PREFIX + "topology-manager-scope"  # container|pod
LABEL_CPU_MANAGER_POLICY = PREFIX + "cpu-manager-policy"  # none|static
#: ``"true"`` when the Topology Manager option ``prefer-closest-numa-nodes`` is on.
LABEL_TOPOLOGY_MANAGER_PREFER_CLOSEST = PREFIX + "topology-manager-prefer-closest-numa"
KUBELET_CONFIG_LABELS = (
    LABEL_TOPOLOGY_MANAGER_POLICY, LABEL_TOPOLOGY_MANAGER_SCOPE, LABEL_CPU_MANAGER_POLICY,
    LABEL_TOPOLOGY_MANAGER_PREFER_CLOSEST,
)  # fmt: skip

# --- the planner (batch/v1 Jobs; docs/planner.md) -------------------------------------------
LABEL_QUEUE = PREFIX + "queue"  # Job label: the planner manages this Job (value: a queue name)
ANN_DUE_DATE = PREFIX + "due-date"  # Job, RFC 3339
ANN_TARDINESS_WEIGHT = PREFIX + "tardiness-weight"  # Job, EUR per hour late
ANN_JOB_PROFILE = PREFIX + "job-profile"  # Job, key into the profiles document
ANN_EPOCHS = PREFIX + "epochs"  # Job, epochs to train
ANN_EPOCHS_DONE = PREFIX + "epochs-done"  # Job, updated by the job (or a sidecar)
ANN_EPOCH_TIME = PREFIX + "epoch-time-s"  # Job, JSON {"<gpu_model>:<gpus>": seconds}
ANN_PLAN = PREFIX + "plan"  # Job, output: the planner's decision (JSON)
ANN_PLANNED_NODE = PREFIX + "planned-node"  # pod (from the Job's template): the extender's
#                                             filter keeps only this node
#: Gangs (Indexed Jobs, parallelism = completions; docs/planner.md): the level label the whole
#: gang must stay inside, or should (Kueue's podset-required/-preferred-topology), on the Job
#: or its pod template; and, written by the planner on the template, the node of each
#: completion index (``0=node-a,1=node-a,2=node-b``) — the extender keeps pod *i* on its node.
ANN_TOPOLOGY_REQUIRED = PREFIX + "topology-required"
ANN_TOPOLOGY_PREFERRED = PREFIX + "topology-preferred"
ANN_PLANNED_NODES = PREFIX + "planned-nodes"
#: Job: a gang's priority (an integer, default 0): a waiting gang may preempt running gangs
#: of lower priority, whole.
ANN_PRIORITY = PREFIX + "priority"
#: The Job controller's annotation (and label) of an Indexed Job's pod: its completion index.
ANN_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

# --- the cluster's topology hierarchy and network (topology/hierarchy.py, network.py) -------
#: Node labels naming a node's block and rack (the default levels; any labels can be levels).
LABEL_BLOCK = "topology.gputopo.io/block"
LABEL_RACK = "topology.gputopo.io/rack"
#: NVIDIA GPU feature discovery's NVLink-domain label (GB200 NVL72: 18 trays share one).
LABEL_CLIQUE = "nvidia.com/gpu.clique"
LABEL_HOSTNAME = "kubernetes.io/hostname"
#: Node annotation: the node's compute NICs and each GPU's PCIe path to them (JSON, schema
#: gputopo.io/v1: topology.network.dumps).
ANN_NETWORK = PREFIX + "network"
#: Node labels read when no network annotation is published: NIC count and Gb/s per NIC.
LABEL_NIC_COUNT = PREFIX + "nic-count"
LABEL_NIC_GBITS = PREFIX + "nic-gbits"

# --- outputs (pod annotations written by bind) ---------------------------------------------
ANN_NODE = PREFIX + "node"
ANN_GPU_INDICES = PREFIX + "gpu-indices"
ANN_GPU_UUIDS = PREFIX + "gpu-uuids"
ANN_CUDA_VISIBLE_DEVICES = PREFIX + "cuda-visible-devices"
ANN_CPU_AFFINITY = PREFIX + "cpu-affinity"
ANN_NUMA_NODES = PREFIX + "numa-nodes"
ANN_EFFBW = PREFIX + "effective-bandwidth-gbps"
ANN_POLICY_USED = PREFIX + "decided-by"
ANN_VGPU_CORE = PREFIX + "vgpu-core-granted"  # percent, fractional assignments only
ANN_VGPU_MEMORY = PREFIX + "vgpu-memory-granted"  # MiB, fractional and shared assignments
#: A co-location slot's record (JSON, :func:`colocation_annotation`): the job's profile and
#: the set it joined — what the extender rebuilds the GPU's residents from after a restart.
ANN_COLOCATION = PREFIX + "colocation"

OUTPUT_ANNOTATIONS = (
    ANN_NODE, ANN_GPU_INDICES, ANN_GPU_UUIDS, ANN_CUDA_VISIBLE_DEVICES, ANN_CPU_AFFINITY,
    ANN_NUMA_NODES, ANN_EFFBW, ANN_POLICY_USED, ANN_VGPU_CORE, ANN_VGPU_MEMORY, ANN_COLOCATION,
)  # fmt: skip


class AssignmentError(ValueError):
    """A pod's output annotations are missing, garbled or inconsistent."""


@dataclass(frozen=True)
class Assignment:
    """The GPUs a pod was given, as read back from its annotations.

    Attributes:
        node: node name the decision was made for.
        gpu_indices: GPU indices on that node.
        gpu_uuids: their UUIDs (same order).
        cpu_affinity: cpulist near the GPUs ("" when unknown).
        numa_nodes: NUMA nodes of the GPUs.
        effective_bandwidth_gbps: predicted EffBW, GB/s.
        core_percent: vGPU-core granted (percent of the GPU) for fractional pods, else 0.
        memory_mib: GPU memory granted (MiB) for fractional pods and the memory reserved
            for a co-location slot, else 0.
        colocation: for a co-location slot (:data:`ANN_COLOCATION`), the job's name and
            profile, else None.
    """

    node: str
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    cpu_affinity: str
    numa_nodes: tuple[int, ...]
    effective_bandwidth_gbps: float
    core_percent: int = 0
    memory_mib: int = 0
    colocation: Resident | None = None

    @property
    def shared(self) -> bool:
        """A co-location slot on one GPU (``gputopo.io/gpu-shared``)."""
        return self.colocation is not None

    @property
    def fractional(self) -> bool:
        """A vGPU share of one GPU rather than whole GPUs or a co-location slot."""
        return not self.shared and (self.core_percent > 0 or self.memory_mib > 0)


def assignment_annotations(decision: Decision, node: str) -> dict[str, str]:
    """The pod annotations bind writes for ``decision`` on ``node`` (all values strings)."""
    ann = {
        ANN_NODE: node,
        ANN_GPU_INDICES: ",".join(str(i) for i in decision.gpus),
        ANN_GPU_UUIDS: ",".join(decision.uuids),
        ANN_CUDA_VISIBLE_DEVICES: ",".join(decision.uuids),
        ANN_CPU_AFFINITY: decision.cpu_affinity,
        ANN_NUMA_NODES: ",".join(str(n) for n in decision.numa_nodes),
        ANN_EFFBW: f"{decision.effective_bandwidth_gbps:.1f}",
        ANN_POLICY_USED: decision.policy,
    }
    if decision.fractional:
        ann[ANN_VGPU_CORE] = str(decision.core_percent)
        ann[ANN_VGPU_MEMORY] = str(decision.memory_mib)
    if decision.colocation is not None:
        ann[ANN_VGPU_MEMORY] = str(decision.colocation.memory_mib)
        ann[ANN_COLOCATION] = colocation_annotation(decision)
    return ann


def colocation_annotation(decision: Decision) -> str:
    """The :data:`ANN_COLOCATION` value of a co-location decision (compact JSON): the job
    (``job``), its profile (``profile`` key, ``iteration_s``, ``kernel_occupancy``,
    ``mem_bandwidth_util``, ``profile_source``), and, informatively, the set it joined
    (``residents``, ``sum_c``, ``delta``).

    Raises:
        ValueError: ``decision`` is not a co-location decision.
    """
    c = decision.colocation
    if c is None:
        raise ValueError("not a co-location decision")
    p = c.profile
    doc = {
        "job": c.job,
        "profile": p.key,
        "profile_source": p.source,
        "iteration_s": p.iteration_s,
        "kernel_occupancy": p.kernel_occupancy,
        "mem_bandwidth_util": p.mem_bandwidth_util,
        "residents": list(c.chosen.residents),
        "sum_c": round(c.chosen.sum_c, 1),
        "delta": round(c.chosen.delta, 4),
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def _parse_colocation(text: str, memory_mib: int) -> Resident:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        raise AssignmentError(f"annotation {ANN_COLOCATION} is not JSON") from None
    if not isinstance(doc, dict):
        raise AssignmentError(f"annotation {ANN_COLOCATION} is not a JSON object")
    try:
        numbers = [float(doc[k]) for k in ("iteration_s", "kernel_occupancy",
                                           "mem_bandwidth_util")]
    except (KeyError, TypeError, ValueError):
        raise AssignmentError(
            f"annotation {ANN_COLOCATION} lacks a numeric iteration_s, kernel_occupancy or "
            "mem_bandwidth_util"
        ) from None
    if not all(math.isfinite(v) for v in numbers):
        raise AssignmentError(f"annotation {ANN_COLOCATION} has a non-finite number")
    key = doc.get("profile")
    try:
        profile = JobProfile(numbers[0], numbers[1], numbers[2], memory_mib,
                             key=str(key) if key else None,
                             source=str(doc.get("profile_source") or "annotation"))
    except ProfileError as exc:
        raise AssignmentError(f"annotation {ANN_COLOCATION}: {exc}") from None
    return Resident(str(doc.get("job") or ""), profile, memory_mib)


def node_state_of(
    assignments: Iterable[Assignment], unhealthy: frozenset[int] = frozenset(),
    slots: int = DEFAULT_SLOTS,
) -> NodeState:
    """The used GPUs these assignments (of pods on one node) add up to — what the extender
    rebuilds from the annotations after a restart (whole GPUs taken entirely; shares summed:
    :func:`topology.policies.base.add_grant`; co-location slots added as residents:
    :func:`topology.policies.base.add_resident`, recorded as found even beyond ``slots``)."""
    usage: dict[int, GPUUsage] = {}
    for a in assignments:
        if a.colocation is not None:
            add_resident(usage, a.gpu_indices[0], a.colocation, slots=None)
        else:
            add_grant(usage, a.gpu_indices, fractional=a.fractional,
                      core_percent=a.core_percent, memory_mib=a.memory_mib)
    return NodeState(usage, unhealthy, slots)


def has_assignment(annotations: Mapping[str, str] | None) -> bool:
    """True when the pod carries gputopo's output annotations (it was bound by gputopo)."""
    return bool(annotations) and ANN_GPU_UUIDS in annotations  # type: ignore[operator]


def _ints(text: str, key: str) -> tuple[int, ...]:
    if text.strip() == "":
        return ()
    try:
        return tuple(int(p) for p in text.split(","))
    except ValueError:
        raise AssignmentError(
            f"annotation {key}={text!r} is not a comma-separated list of integers"
        ) from None


def parse_assignment(annotations: Mapping[str, str] | None) -> Assignment:
    """Read an :class:`Assignment` back from pod annotations.

    Raises:
        AssignmentError: a required key is missing, a value does not parse, or indices,
            UUIDs and CUDA_VISIBLE_DEVICES disagree (the message names the key).
    """
    ann = annotations or {}
    for key in (ANN_NODE, ANN_GPU_INDICES, ANN_GPU_UUIDS):
        if key not in ann:
            raise AssignmentError(f"missing annotation {key}")
    indices = _ints(ann[ANN_GPU_INDICES], ANN_GPU_INDICES)
    uuids = tuple(u for u in ann[ANN_GPU_UUIDS].split(",") if u)
    if not indices or len(indices) != len(uuids):
        raise AssignmentError(
            f"{ANN_GPU_INDICES} has {len(indices)} entries but {ANN_GPU_UUIDS} has {len(uuids)}"
        )
    if len(set(uuids)) != len(uuids) or len(set(indices)) != len(indices):
        raise AssignmentError("the same GPU is listed twice in the assignment")
    cvd = ann.get(ANN_CUDA_VISIBLE_DEVICES)
    if cvd is not None and tuple(cvd.split(",")) != uuids:
        raise AssignmentError(f"{ANN_CUDA_VISIBLE_DEVICES} disagrees with {ANN_GPU_UUIDS}")
    try:
        effbw = float(ann.get(ANN_EFFBW, "0") or 0)
        core = int(ann.get(ANN_VGPU_CORE, "0") or 0)
        mem = int(ann.get(ANN_VGPU_MEMORY, "0") or 0)
    except ValueError:
        raise AssignmentError("a numeric gputopo annotation does not parse") from None
    if (core or mem) and len(indices) != 1:
        raise AssignmentError("a fractional assignment must name exactly one GPU")
    colocation = None
    if ANN_COLOCATION in ann:
        if len(indices) != 1 or core:
            raise AssignmentError("a co-location slot must name exactly one GPU and no "
                                  "vGPU-core")
        colocation = _parse_colocation(ann[ANN_COLOCATION], mem)
    return Assignment(
        node=ann[ANN_NODE],
        gpu_indices=indices,
        gpu_uuids=uuids,
        cpu_affinity=ann.get(ANN_CPU_AFFINITY, ""),
        numa_nodes=_ints(ann.get(ANN_NUMA_NODES, ""), ANN_NUMA_NODES),
        effective_bandwidth_gbps=effbw,
        core_percent=core,
        memory_mib=mem,
        colocation=colocation,
    )


def parse_gpu_indices(text: str) -> frozenset[int]:
    """GPU indices from a comma-separated list such as ``"0,3"`` (the format of
    :data:`ANN_UNHEALTHY_GPUS`); blank = none.

    Raises:
        AssignmentError: an item is not a non-negative integer.
    """
    out: set[int] = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        index = decimal_int(item)
        if index is None:
            raise AssignmentError(f"{item!r} is not a GPU index")
        out.add(index)
    return frozenset(out)


def format_planned_nodes(nodes: Iterable[str]) -> str:
    """The ``gputopo.io/planned-nodes`` value for pods ``0, 1, …`` on ``nodes`` (in index
    order): ``0=node-a,1=node-a,2=node-b``."""
    return ",".join(f"{i}={n}" for i, n in enumerate(nodes))


def parse_planned_nodes(text: str) -> dict[int, str]:
    """Completion index → node of a ``gputopo.io/planned-nodes`` value.

    Raises:
        ValueError: not ``index=node`` pairs, a negative or repeated index, an empty node.
    """
    out: dict[int, str] = {}
    for item in text.split(","):
        index, sep, node = item.strip().partition("=")
        try:
            i = int(index)
        except ValueError:
            raise ValueError(f"{ANN_PLANNED_NODES}: {item.strip()!r} is not index=node") from None
        if not sep or not node.strip() or i < 0 or i in out:
            raise ValueError(f"{ANN_PLANNED_NODES}: {item.strip()!r} is not index=node "
                             "(a new index >= 0 and a node)")
        out[i] = node.strip()
    return out
