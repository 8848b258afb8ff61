"""Turn a ``v1.Pod`` (as a JSON dict) into a placement :class:`Request` — pure, no I/O.

Resources (names from :mod:`topology.contract`):

* ``nvidia.com/gpu`` — whole GPUs.
* ``gputopo.io/vgpu-core`` — percent of one GPU's compute (1–100).
* ``gputopo.io/vgpu-memory`` — GPU memory in units of ``memory_unit_mib`` MiB (default
  256: ``16`` = 4 GiB; see :data:`topology.contract.DEFAULT_VGPU_MEMORY_UNIT_MIB`),
  converted to MiB in the request.
* ``gputopo.io/gpu-shared`` — one co-location slot on one GPU (exactly 1; Tabrizian
  co-location), optionally with ``gputopo.io/vgpu-memory`` for the GPU memory it reserves.
  Its profile comes from the co-location annotations below
  (:func:`topology.colocation.sources.resolve_profile`).

Per container the *limit* wins over the request (extended resources must have equal request
and limit; when only one is set that one counts). The pod's demand is the larger of the sum
over regular containers (plus restartable "sidecar" init containers, which run alongside) and
the largest single init container (plus the sidecars started before it) — the kubelet's
effective-request rule.

Quantities are Kubernetes quantities that denote whole numbers: ``"2"``, and the canonical
forms the API server writes (``"8k"`` for 8000, ``"1Ki"``, ``"2e3"``). Fractions (``"0.5"``,
``"500m"``) and negatives are rejected with a message naming the resource and the container.

Annotations (all optional):

* ``gputopo.io/pattern`` — ``ring`` / ``tree`` / ``all-to-all`` / ``pair`` or an edge list
  (:func:`topology.patterns.parse_pattern`); default all-to-all.
* ``gputopo.io/bandwidth-sensitive`` — ``true`` / ``false`` (any case); default: true for
  multi-GPU pods.
* ``gputopo.io/policy`` — a registered policy name; default: the extender's.
* ``gputopo.io/min-utility`` — a number in [0, 1]: with ``topo-aware-p`` the pod stays
  Pending while the best placement's utility is below it (Amaral et al. SC'17 §4).
* ``gputopo.io/planned-node`` — the node the gputopo planner resumed the pod's Job on: every
  other node fails filter (unresolvably) and bind refuses them.
* ``gputopo.io/profile`` (``<model>:<batch>``), ``gputopo.io/kernel-occupancy`` (C, Eq. 4.3),
  ``gputopo.io/mem-bandwidth-util`` (M, Eq. 4.2), ``gputopo.io/iteration-time-ms`` — a shared
  pod's co-location profile (Tabrizian §4.2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

from scheduler_extender.profiles import ColocationInputs
from topology.colocation.profile import ProfileError, builtin_catalog
from topology.colocation.sources import resolve_profile
from topology.contract import (
    ANN_BW_SENSITIVE,
    ANN_COMPLETION_INDEX,
    ANN_MIN_UTILITY,
    ANN_PATTERN,
    ANN_PLANNED_NODE,
    ANN_PLANNED_NODES,
    ANN_POLICY,
    DEFAULT_VGPU_MEMORY_UNIT_MIB,
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
    parse_planned_nodes,
)
from topology.numa_alignment import PodDemand
from topology.patterns import PatternError, parse_pattern
from topology.policies.base import FULL_CORE, Request, RequestError, SharedRequest
from topology.policies.registry import UnknownPolicy, get_policy

_RESOURCES = (RESOURCE_GPU, RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY, RESOURCE_GPU_SHARED)


#: Most GPUs a node can have (the topology annotation schema's limit).
MAX_GPUS = 256


class PodSpecError(ValueError):
    """The pod's gputopo resources or annotations are invalid; ``str(exc)`` says why."""


