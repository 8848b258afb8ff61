"""Energy cost of a node running g GPUs: ANDREAS' c_ng (§IV-A, Table I; §V-A).

ANDREAS §V-A turns the measured power of the ARMIDA nodes into an hourly energy cost "starting
from the base cost of 0.172 EUR/KWh", inflated by the data centre's PUE (Power Usage
Effectiveness) "equal to 1.33, which is the value measured in the ARMIDA setup", to account for
air conditioning, UPS and other overheads. Table I's c_ng is "the energy cost of each node
n ∈ N when g GPUs are used"; Appendix A: "a GPU is considered used if assigned to at least one
job". We model a node's power with two numbers per GPU model (a :class:`PowerProfile`):

    P_n(g) = idle_w + g · gpu_w                                   [W]
    c_ng   = P_n(g) / 1000 · PUE · price                          [EUR/h]

``idle_w`` is what the node draws while it runs jobs with no GPU busy (host CPUs, memory,
fans, idle GPUs); ``gpu_w`` what each busy GPU adds. The paper gives its profiles only as a
figure (Fig. 5), so :data:`BUILTIN_POWER` holds documented estimates; deployments override them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: ANDREAS §V-A: PUE measured in the ARMIDA setup.
DEFAULT_PUE = 1.33
#: ANDREAS §V-A: base energy price, EUR per kWh.
DEFAULT_EUR_PER_KWH = 0.172


class EnergyError(ValueError):
    """A power profile or price is not usable (negative, not finite, unknown GPU model)."""


def _finite(value: float, what: str, *, positive: bool = False) -> float:
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0 or (
        positive and value == 0
    ):
        need = "a positive" if positive else "a non-negative"
        raise EnergyError(f"{what} must be {need} finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class PowerProfile:
    """Power draw of one node type, by GPU model.

    Attributes:
        idle_w: node power with none of its GPUs busy (host, memory, idle GPUs), W.
        gpu_w: power each busy GPU adds, W (a training GPU runs close to its board power).

    Raises:
        EnergyError: a negative or non-finite figure.
    """

    idle_w: float
    gpu_w: float

    def __post_init__(self) -> None:
        _finite(self.idle_w, "idle_w")
        _finite(self.gpu_w, "gpu_w")

    def watts(self, gpus_busy: int) -> float:
        """P_n(g) = idle_w + g · gpu_w, W, for ``gpus_busy`` ≥ 0 busy GPUs."""
        if gpus_busy < 0:
            raise EnergyError(f"busy GPU count must be >= 0, got {gpus_busy}")
        return self.idle_w + gpus_busy * self.gpu_w


@dataclass(frozen=True)
class EnergyPrice:
    """What a kWh drawn by the IT equipment costs the data centre (ANDREAS §V-A).

    Attributes:
        pue: Power Usage Effectiveness (facility energy / IT energy), ≥ 1; default 1.33.
        eur_per_kwh: price of a kWh, EUR; default 0.172.

    Raises:
        EnergyError: PUE below 1 or a negative / non-finite price.
    """

    pue: float = DEFAULT_PUE
    eur_per_kwh: float = DEFAULT_EUR_PER_KWH

    def __post_init__(self) -> None:
        _finite(self.eur_per_kwh, "eur_per_kwh")
        if _finite(self.pue, "pue") < 1.0:
            raise EnergyError(f"pue must be >= 1 (facility energy over IT energy), got {self.pue}")

    def eur_per_hour(self, watts: float) -> float:
        """Cost of drawing ``watts`` W for one hour, EUR: W / 1000 · PUE · price."""
        return watts / 1000.0 * self.pue * self.eur_per_kwh

    def eur(self, watts: float, seconds: float) -> float:
        """Cost of drawing ``watts`` W for ``seconds`` s, EUR."""
        return self.eur_per_hour(watts) * seconds / 3600.0


def node_cost_eur_per_h(power: PowerProfile, gpus_busy: int, price: EnergyPrice) -> float:
    """c_ng of ANDREAS Table I: the cost per hour of a node with ``gpus_busy`` GPUs in use,
    EUR/h (module docstring: P_n(g) / 1000 · PUE · price)."""
    return price.eur_per_hour(power.watts(gpus_busy))


_PREFIXES = ("nvidia ", "tesla ")


def gpu_model_key(name: str) -> str:
    """The short, annotation-friendly key of a GPU model name, as profiles and power tables
    use it: lower case, without a leading ``NVIDIA``/``Tesla``, spaces as dashes.

    ``"Tesla V100-PCIE-32GB"`` → ``"v100-pcie-32gb"``; ``"Tesla T4"`` → ``"t4"``;
    ``"NVIDIA A100-SXM4-40GB"`` → ``"a100-sxm4-40gb"``. Keys pass through unchanged.

    Raises:
        EnergyError: an empty name, or characters other than letters, digits, ``-``, ``_``,
            ``.`` and spaces.
    """
    key = name.strip().lower()
    changed = True
    while changed:
        changed = False
        for prefix in _PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix):].strip()
                changed = True
    key = re.sub(r"\s+", "-", key)
    if not key or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", key):
        raise EnergyError(f"not a GPU model name: {name!r}")
    return key


#: Node idle power assumed for every built-in profile, W. ANDREAS' nodes are two-socket
#: ThunderX2 servers with 256 GB of RAM per socket and an InfiniBand card (Appendix B) whose
#: measured power is only drawn in Fig. 5; 250 W is our estimate of such a host while its GPUs
#: train (two mostly idle 180 W-TDP sockets, 16 DIMMs, fans, NIC, idle GPUs). With it one GPU
#: stays cheaper per job than two whenever the job's two-GPU speed-up is below
#: (250 + 2·250) / (250 + 250) = 1.5 on V100 — the regime §IV-B describes ("execution costs
#: increase linearly with the number of GPUs ... while the speedup ... is sublinear").
DEFAULT_IDLE_W = 250.0

#: Built-in power profiles by GPU model key: ``gpu_w`` is the board power limit from NVIDIA's
#: data sheets (a training GPU runs near it): V100 PCIe 250 W, V100 SXM2 300 W, T4 70 W,
#: P100 SXM2 300 W, P4 75 W, A100 SXM4 400 W.
BUILTIN_POWER: dict[str, PowerProfile] = {
    "v100-pcie-32gb": PowerProfile(DEFAULT_IDLE_W, 250.0),
    "v100-pcie-16gb": PowerProfile(DEFAULT_IDLE_W, 250.0),
    "v100-sxm2-16gb": PowerProfile(DEFAULT_IDLE_W, 300.0),
    "v100-sxm2-32gb": PowerProfile(DEFAULT_IDLE_W, 300.0),
    "t4": PowerProfile(DEFAULT_IDLE_W, 70.0),
    "p100-sxm2-16gb": PowerProfile(DEFAULT_IDLE_W, 300.0),
    "p4": PowerProfile(DEFAULT_IDLE_W, 75.0),
    "a100-sxm4-40gb": PowerProfile(DEFAULT_IDLE_W, 400.0),
}


def power_for(model: str, overrides: dict[str, PowerProfile] | None = None) -> PowerProfile:
    """The power profile of GPU model ``model`` (a name or key): ``overrides`` first, then
    :data:`BUILTIN_POWER`.

    Raises:
        EnergyError: no profile for that model (the message lists the known ones).
    """
    key = gpu_model_key(model)
    table = {**BUILTIN_POWER, **{gpu_model_key(k): v for k, v in (overrides or {}).items()}}
    if key not in table:
        raise EnergyError(
            f"no power profile for GPU model {key!r}; known: {', '.join(sorted(table))} "
            "(add one: idle_w and gpu_w in watts)"
        )
    return table[key]


def node_energy_eur(intervals: Iterable[tuple[str, int, float, float]],
                    power: Mapping[str, PowerProfile], price: EnergyPrice) -> float:
    """Energy cost of jobs run in ``intervals`` = (node, GPUs, start s, end s), EUR, priced per
    node as the simulator does: node n costs c_ng per hour while g ≥ 1 of its GPUs are busy,
    nothing while none is (two jobs sharing a node pay its idle power once).

    Raises:
        EnergyError: an interval on a node without a power profile, or ending before it starts.
    """
    events: dict[str, list[tuple[float, int]]] = {}
    for node, gpus, start, end in intervals:
        if node not in power:
            raise EnergyError(f"no power profile for node {node!r}")
        if end < start:
            raise EnergyError(f"interval on {node} ends ({end}) before it starts ({start})")
        if end == start or gpus <= 0:
            continue
        events.setdefault(node, []).extend(((start, gpus), (end, -gpus)))
    total = 0.0
    for node, evs in events.items():
        evs.sort()
        busy = 0
        last = evs[0][0]
        for t, delta in evs:
            if busy > 0:
                total += node_cost_eur_per_h(power[node], busy, price) * (t - last) / 3600.0
            busy += delta
            last = t
    return total
