"""What a pod's ResourceClaims ask of gputopo, and the ``status.allocation`` granting a
decision — pure: API objects are the ``resource.k8s.io/v1`` wire dicts, no client, no clock.

A claim is *gputopo's* when every request of it asks one of gputopo's DeviceClasses
(:data:`topology.dra.CLASS_KINDS`) with ``exactly`` (whole GPUs: ``count`` k; a vGPU share
or a co-location slot: ``count`` 1, with ``capacity.requests`` for ``compute`` percent and
``memory``). A claim none of whose requests names those classes belongs to other drivers and
is left to kube-scheduler. What the allocator cannot honour is refused with a
:class:`ClaimError` naming the claim, the request and the feature (never a silent placement
that ignores it): a claim mixing gputopo and other requests, ``firstAvailable`` lists naming
gputopo classes, ``allocationMode: All``, ``adminAccess``, CEL ``selectors`` and
``constraints`` on gputopo requests, capacity on whole GPUs, and mixing whole GPUs, shares
and slots in one pod (the device-plugin path's rule,
:func:`scheduler_extender.podspec.request_from_pod`).

A pod's gputopo requests, over all its claims still to allocate, form one placement request
(:func:`pod_demand` feeds :func:`scheduler_extender.podspec.parse_pod`): the policy places
the pod's whole GPUs together, with its ``gputopo.io/pattern``, and :func:`split` hands the
chosen set, in the pattern's arrangement, to the claims and requests in the pod's order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from topology.contract import (
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_VGPU_CORE,
    RESOURCE_VGPU_MEMORY,
)
from topology.dra import (
    CAP_COMPUTE,
    CAP_MEMORY,
    CAP_SLOTS,
    CLASS_KINDS,
    CLASS_SLOT,
    DRIVER,
    ClaimAllocation,
    DeviceKind,
    DRAContractError,
    allocation_results,
    claim_allocation,
    parse_quantity,
    quantity_mib,
)
from topology.policies.base import FULL_CORE

#: The scheduling gate gputopo's admission policy puts on pods with ResourceClaims; the
#: allocator removes it once the pod's gputopo claims are allocated (or it has none).
SCHEDULING_GATE = "gputopo.io/dra-allocation"
#: kube-scheduler's finalizer on the claims it allocates (``resourceapi.Finalizer``): while it
#: is set, the resourceclaim controller deallocates a claim whose last consumer is gone.
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
#: Annotation kube-scheduler puts on the claim it creates for a pod's extended resources
#: (KEP-5004, ``resourceapi.ExtendedResourceClaimAnnotation``).
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"


class ClaimError(ValueError):
    """A claim (or a pod's set of claims) asks what the allocator cannot honour; the message is
    one line naming the claim and what to change."""


@dataclass(frozen=True)
class DeviceTaint:
    """A NoSchedule or NoExecute taint on a device (``resource.k8s.io/v1`` ``DeviceTaint``;
    other effects never prevent an allocation)."""

    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


@dataclass(frozen=True)
class DeviceToleration:
    """One of a request's ``exactly.tolerations`` (``resource.k8s.io/v1``
    ``DeviceToleration``; ``tolerationSeconds`` only bounds a NoExecute eviction, never an
    allocation, so it is not kept)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