@dataclass(frozen=True)
class PodRequest:
    """What the extender needs to know about a pod.

    Attributes:
        request: the placement request.
        policy: the policy named by ``gputopo.io/policy`` (validated), or None for the
            extender's default.
        required_node: the node the gputopo planner placed the pod's Job on
            (``gputopo.io/planned-node``), or None: any node.
        demand: what the kubelet's Topology Manager reads from the pod besides its GPUs
            (:func:`pod_demand`: Guaranteed CPUs, containers asking GPUs).
        nominated: kube-scheduler has nominated a node for the pod
            (``status.nominatedNodeName``, :func:`nominated_node_of`): it preempted pods
            there, or (``NominatedNodeNameForExpectation``, on since 1.35) a binding cycle
            that waits on PreBind or Permit already took it there. Either way it is placed,
            not left waiting for a better set.
    """

    request: Request
    policy: str | None = None
    required_node: str | None = None
    demand: PodDemand = PodDemand()
    nominated: bool = False

    @property
    def may_wait(self) -> bool:
        """Whether the default policy's bounded postponement (issue 24) may make this pod
        wait for a better set: not when the planner placed it (``required_node``), and not
        when pods were evicted for it (``nominated``) — a preemptor that waits on a node
        whose freed GPUs its threshold finds poor holds them idle and, the scheduler's own
        filters seeing room there, can never preempt again (``SelectVictimsOnNode`` finds
        no victim)."""
        return self.required_node is None and not self.nominated


_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip
_QUANTITY = re.compile(
    r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"  # number
    r"(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m|u|n)?)$"  # exponent or suffix
)


@lru_cache(maxsize=4096)
def _parse_quantity(text: str) -> Fraction | None:
    """A Kubernetes quantity string (``"2"``, ``"1.5Gi"``, ``"500m"``, ``"1e3"``) as an exact
    number, or None when it is not one (a sign is not accepted).

    Cached by text (a ``Fraction`` is immutable): every pod's quantities are parsed on each
    filter, and a cluster's pods repeat a handful of them ("1", "4Gi", "25"); the regular
    expression and ``Fraction`` arithmetic were a third of a 100-node filter's time."""
    m = _QUANTITY.match(text.strip())
    if m is None:
        return None
    number, exponent, suffix = m.groups()
    n = Fraction(number)
    if exponent:
        n *= Fraction(10) ** int(exponent[1:])
    elif suffix in ("m", "u", "n"):
        n /= {"m": 10**3, "u": 10**6, "n": 10**9}[suffix]
    else:
        n *= _SUFFIX[suffix or ""]
    return n


def _quantity(value: object, resource: str, where: str) -> int:
    """A resource quantity that must be a whole, non-negative number.

    Raises:
        PodSpecError: not a quantity, a fraction, or negative (names resource and place).
    """
    if isinstance(value, bool):
        raise PodSpecError(f"{where}: {resource} quantity {value!r} is not an integer")
    n = Fraction(value) if isinstance(value, int) else (
        _parse_quantity(value) if isinstance(value, str) else None)
    if n is None:
        if isinstance(value, str) and value.strip().startswith("-"):
            raise PodSpecError(f"{where}: {resource} quantity {value!r} is negative")
        raise PodSpecError(f"{where}: {resource} quantity {value!r} is not a quantity")
    if n < 0:
        raise PodSpecError(f"{where}: {resource} quantity {value!r} is negative")
    if n.denominator != 1:
        raise PodSpecError(
            f"{where}: {resource} quantity {value!r} is not a whole number "
            f"(a GPU share is asked for with {RESOURCE_VGPU_CORE}, in percent)"
        )
    return int(n)


def _container_demand(container: object, kind: str, index: int) -> dict[str, int]:
    if not isinstance(container, Mapping):
        raise PodSpecError(f"{kind}[{index}] is not an object")
    name = container.get("name") or f"#{index}"
    where = f"{kind} {name!r}"
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise PodSpecError(f"{where}: resources is not an object")
    out: dict[str, int] = {}
    for section in ("requests", "limits"):  # limits last: they win
        values = resources.get(section) or {}
        if not isinstance(values, Mapping):
            raise PodSpecError(f"{where}: resources.{section} is not an object")
        for r in _RESOURCES:
            if r in values:
                out[r] = _quantity(values[r], r, where)
    return out


def _containers(spec: Mapping[str, Any], key: str) -> list[Any]:
    items = spec.get(key) or []
    if not isinstance(items, list):
        raise PodSpecError(f"spec.{key} is not a list")
    return items