def tolerates(toleration: DeviceToleration, taint: DeviceTaint) -> bool:
    """Whether ``toleration`` tolerates ``taint``: upstream's rules exactly
    (k8s.io/dynamic-resource-allocation v0.36.3 ``resourceclaim/devicetoleration.go:35-56``,
    ``ToleratesTaint``): an empty effect matches every effect, else the effects must be equal;
    an empty key matches every key, else the keys must be equal; then ``Exists`` matches any
    value, ``Equal`` (or empty) needs the values equal, any other operator matches nothing."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return toleration.operator == "Exists"


def taint_prevents(taints: Iterable[DeviceTaint],
                   tolerations: Iterable[DeviceToleration]) -> DeviceTaint | None:
    """The first of a device's taints that ``tolerations`` do not tolerate (None: the device
    may be allocated to the request) — kube-scheduler's ``taintPreventsAllocation``
    (k8s.io/dynamic-resource-allocation v0.36.3
    ``structured/internal/incubating/allocator_incubating.go:1519-1530``, with
    ``taintTolerated`` at 1532-1539; checked at 1380 while DRADeviceTaints is on): only the
    NoSchedule and NoExecute effects count (:class:`DeviceTaint` holds no other)."""
    tols = tuple(tolerations)
    for taint in taints:
        if not any(tolerates(t, taint) for t in tols):
            return taint
    return None


@dataclass(frozen=True)
class RequestAsk:
    """One request of a gputopo claim.

    Attributes:
        name: the request's name (``status.allocation.devices.results[].request``).
        class_name: its DeviceClass.
        kind: whole GPUs, a share, or a slot.
        count: whole GPUs asked (1 for a share or a slot).
        core_percent: a share's compute, percent of one GPU (0: no compute limit).
        memory_mib: a share's or slot's memory, MiB (0: none asked).
        tolerations: its ``exactly.tolerations`` (device taints it tolerates).
    """

    name: str
    class_name: str
    kind: DeviceKind
    count: int
    core_percent: int = 0
    memory_mib: int = 0
    tolerations: tuple[DeviceToleration, ...] = ()


@dataclass(frozen=True)
class ClaimAsk:
    """A ResourceClaim as the allocator reads it.

    Attributes:
        namespace, name, uid: the claim.
        requests: its requests when it is gputopo's (empty for other drivers' claims).
        ours: every request names a gputopo DeviceClass.
        allocated: ``status.allocation`` is set (by anyone).
        allocation: gputopo's devices in that allocation (None when unallocated or none).
        node: the node its allocation is on (gputopo's pool), None when unknown.
        reserved_for: UIDs in ``status.reservedFor``.
        owner_pod: UID of the pod that owns it (a claim made from a template), else "".
        resource_version: ``metadata.resourceVersion`` (the status write's precondition).
        protected: carries :data:`DELETE_PROTECTION`.
        deleting: ``metadata.deletionTimestamp`` is set.
    """

    namespace: str
    name: str
    uid: str
    requests: tuple[RequestAsk, ...] = ()
    ours: bool = False
    allocated: bool = False
    allocation: ClaimAllocation | None = None
    node: str | None = None
    reserved_for: tuple[str, ...] = ()
    owner_pod: str = ""
    resource_version: str = ""
    protected: bool = False
    deleting: bool = False

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _capacity(request: Mapping[str, Any], where: str) -> dict[str, Any]:
    cap = request.get("capacity") or {}
    reqs = cap.get("requests") if isinstance(cap, Mapping) else None
    if not reqs:
        return {}
    if not isinstance(reqs, Mapping):
        raise ClaimError(f"{where}: capacity.requests is not a mapping")
    out: dict[str, Any] = {}
    for key, value in reqs.items():
        name = str(key).removeprefix(DRIVER + "/")
        if name not in (CAP_COMPUTE, CAP_MEMORY, CAP_SLOTS):
            raise ClaimError(f"{where}: unknown capacity {key!r} (gputopo devices have "
                             f"{CAP_COMPUTE}, {CAP_MEMORY}, {CAP_SLOTS})")
        out[name] = value
    return out


def _request(claim_key: str, request: Mapping[str, Any]) -> RequestAsk | None:
    """The gputopo request of one ``spec.devices.requests[]`` entry (None: another driver's).

    Raises:
        ClaimError: a gputopo class asked in a way the allocator cannot honour.
    """
    name = str(request.get("name", ""))
    where = f"claim {claim_key}, request {name!r}"
    sub = request.get("firstAvailable") or []
    if sub:
        if any(isinstance(s, Mapping) and s.get("deviceClassName") in CLASS_KINDS for s in sub):
            raise ClaimError(f"{where}: firstAvailable lists naming gputopo classes are not "
                             "supported; ask for one class with exactly")
        return None
    exact = request.get("exactly")
    if not isinstance(exact, Mapping):
        return None
    cls = exact.get("deviceClassName")
    if cls not in CLASS_KINDS:
        return None
    kind = CLASS_KINDS[str(cls)]
    mode = exact.get("allocationMode") or "ExactCount"
    if mode != "ExactCount":
        raise ClaimError(f"{where}: allocationMode {mode} is not supported for {cls}; ask for a "
                         "count")
    if exact.get("adminAccess"):
        raise ClaimError(f"{where}: adminAccess is not supported for {cls}")
    if exact.get("selectors"):
        raise ClaimError(f"{where}: CEL selectors are not supported for {cls} (gputopo's "
                         "placement policy chooses the GPUs; use gputopo.io/ annotations)")
    count = exact.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ClaimError(f"{where}: count {count!r} is not a positive integer")
    cap = _capacity(exact, where)
    tols = _tolerations(exact, where)
    if kind is DeviceKind.GPU:
        if cap:
            raise ClaimError(f"{where}: whole GPUs ({cls}) take no capacity requests; ask "
                             "share.gpu.gputopo.io for a share")
        return RequestAsk(name, str(cls), kind, count, tolerations=tols)
    if count != 1:
        raise ClaimError(f"{where}: a {kind.value} is one device: count must be 1, not {count}")
    try:
        memory = quantity_mib(cap[CAP_MEMORY]) if CAP_MEMORY in cap else 0
        core = parse_quantity(cap[CAP_COMPUTE]) if CAP_COMPUTE in cap else 0
        slots = parse_quantity(cap[CAP_SLOTS]) if CAP_SLOTS in cap else 1
    except DRAContractError as exc:
        raise ClaimError(f"{where}: {exc}") from None
    if kind is DeviceKind.SLOT:
        if core:
            raise ClaimError(f"{where}: a co-location slot takes no {CAP_COMPUTE}; its share "
                             "of the GPU follows from its profile")
        if slots != 1:
            raise ClaimError(f"{where}: a co-location job takes exactly 1 slot, not {slots}")
        return RequestAsk(name, str(cls), kind, 1, 0, memory, tols)
    if CAP_SLOTS in cap:
        raise ClaimError(f"{where}: a share takes no {CAP_SLOTS}; a co-located job asks "
                         f"{CLASS_SLOT} for a slot")
    if core.denominator != 1 or not 0 <= core <= FULL_CORE:
        raise ClaimError(f"{where}: {CAP_COMPUTE} {cap[CAP_COMPUTE]!r} is not a percent "
                         f"0-{FULL_CORE}")
    if core == 0 and memory == 0:
        raise ClaimError(f"{where}: a share asks {CAP_COMPUTE} (percent of a GPU) and/or "
                         f"{CAP_MEMORY}; this one asks neither")
    return RequestAsk(name, str(cls), kind, 1, int(core), memory, tols)


def _tolerations(exact: Mapping[str, Any], where: str) -> tuple[DeviceToleration, ...]:
    """A request's ``exactly.tolerations`` (the API server has validated and defaulted them).

    Raises:
        ClaimError: they are not a list of objects.
    """
    raw = exact.get("tolerations") or []
    if not isinstance(raw, list) or not all(isinstance(t, Mapping) for t in raw):
        raise ClaimError(f"{where}: tolerations must be a list of objects")
    return tuple(DeviceToleration(str(t.get("key") or ""), str(t.get("operator") or "Equal"),
                                  str(t.get("value") or ""), str(t.get("effect") or ""))
                 for t in raw)


def _allocated_node(allocation: Mapping[str, Any]) -> str | None:
    """The node an allocation's nodeSelector pins it to (``metadata.name In [node]``)."""
    sel = allocation.get("nodeSelector")
    terms = sel.get("nodeSelectorTerms") if isinstance(sel, Mapping) else None
    for term in terms or []:
        for req in (term or {}).get("matchFields") or []:
            values = req.get("values") or []
            if req.get("key") == "metadata.name" and req.get("operator") == "In" and \
                    len(values) == 1:
                return str(values[0])
    return None


def parse_claim(claim: Mapping[str, Any]) -> ClaimAsk:
    """Read a ResourceClaim.

    Raises:
        ClaimError: the claim asks gputopo's classes in a way the allocator cannot honour
            (module docstring), or its gputopo allocation breaks the DRA contract.
    """
    meta = _meta(claim)
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    key = f"{ns}/{name}"
    spec = claim.get("spec") if isinstance(claim.get("spec"), Mapping) else {}
    devices = (spec or {}).get("devices") or {}
    ours: list[RequestAsk] = []
    others: list[str] = []
    for r in devices.get("requests") or []:
        if not isinstance(r, Mapping):
            continue
        ask = _request(key, r)
        if ask is None:
            others.append(str(r.get("name", "")))
        else:
            ours.append(ask)
    if ours and others:
        raise ClaimError(
            f"claim {key} mixes gputopo requests ({', '.join(a.name for a in ours)}) with "
            f"other drivers' ({', '.join(others)}); put gputopo's GPUs in a claim of their own")
    if ours:
        mine = {a.name for a in ours}
        for c in devices.get("constraints") or []:
            named = set((c or {}).get("requests") or []) or mine
            if named & mine:
                raise ClaimError(f"claim {key}: constraints on gputopo requests are not "
                                 "supported (gputopo's placement policy chooses the GPUs)")
        kinds = {a.kind for a in ours}
        if len(kinds) > 1:
            raise ClaimError(f"claim {key} mixes "
                             f"{' and '.join(sorted(k.value for k in kinds))} devices; ask one "
                             "kind per claim")
    status = claim.get("status") if isinstance(claim.get("status"), Mapping) else {}
    alloc_obj = (status or {}).get("allocation")
    allocation: ClaimAllocation | None = None
    node: str | None = None
    if isinstance(alloc_obj, Mapping):
        results = ((alloc_obj.get("devices") or {}).get("results")) or []
        try:
            found = claim_allocation(results)
        except DRAContractError as exc:
            raise ClaimError(f"claim {key}: its allocation: {exc}") from None
        if found.grants:
            allocation = found
            node = found.pool or _allocated_node(alloc_obj)
        else:
            node = _allocated_node(alloc_obj)
    owner = ""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "Pod" and ref.get("controller"):
            owner = str(ref.get("uid") or "")
    reserved = tuple(str(r.get("uid") or "") for r in (status or {}).get("reservedFor") or []
                     if isinstance(r, Mapping))
    return ClaimAsk(
        namespace=ns, name=name, uid=str(meta.get("uid") or ""), requests=tuple(ours),
        ours=bool(ours), allocated=isinstance(alloc_obj, Mapping), allocation=allocation,
        node=node, reserved_for=reserved, owner_pod=owner,
        resource_version=str(meta.get("resourceVersion") or ""),
        protected=DELETE_PROTECTION in (meta.get("finalizers") or []),
        deleting=bool(meta.get("deletionTimestamp")),
    )  # fmt: skip


# ---------------------------------------------------------------------------------- pods
@dataclass(frozen=True)
class PodClaimRef:
    """One entry of a pod's ``spec.resourceClaims``.

    Attributes:
        pod_claim: the entry's name (what containers reference).
        claim: the ResourceClaim's name; None while a template's claim is not created yet.
        from_template: the claim is generated from a ResourceClaimTemplate (owned by the pod).
        needed: False when the resourceclaim controller recorded that no claim is needed.
    """

    pod_claim: str
    claim: str | None
    from_template: bool
    needed: bool = True


def pod_claim_refs(pod: Mapping[str, Any]) -> list[PodClaimRef]:
    """The claims a pod references, in ``spec.resourceClaims`` order (template claims named
    from ``status.resourceClaimStatuses``, as ``resourceclaim.Name`` does)."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    generated: dict[str, str | None] = {}
    seen: set[str] = set()
    for s in (status or {}).get("resourceClaimStatuses") or []:
        if isinstance(s, Mapping) and s.get("name"):
            seen.add(str(s["name"]))
            value = s.get("resourceClaimName")
            generated[str(s["name"])] = str(value) if value else None
    out: list[PodClaimRef] = []
    for rc in (spec or {}).get("resourceClaims") or []:
        if not isinstance(rc, Mapping) or not rc.get("name"):
            continue
        name = str(rc["name"])
        if rc.get("resourceClaimName"):
            out.append(PodClaimRef(name, str(rc["resourceClaimName"]), False))
        elif rc.get("resourceClaimTemplateName"):
            out.append(PodClaimRef(name, generated.get(name), True,
                                   needed=not (name in seen and generated[name] is None)))
    return out


def pod_gated(pod: Mapping[str, Any]) -> bool:
    """The pod carries :data:`SCHEDULING_GATE`."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    return any(isinstance(g, Mapping) and g.get("name") == SCHEDULING_GATE
               for g in (spec or {}).get("schedulingGates") or [])


def pod_demand(claims: Iterable[ClaimAsk]) -> dict[str, int]:
    """The gputopo resources the claims ask, in :func:`scheduler_extender.podspec.pod_resources`
    form with memory in MiB (parse with ``memory_unit_mib=1``): whole GPUs summed over every
    request; a share's compute and memory; a slot with its memory.

    Raises:
        ClaimError: the claims ask more than one kind (whole GPUs, a share, a slot), or more
            than one share or slot: the device-plugin path's rule (one request a pod).
    """
    asks = [a for c in claims for a in c.requests]
    kinds = {a.kind for a in asks}
    if len(kinds) > 1:
        raise ClaimError("the pod's claims ask " + " and ".join(sorted(k.value for k in kinds))
                         + " devices; a pod asks for one kind of gputopo GPU")
    demand = dict.fromkeys((RESOURCE_GPU, RESOURCE_VGPU_CORE, RESOURCE_VGPU_MEMORY,
                            RESOURCE_GPU_SHARED), 0)
    if not asks:
        return demand
    kind = asks[0].kind
    if kind is DeviceKind.GPU:
        demand[RESOURCE_GPU] = sum(a.count for a in asks)
        return demand
    if len(asks) > 1:
        raise ClaimError(f"the pod's claims ask {len(asks)} {kind.value}s; a pod takes one")
    a = asks[0]
    demand[RESOURCE_VGPU_MEMORY] = a.memory_mib
    if kind is DeviceKind.SHARE:
        demand[RESOURCE_VGPU_CORE] = a.core_percent
    else:
        demand[RESOURCE_GPU_SHARED] = 1
    return demand


@dataclass(frozen=True)
class Grant:
    """The part of a pod's decision one claim gets.

    Attributes:
        claim: the claim.
        gpus: per request name, the GPU indices in the pattern's arrangement (one GPU for a
            share or a slot).
        kind: the view the claim's devices are.
        core_percent, memory_mib: a share's compute and memory (MiB), a slot's memory.
    """

    claim: ClaimAsk
    gpus: Mapping[str, tuple[int, ...]]
    kind: DeviceKind
    core_percent: int = 0
    memory_mib: int = 0

    @property
    def indices(self) -> tuple[int, ...]:
        """Every GPU of the claim, request by request."""
        return tuple(g for r in self.claim.requests for g in self.gpus.get(r.name, ()))


def split(
    arrangement: Sequence[int], claims: Sequence[ClaimAsk], *, core_percent: int = 0,
    memory_mib: int = 0,
) -> list[Grant]:
    """Hand a pod's chosen GPUs to its claims: request after request, claim after claim, the
    next ``count`` GPUs of ``arrangement`` (the pattern's vertex order, so each request gets
    neighbours of the pattern).

    Args:
        arrangement: the decision's GPUs, pattern vertex 0 first (``Decision.mapping``).
        claims: the pod's claims to allocate, in the pod's order.
        core_percent, memory_mib: the granted share (compute, MiB) or slot memory.

    Raises:
        ClaimError: the claims ask another number of GPUs than ``arrangement`` holds.
    """
    want = sum(a.count for c in claims for a in c.requests)
    if want != len(arrangement):
        raise ClaimError(f"the pod's claims ask {want} GPUs, the decision has "
                         f"{len(arrangement)}")
    out: list[Grant] = []
    k = 0
    for c in claims:
        per: dict[str, tuple[int, ...]] = {}
        for a in c.requests:
            per[a.name] = tuple(arrangement[k:k + a.count])
            k += a.count
        kind = c.requests[0].kind if c.requests else DeviceKind.GPU
        out.append(Grant(c, per, kind, core_percent if kind is DeviceKind.SHARE else 0,
                         memory_mib if kind is not DeviceKind.GPU else 0))
    return out


def node_selector(node: str) -> dict[str, Any]:
    """The allocation's ``nodeSelector`` for a node-local pool, as kube-scheduler writes it
    (``createNodeSelector``: ``metadata.name In [node]``)."""
    return {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}


def allocation_config(
    claim: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``status.allocation.devices.config`` as kube-scheduler's allocator builds it
    (``incubating.Allocate``): each DeviceClass's ``spec.config`` once, for the requests
    asking that class (source ``FromClass``), then the claim's own ``spec.devices.config``
    (source ``FromClaim``)."""
    devices = ((claim.get("spec") or {}).get("devices")) or {}
    requests = [r for r in devices.get("requests") or [] if isinstance(r, Mapping)]
    out: list[dict[str, Any]] = []
    by_class: dict[str, dict[str, Any]] = {}
    for r in requests:
        cls = str((r.get("exactly") or {}).get("deviceClassName") or "")
        cfgs = ((classes.get(cls) or {}).get("spec") or {}).get("config") or []
        if cls in by_class:
            for entry in out:
                if entry.get("_class") == cls:
                    entry["requests"].append(r.get("name"))
            continue
        by_class[cls] = {}
        for cfg in cfgs:
            out.append({"_class": cls, "source": "FromClass", "requests": [r.get("name")],
                        **{k: v for k, v in cfg.items() if k != "requests"}})
    for entry in out:
        entry.pop("_class", None)
    for cfg in devices.get("config") or []:
        if isinstance(cfg, Mapping):
            out.append({"source": "FromClaim", **cfg})
    return out


def allocation_status(
    claim: Mapping[str, Any], grant: Grant, node: str, *,
    classes: Mapping[str, Mapping[str, Any]], pod_name: str, pod_uid: str, timestamp: str,
    share_ids: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The claim's new ``status``: the allocation of ``grant`` on ``node`` (results in request
    order, config, node selector, ``allocationTimestamp``) and the pod added to
    ``reservedFor`` — what kube-scheduler's PreBind writes, so it finds the claim reserved for
    the pod and writes nothing more.

    Args:
        claim: the claim as read (its spec and any ``reservedFor``).
        grant: what it gets (:func:`split`).
        node: the node (pool).
        classes: DeviceClass name → object (their config is copied).
        pod_name, pod_uid: the consumer.
        timestamp: RFC 3339 time of the allocation.
        share_ids: request name → ``shareID`` (a UID) for a share or slot.

    Raises:
        ClaimError: the grant breaks the DRA contract (a share without its share ID, ...).
    """
    results: list[dict[str, Any]] = []
    try:
        for a in grant.claim.requests:
            results += allocation_results(
                node, grant.gpus[a.name], request=a.name, kind=grant.kind,
                core_percent=grant.core_percent, memory_mib=grant.memory_mib,
                share_ids=[share_ids[a.name]] if share_ids and a.name in share_ids else [])
    except DRAContractError as exc:
        raise ClaimError(f"claim {grant.claim.key}: {exc}") from None
    devices: dict[str, Any] = {"results": results}
    config = allocation_config(claim, classes)
    if config:
        devices["config"] = config
    status = claim.get("status") if isinstance(claim.get("status"), Mapping) else {}
    reserved = [dict(r) for r in (status or {}).get("reservedFor") or []
                if isinstance(r, Mapping) and r.get("uid") != pod_uid]
    reserved.append({"resource": "pods", "name": pod_name, "uid": pod_uid})
    return {
        "allocation": {"devices": devices, "nodeSelector": node_selector(node),
                       "allocationTimestamp": timestamp},
        "reservedFor": reserved,
    }