def pod_resources(pod: Mapping[str, Any]) -> dict[str, int]:
    """The pod's effective demand of each gputopo resource (0 when not asked).

    Args:
        pod: a ``v1.Pod`` as a JSON dict.

    Raises:
        PodSpecError: a quantity is not a non-negative integer, or the spec is malformed.
    """
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise PodSpecError("pod has no spec")
    total = dict.fromkeys(_RESOURCES, 0)
    for i, c in enumerate(_containers(spec, "containers")):
        for r, n in _container_demand(c, "container", i).items():
            total[r] += n
    sidecars = dict.fromkeys(_RESOURCES, 0)
    init_peak = dict.fromkeys(_RESOURCES, 0)
    for i, c in enumerate(_containers(spec, "initContainers")):
        demand = _container_demand(c, "init container", i)
        restartable = isinstance(c, Mapping) and c.get("restartPolicy") == "Always"
        for r in _RESOURCES:
            init_peak[r] = max(init_peak[r], sidecars[r] + demand.get(r, 0))
            if restartable:
                sidecars[r] += demand.get(r, 0)
    return {r: max(total[r] + sidecars[r], init_peak[r]) for r in _RESOURCES}


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise PodSpecError("pod metadata is not an object")
    ann = meta.get("annotations") or {}
    if not isinstance(ann, Mapping):
        raise PodSpecError("pod metadata.annotations is not an object")
    return ann


def _bool_annotation(ann: Mapping[str, Any], key: str) -> bool | None:
    if key not in ann:
        return None
    raw = ann[key]
    text = raw.strip().lower() if isinstance(raw, str) else None
    if text == "true":
        return True
    if text == "false":
        return False
    raise PodSpecError(f"annotation {key}={raw!r} must be \"true\" or \"false\"")


def policy_from_pod(pod: Mapping[str, Any]) -> str | None:
    """The policy named by the ``gputopo.io/policy`` annotation, or None.

    Raises:
        PodSpecError: the annotation names no registered policy (the message lists them).
    """
    ann = _annotations(pod)
    if ANN_POLICY not in ann:
        return None
    name = ann[ANN_POLICY]
    if not isinstance(name, str):
        raise PodSpecError(f"annotation {ANN_POLICY} must be a string")
    try:
        get_policy(name.strip())
    except UnknownPolicy as exc:
        raise PodSpecError(f"annotation {ANN_POLICY}: {exc}") from None
    return name.strip()


def _shared_request(pod: Mapping[str, Any], ann: Mapping[str, Any], slots: int, mem_mib: int,
                    colocation: ColocationInputs | None) -> Request:
    if slots != 1:
        raise PodSpecError(
            f"{RESOURCE_GPU_SHARED}: {slots} asked; a pod takes exactly one co-location slot"
        )
    inputs = colocation or ColocationInputs(builtin_catalog())
    text = {str(k): v for k, v in ann.items() if isinstance(v, str)}
    try:
        profile = resolve_profile(text, catalog=inputs.catalog, user=inputs.user,
                                  measured=inputs.measured,
                                  memory_request_mib=mem_mib or None,
                                  threshold=inputs.threshold)
    except ProfileError as exc:
        raise PodSpecError(str(exc)) from None
    ns, name, _uid = pod_identity(pod)
    try:
        return Request(count=1, shared=SharedRequest(
            profile, profile.gpu_memory_mib, name=f"{ns}/{name}", threshold=inputs.threshold))
    except RequestError as exc:
        raise PodSpecError(str(exc)) from None


def request_from_pod(
    pod: Mapping[str, Any], *, memory_unit_mib: int = DEFAULT_VGPU_MEMORY_UNIT_MIB,
    colocation: ColocationInputs | None = None, demand: Mapping[str, int] | None = None,
) -> Request | None:
    """The pod's placement request, or None when it asks for no gputopo resource.

    Args:
        pod: the ``v1.Pod`` as a JSON dict.
        memory_unit_mib: MiB per ``gputopo.io/vgpu-memory`` unit.
        colocation: the profile layers and threshold for ``gputopo.io/gpu-shared`` pods
            (None = the shipped catalog and the default threshold).
        demand: the pod's gputopo resources (``nvidia.com/gpu`` …, as :func:`pod_resources`
            returns them) when they come from elsewhere than its containers' limits — the
            DRA allocator passes what the pod's ResourceClaims ask; None = the containers'.

    Returns:
        ``Request(count=n, pattern, bandwidth_sensitive)`` for ``nvidia.com/gpu: n``;
        ``Request(count=0, core_percent, memory_mib)`` for a vGPU share (a share that names
        only memory gets no core limit: ``core_percent`` 0); ``Request(count=1, shared=…)``
        for a co-location slot (name ``namespace/name``); None when none is asked
        (pass-through).

    Raises:
        PodSpecError: non-integer quantities, whole and fractional GPUs in one pod,
            ``vgpu-core`` above 100, a bad pattern (unknown, malformed, or naming more GPUs
            than requested), a bad boolean annotation; for a co-location slot: more than
            one slot, whole GPUs or vGPU-core beside it, bad co-location annotations.
    """
    res = dict.fromkeys(_RESOURCES, 0)
    res.update(pod_resources(pod) if demand is None else demand)
    gpus, core, mem = res[RESOURCE_GPU], res[RESOURCE_VGPU_CORE], res[RESOURCE_VGPU_MEMORY]
    shared = res[RESOURCE_GPU_SHARED]
    if gpus == 0 and core == 0 and mem == 0 and shared == 0:
        return None
    ann = _annotations(pod)
    if shared:
        if gpus or core:
            raise PodSpecError(
                f"pod asks for a co-location slot ({RESOURCE_GPU_SHARED}: {shared}) and "
                f"{RESOURCE_GPU}: {gpus}, {RESOURCE_VGPU_CORE}: {core}; a shared pod asks for "
                f"one slot (and, optionally, {RESOURCE_VGPU_MEMORY} for its memory)"
            )
        return _shared_request(pod, ann, shared, mem * memory_unit_mib, colocation)
    if gpus and (core or mem):
        raise PodSpecError(
            f"pod asks for whole GPUs ({RESOURCE_GPU}: {gpus}) and a GPU share "
            f"({RESOURCE_VGPU_CORE}: {core}, {RESOURCE_VGPU_MEMORY}: {mem}); ask for one kind"
        )
    if core > FULL_CORE:
        raise PodSpecError(
            f"{RESOURCE_VGPU_CORE}: {core} is more than one GPU ({FULL_CORE}); "
            f"ask for whole GPUs with {RESOURCE_GPU} instead"
        )
    if gpus > MAX_GPUS:
        # no node has that many (the topology schema's limit); refuse before building
        # pattern graphs of that size
        raise PodSpecError(
            f"{RESOURCE_GPU}: {gpus} GPUs asked; no node has more than {MAX_GPUS}"
        )
    sensitive = _bool_annotation(ann, ANN_BW_SENSITIVE)
    min_utility = None
    if ANN_MIN_UTILITY in ann:
        raw = ann[ANN_MIN_UTILITY]
        try:
            min_utility = float(raw)
        except (TypeError, ValueError):
            raise PodSpecError(
                f"annotation {ANN_MIN_UTILITY}={raw!r} is not a number in [0, 1]"
            ) from None
        if not 0.0 <= min_utility <= 1.0:
            raise PodSpecError(f"annotation {ANN_MIN_UTILITY}={raw!r} is not in [0, 1]")
    pattern = None
    if ANN_PATTERN in ann:
        text = ann[ANN_PATTERN]
        if not isinstance(text, str):
            raise PodSpecError(f"annotation {ANN_PATTERN} must be a string")
        try:
            # a share runs on one GPU: only patterns that fit one GPU are accepted (no-op)
            pattern = parse_pattern(text, max(gpus, 1))
        except PatternError as exc:
            raise PodSpecError(f"annotation {ANN_PATTERN}: {exc}") from None
    try:
        if gpus:
            return Request(
                count=gpus,
                pattern=pattern,
                bandwidth_sensitive=sensitive,
                min_utility=min_utility,
            )
        return Request(
            count=0,
            core_percent=core,
            memory_mib=mem * memory_unit_mib,
            bandwidth_sensitive=sensitive,
            min_utility=min_utility,
        )
    except RequestError as exc:
        raise PodSpecError(str(exc)) from None


def parse_pod(
    pod: Mapping[str, Any], *, memory_unit_mib: int = DEFAULT_VGPU_MEMORY_UNIT_MIB,
    colocation: ColocationInputs | None = None, demand: Mapping[str, int] | None = None,
) -> PodRequest | None:
    """:func:`request_from_pod` and :func:`policy_from_pod` together (None = pass-through);
    ``demand`` as in :func:`request_from_pod`.

    Raises:
        PodSpecError: see both functions; also a co-location slot whose
            ``gputopo.io/policy`` does not place co-location slots.
    """
    request = request_from_pod(pod, memory_unit_mib=memory_unit_mib, colocation=colocation,
                               demand=demand)
    if request is None:
        return None
    policy = policy_from_pod(pod)
    if request.shared is not None and policy is not None and not get_policy(policy).colocation:
        from topology.policies.registry import colocation_policies

        raise PodSpecError(
            f"annotation {ANN_POLICY}: policy {policy!r} does not place co-location slots "
            f"({RESOURCE_GPU_SHARED}); use one of {', '.join(colocation_policies())}"
        )
    return PodRequest(request=request, policy=policy, required_node=planned_node_of(pod),
                      demand=pod_demand(pod), nominated=nominated_node_of(pod) is not None)


def nominated_node_of(pod: Mapping[str, Any]) -> str | None:
    """The node kube-scheduler nominated for the pod (``status.nominatedNodeName``: set when
    its preemption evicted pods there, and by a binding cycle that waits on PreBind or Permit,
    ``schedule_one.go`` ``bindingCycle``), or None. A value that is not a string or is empty
    counts as none: the field is the scheduler's, not the user's, and only tells whether the
    pod was placed once already."""
    status = pod.get("status")
    node = status.get("nominatedNodeName") if isinstance(status, Mapping) else None
    return node if isinstance(node, str) and node else None


def bound_node_of(pod: Mapping[str, Any]) -> str | None:
    """The node the pod is bound to (``spec.nodeName``, set by its Binding), or None: also
    for a ``spec`` or a value of the wrong type, or an empty name."""
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) and node else None


def choose_policy(preq: PodRequest, default: str, colocation_default: str) -> str:
    """The policy that decides ``preq``: the pod's own, else ``default`` — except that a
    co-location slot goes to ``colocation_default`` when ``default`` does not co-locate."""
    if preq.policy is not None:
        return preq.policy
    if preq.request.shared is not None and not get_policy(default).colocation:
        return colocation_default
    return default


#: A Kubernetes node name: a DNS-1123 subdomain.
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def planned_node_of(pod: Mapping[str, Any]) -> str | None:
    """The node the gputopo planner placed the pod on, or None: its
    ``gputopo.io/planned-node`` annotation (the planner copies it into the pod template of the
    Jobs it resumes), or, for a gang's pod, the entry of its completion index
    (``batch.kubernetes.io/job-completion-index``, set by the Job controller) in
    ``gputopo.io/planned-nodes``.

    Raises:
        PodSpecError: the value is not a node name, or a gang's pod has no index the planned
            nodes name.
    """
    meta = pod.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    if isinstance(ann, Mapping) and ANN_PLANNED_NODES in ann:
        try:
            nodes = parse_planned_nodes(str(ann[ANN_PLANNED_NODES]))
            index = int(str(ann.get(ANN_COMPLETION_INDEX, "")))
        except ValueError as exc:
            raise PodSpecError(f"a gang's pod needs {ANN_COMPLETION_INDEX} and a valid "
                               f"{ANN_PLANNED_NODES}: {exc}") from None
        if index not in nodes:
            raise PodSpecError(f"{ANN_PLANNED_NODES} names no node for completion index "
                               f"{index}")
        return _node_name(nodes[index], ANN_PLANNED_NODES)
    if not isinstance(ann, Mapping) or ANN_PLANNED_NODE not in ann:
        return None
    return _node_name(ann[ANN_PLANNED_NODE], ANN_PLANNED_NODE)


def _node_name(value: object, key: str) -> str:
    if not isinstance(value, str) or len(value) > 253 or not _NODE_NAME.fullmatch(value):
        raise PodSpecError(f"annotation {key}={value!r} is not a node name")
    return value
def _cpu_quantity(value: object) -> Fraction | None:
    """A CPU or memory quantity as an exact number (None when it does not parse: such a pod
    fails validation in the API server and never reaches the extender)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Fraction(value)
    return _parse_quantity(value) if isinstance(value, str) else None


def _section(container: Mapping[str, Any], section: str) -> Mapping[str, Any]:
    res = container.get("resources")
    values = res.get(section) if isinstance(res, Mapping) else None
    return values if isinstance(values, Mapping) else {}


def pod_qos(pod: Mapping[str, Any]) -> str:
    """The pod's QoS class as the kubelet reads it (``GetPodQOS``: ``status.qosClass`` when
    set, else ``ComputePodQOS``, k8s.io/kubernetes@v1.36.3 pkg/apis/core/v1/helper/qos):
    ``Guaranteed`` when every container (init and app) has positive CPU and memory limits and
    the summed CPU and memory requests equal the summed limits; ``BestEffort`` with no CPU or
    memory at all; else ``Burstable``. Pod-level ``spec.resources`` decide instead when set."""
    status = pod.get("status")
    qos = status.get("qosClass") if isinstance(status, Mapping) else None
    if isinstance(qos, str) and qos:
        return qos
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    pod_level = spec.get("resources")
    if isinstance(pod_level, Mapping) and (pod_level.get("requests") or pod_level.get("limits")):
        containers: list[Any] = [{"resources": pod_level}]
        per_container_limits = False
    else:
        containers = [c for key in ("containers", "initContainers")
                      for c in (spec.get(key) or []) if isinstance(c, Mapping)]
        per_container_limits = True
    for c in containers:
        for section, into in (("requests", requests), ("limits", limits)):
            found = set()
            for name in ("cpu", "memory"):
                q = _cpu_quantity(_section(c, section).get(name))
                if q is not None and q > 0:
                    into[name] = into.get(name, Fraction(0)) + q
                    found.add(name)
            if section == "limits" and found != {"cpu", "memory"} and (
                    per_container_limits or _section(c, "limits")):
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and all(limits.get(k) == v for k, v in requests.items()) and \
            len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"


def _guaranteed_cpus(container: Mapping[str, Any]) -> int:
    """``guaranteedCPUs`` of a container of a Guaranteed pod: its CPU request when whole
    (``isIntegralCPUAmount``), else 0."""
    q = _cpu_quantity(_section(container, "requests").get("cpu"))
    if q is None or q.denominator != 1:
        return 0
    return int(q)


def _asks_devices(container: Mapping[str, Any]) -> bool:
    for section in ("limits", "requests"):
        for r in _RESOURCES:
            q = _cpu_quantity(_section(container, section).get(r))
            if q is not None and q > 0:
                return True
    return False


def pod_demand(pod: Mapping[str, Any]) -> PodDemand:
    """What the kubelet's Topology Manager hint providers read from ``pod`` besides its GPUs
    (:class:`topology.numa_alignment.PodDemand`), as the static CPU manager computes it
    (k8s.io/kubernetes@v1.36.3 pkg/kubelet/cm/cpumanager/policy_static.go):

    * ``container_cpus``: ``guaranteedCPUs`` of the container that asks gputopo devices;
    * ``pod_cpus``: ``podGuaranteedCPUs``: the larger of the app containers plus restartable
      init containers and the largest init container (plus the sidecars before it);
    * ``device_containers``: containers (init and app) asking gputopo devices;
    * ``memory_units``: the pod's ``gputopo.io/vgpu-memory`` demand (:func:`pod_resources`).

    Both CPU counts are 0 unless the pod is Guaranteed (:func:`pod_qos`), and 0 for a pod with
    pod-level ``spec.resources`` (the CPU manager then has no preference unless the alpha
    ``PodLevelResourceManagers`` gate is on). Never raises: malformed parts count as 0.
    """
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return PodDemand(device_containers=0)
    try:
        memory = pod_resources(pod)[RESOURCE_VGPU_MEMORY]
    except PodSpecError:
        memory = 0
    inits = [c for c in (spec.get("initContainers") or []) if isinstance(c, Mapping)]
    apps = [c for c in (spec.get("containers") or []) if isinstance(c, Mapping)]
    devices = [c for c in inits + apps if _asks_devices(c)]
    pod_level = spec.get("resources")
    if pod_qos(pod) != "Guaranteed" or (
            isinstance(pod_level, Mapping) and (pod_level.get("requests")
                                                or pod_level.get("limits"))):
        return PodDemand(0, 0, len(devices), memory)
    container = _guaranteed_cpus(devices[0]) if devices else 0
    by_init = by_sidecars = 0
    for c in inits:
        if "cpu" not in _section(c, "requests"):
            continue
        n = _guaranteed_cpus(c)
        if c.get("restartPolicy") == "Always":
            by_sidecars += n
        elif by_sidecars + n > by_init:
            by_init = by_sidecars + n
    by_apps = sum(_guaranteed_cpus(c) for c in apps if "cpu" in _section(c, "requests"))
    return PodDemand(container, max(by_init, by_apps + by_sidecars), len(devices), memory)


def pod_identity(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(namespace, name, uid)`` of a pod dict; namespace defaults to ``default``.

    Raises:
        PodSpecError: metadata or its name is missing.
    """
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise PodSpecError("pod has no metadata.name")
    ns = meta.get("namespace") or "default"
    uid = meta.get("uid") or ""
    return str(ns), meta["name"], str(uid)
